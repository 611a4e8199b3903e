// The forms with counts per rank (alltoallv, allgatherv, reduce_scatterv, gatherv, scatterv)
// on "device" memory through the stand-in driver (fakes/fake_cuda.c), in real processes:
// uneven counts (a rank that sends nothing to some peers, one that receives nothing),
// displacements with gaps between the blocks (which must stay as they were), in place and
// not, 2 and 3 ranks, blocking and nonblocking, against values each rank can compute.
#include <criterion/criterion.h>

#include <cstring>
#include <string>
#include <vector>

#include "device_checks.h"
#include "fake_device.h"
#include "harness.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

// Element i of what rank `from` sends to rank `to`: exact in every type used here.
double sent(int from, int to, size_t i) {
  return static_cast<double>(from * 40 + to * 8) + static_cast<double>(i % 7);
}

// How many elements rank `from` sends to rank `to`: uneven, some none (rank 0 sends none to
// rank 1; in a symmetric pattern, for the in-place alltoallv, the same both ways).
size_t pair_count(int from, int to, bool symmetric) {
  if (symmetric) return static_cast<size_t>((from + to) % 3 + 1);
  if (from == 0 && to == 1) return 0;
  return static_cast<size_t>((from * 3 + to) % 4 + 1);
}

// Displacements of blocks of `counts`, one element of gap before each.
std::vector<size_t> gapped(const std::vector<size_t> &counts, size_t *extent) {
  std::vector<size_t> displs;
  size_t at = 0;
  for (size_t c : counts) {
    displs.push_back(at + 1);
    at += 1 + c;
  }
  *extent = at;
  return displs;
}

int check_alltoallv(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, bool in_place,
                    bool nonblocking) {
  const size_t elem = ddl_datatype_size(dtype);
  std::vector<size_t> scounts, rcounts;
  for (int q = 0; q < nranks; ++q) {
    scounts.push_back(pair_count(rank, q, in_place));
    rcounts.push_back(pair_count(q, rank, in_place));
  }
  size_t sextent = 0, rextent = 0;
  const std::vector<size_t> sdispls = gapped(scounts, &sextent);
  const std::vector<size_t> rdispls = gapped(rcounts, &rextent);
  DeviceBuffer send(sextent * elem), recv(rextent * elem);
  poison(dtype, send.shadow(), sextent);
  poison(dtype, recv.shadow(), rextent);
  // In place, the data to send is read from recvbuf at rdispls (counts the same both ways).
  unsigned char *src = in_place ? recv.shadow() : send.shadow();
  const std::vector<size_t> &src_displs = in_place ? rdispls : sdispls;
  for (int q = 0; q < nranks; ++q)
    for (size_t i = 0; i < scounts[q]; ++i)
      store_value(dtype, src, src_displs[q] + i, sent(rank, q, i));
  const void *sendbuf = in_place ? recv.device() : send.device();
  const size_t *sc = in_place ? nullptr : scounts.data();
  const size_t *sd = in_place ? nullptr : sdispls.data();
  if (nonblocking) {
    ddl_request_t req = nullptr;
    RANK_OK(ddl_ialltoallv(sendbuf, sc, sd, recv.device(), rcounts.data(), rdispls.data(), dtype,
                           comm, &req));
    RANK_OK(ddl_wait(req));
    RANK_OK(ddl_request_free(req));
  } else {
    RANK_OK(
        ddl_alltoallv(sendbuf, sc, sd, recv.device(), rcounts.data(), rdispls.data(), dtype, comm));
  }
  for (int q = 0; q < nranks; ++q) {
    const double gap = load_value(dtype, recv.shadow(), rdispls[q] - 1);
    RANK_CHECK(gap == poisoned(dtype), "alltoallv%s: the gap before block %d was written: %g",
               in_place ? " in place" : "", q, gap);
    for (size_t i = 0; i < rcounts[q]; ++i) {
      const double v = load_value(dtype, recv.shadow(), rdispls[q] + i);
      RANK_CHECK(v == sent(q, rank, i), "alltoallv %s%s block %d [%zu]: %g, want %g",
                 ddl_datatype_name(dtype), in_place ? " in place" : "", q, i, v, sent(q, rank, i));
    }
  }
  return 0;
}

// allgatherv (every rank), then gatherv to the last rank: rank q contributes q % 3 + 1
// elements (rank 0 none in the gatherv, to test an empty block).
int check_gathers(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  const int root = nranks - 1;
  for (bool to_root : {false, true}) {
    std::vector<size_t> counts;
    for (int q = 0; q < nranks; ++q)
      counts.push_back(to_root && q == 0 ? 0 : static_cast<size_t>(q % 3 + 1));
    size_t extent = 0;
    const std::vector<size_t> displs = gapped(counts, &extent);
    DeviceBuffer mine(counts[rank] * elem), all(extent * elem);
    poison(dtype, all.shadow(), extent);
    const bool here_in_place = in_place && (!to_root || rank == root);
    unsigned char *src = here_in_place ? all.shadow() + displs[rank] * elem : mine.shadow();
    for (size_t i = 0; i < counts[rank]; ++i) store_value(dtype, src, i, sent(rank, 0, i));
    const void *sendbuf =
        here_in_place ? static_cast<const unsigned char *>(all.device()) + displs[rank] * elem
                      : mine.device();
    if (to_root)
      RANK_OK(ddl_gatherv(sendbuf, counts[rank], all.device(), counts.data(), displs.data(), dtype,
                          root, comm));
    else
      RANK_OK(ddl_allgatherv(sendbuf, counts[rank], all.device(), counts.data(), displs.data(),
                             dtype, comm));
    if (to_root && rank != root) continue;  // its recvbuf is not the call's
    const char *what = to_root ? "gatherv" : "allgatherv";
    for (int q = 0; q < nranks; ++q) {
      RANK_CHECK(load_value(dtype, all.shadow(), displs[q] - 1) == poisoned(dtype),
                 "%s: the gap before block %d was written", what, q);
      for (size_t i = 0; i < counts[q]; ++i) {
        const double v = load_value(dtype, all.shadow(), displs[q] + i);
        RANK_CHECK(v == sent(q, 0, i), "%s %s%s block %d [%zu]: %g, want %g", what,
                   ddl_datatype_name(dtype), in_place ? " in place" : "", q, i, v, sent(q, 0, i));
      }
    }
  }
  return 0;
}

// scatterv from rank 0 (block q: q + 1 elements after a gap), then reduce_scatterv (sum) of
// blocks of q % 2 + 1 elements packed in rank order.
int check_scatters(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  std::vector<size_t> counts;
  for (int q = 0; q < nranks; ++q) counts.push_back(static_cast<size_t>(q + 1));
  size_t extent = 0;
  const std::vector<size_t> displs = gapped(counts, &extent);
  DeviceBuffer all(extent * elem), mine(counts[rank] * elem);
  poison(dtype, mine.shadow(), counts[rank]);
  if (rank == 0)
    for (int q = 0; q < nranks; ++q)
      for (size_t i = 0; i < counts[q]; ++i)
        store_value(dtype, all.shadow(), displs[q] + i, sent(0, q, i));
  const bool root_in_place = in_place && rank == 0;
  void *recvbuf =
      root_in_place ? static_cast<unsigned char *>(all.device()) + displs[0] * elem : mine.device();
  RANK_OK(ddl_scatterv(all.device(), counts.data(), displs.data(), recvbuf, counts[rank], dtype, 0,
                       comm));
  const unsigned char *got = root_in_place ? all.shadow() + displs[0] * elem : mine.shadow();
  for (size_t i = 0; i < counts[rank]; ++i)
    RANK_CHECK(load_value(dtype, got, i) == sent(0, rank, i), "scatterv %s%s [%zu]: %g",
               ddl_datatype_name(dtype), in_place ? " in place" : "", i, load_value(dtype, got, i));
  // reduce_scatterv: block q of every rank's sendbuf (sent(rank, q, i)) summed into rank q.
  std::vector<size_t> blocks;
  size_t total = 0, before = 0;
  for (int q = 0; q < nranks; ++q) {
    blocks.push_back(static_cast<size_t>(q % 2 + 1));
    if (q < rank) before += blocks.back();
    total += blocks.back();
  }
  DeviceBuffer in(total * elem), out(blocks[rank] * elem);
  poison(dtype, out.shadow(), blocks[rank]);
  for (int q = 0, at = 0; q < nranks; at += static_cast<int>(blocks[q]), ++q)
    for (size_t i = 0; i < blocks[q]; ++i)
      store_value(dtype, in.shadow(), at + i, sent(rank, q, i));
  void *rs_recv =
      in_place ? static_cast<unsigned char *>(in.device()) + before * elem : out.device();
  RANK_OK(ddl_reduce_scatterv(in.device(), rs_recv, blocks.data(), dtype, DDL_SUM, comm));
  const unsigned char *sum = in_place ? in.shadow() + before * elem : out.shadow();
  for (size_t i = 0; i < blocks[rank]; ++i) {
    double want = 0;
    for (int q = 0; q < nranks; ++q) want += sent(q, rank, i);
    RANK_CHECK(load_value(dtype, sum, i) == want, "reduce_scatterv %s%s [%zu]: %g, want %g",
               ddl_datatype_name(dtype), in_place ? " in place" : "", i, load_value(dtype, sum, i),
               want);
  }
  return 0;
}

int every_form(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda::get();
  for (ddl_datatype_t dtype : {DDL_FLOAT32, DDL_INT64, DDL_BFLOAT16})
    for (bool in_place : {false, true}) {
      if (check_alltoallv(comm, rank, nranks, dtype, in_place, false)) return 1;
      if (check_alltoallv(comm, rank, nranks, dtype, in_place, true)) return 1;
      if (check_gathers(comm, rank, nranks, dtype, in_place)) return 1;
      if (check_scatters(comm, rank, nranks, dtype, in_place)) return 1;
    }
  return 0;
}

// Sends and receives of device memory go through host memory (lib/device/bounce.h): a ring
// of isend/irecv between device buffers; a tagged send from device memory into a receive of
// host memory; a receive from any source into device memory.
int device_sends_and_receives(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda::get();
  const size_t n = 1001;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  DeviceBuffer out(n * 4), in(n * 4);
  fill_inputs(DDL_FLOAT32, DDL_SUM, rank, out.shadow(), n);
  memset(in.shadow(), 0xee, n * 4);
  ddl_request_t send = nullptr, recv = nullptr;
  RANK_OK(ddl_irecv(in.device(), n, DDL_FLOAT32, prev, comm, &recv));
  RANK_OK(ddl_isend(out.device(), n, DDL_FLOAT32, next, comm, &send));
  RANK_CHECK(ddl_wait(send) == DDL_SUCCESS && ddl_wait(recv) == DDL_SUCCESS, "%s",
             ddl_comm_last_error(nullptr));
  for (size_t i = 0; i < n; ++i)
    RANK_CHECK(
        load_value(DDL_FLOAT32, in.shadow(), i) == input_value(DDL_FLOAT32, DDL_SUM, prev, i),
        "ring: [%zu] from rank %d", i, prev);
  std::vector<double> host(n, -1);
  DeviceBuffer dev(n * 8);
  if (rank == 0) {
    fill_inputs(DDL_FLOAT64, DDL_SUM, 0, dev.shadow(), n);
    RANK_OK(ddl_send_tag(dev.device(), n, DDL_FLOAT64, 1, 7, comm));
    memset(dev.shadow(), 0xee, n * 8);
    int source = -1;
    RANK_OK(ddl_recv_tag(dev.device(), n, DDL_FLOAT64, DDL_ANY_SOURCE, 8, comm, &source));
    RANK_CHECK(source == 1, "any source: from rank %d", source);
    for (size_t i = 0; i < n; ++i)
      RANK_CHECK(
          load_value(DDL_FLOAT64, dev.shadow(), i) == input_value(DDL_FLOAT64, DDL_SUM, 1, i),
          "any source into device memory [%zu]", i);
  } else if (rank == 1) {
    RANK_OK(ddl_recv_tag(host.data(), n, DDL_FLOAT64, 0, 7, comm, nullptr));
    for (size_t i = 0; i < n; ++i)
      RANK_CHECK(host[i] == input_value(DDL_FLOAT64, DDL_SUM, 0, i), "device to host [%zu]: %g", i,
                 host[i]);
    fill_inputs(DDL_FLOAT64, DDL_SUM, 1, reinterpret_cast<unsigned char *>(host.data()), n);
    RANK_OK(ddl_send_tag(host.data(), n, DDL_FLOAT64, 0, 8, comm));
  }
  // The communicator goes on, with device memory in its collectives too.
  return check_alltoallv(comm, rank, nranks, DDL_FLOAT32, false, false);
}

}  // namespace

Test(device_counts, every_form_on_2_ranks) {
  const std::string failures = run_ranks(2, every_form, with_fake(nullptr));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(device_counts, every_form_on_3_ranks_with_slow_copies) {
  // Slow copies: a host call that started before its slot was filled would read poison.
  const std::string failures = run_ranks(3, every_form, with_fake(nullptr, "200"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(device_counts, send_and_receive_take_device_memory) {
  for (int nranks : {2, 3}) {
    const std::string failures = run_ranks(nranks, device_sends_and_receives, with_fake(nullptr));
    cr_assert(failures.empty(), "%d ranks: %s", nranks, failures.c_str());
  }
}

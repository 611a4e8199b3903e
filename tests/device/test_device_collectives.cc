// Device buffers through the stand-in CUDA driver (fakes/fake_cuda.c), in real processes:
// every collective on "device" memory (the forms with counts per rank, and send and receive,
// aside) (which crashes if the host touches it) against a
// float64 host reference, outputs poisoned first, in place and not, odd counts, 2-4 ranks,
// blocking, nonblocking and grouped; host and device buffers mixed refused; stream-ordered
// calls ordered between a "kernel" that writes the input and one that reads the output; a
// failed or aborted stream call still releases the stream; a rank killed during device
// allreduces named by every survivor; no driver: every buffer is host memory.
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device_checks.h"
#include "fake_device.h"
#include "harness.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

// One collective on device buffers, checked against the reference; 0 when right.
int check_allreduce(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op,
                    size_t n, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  DeviceBuffer in(n * elem), out(n * elem);
  fill_inputs(dtype, op, rank, in.shadow(), n);
  poison(dtype, out.shadow(), n);
  void *recv = in_place ? in.device() : out.device();
  RANK_OK(ddl_allreduce(in.device(), recv, n, dtype, op, comm));
  const unsigned char *got = in_place ? in.shadow() : out.shadow();
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, got, i), want = expected_value(dtype, op, nranks, i);
    RANK_CHECK(value_matches(dtype, op, v, want), "allreduce %s %s n=%zu%s [%zu]: %g, want %g",
               ddl_datatype_name(dtype), ddl_op_name(op), n, in_place ? " in place" : "", i, v,
               want);
  }
  return 0;
}

int check_broadcast(ddl_comm_t comm, int rank, ddl_datatype_t dtype, size_t n, int root) {
  DeviceBuffer buf(n * ddl_datatype_size(dtype));
  if (rank == root)
    fill_inputs(dtype, DDL_SUM, root, buf.shadow(), n);
  else
    poison(dtype, buf.shadow(), n);
  RANK_OK(ddl_broadcast(buf.device(), n, dtype, root, comm));
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, buf.shadow(), i);
    const double want = input_value(dtype, DDL_SUM, root, i);
    RANK_CHECK(v == want, "broadcast %s n=%zu root %d [%zu]: %g, want %g", ddl_datatype_name(dtype),
               n, root, i, v, want);
  }
  return 0;
}

int check_allgather(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, size_t n,
                    bool in_place) {
  const size_t elem = ddl_datatype_size(dtype), total = n * static_cast<size_t>(nranks);
  DeviceBuffer send(n * elem), recv(total * elem);
  poison(dtype, recv.shadow(), total);
  const void *sendbuf = send.device();
  if (in_place) {
    fill_inputs(dtype, DDL_SUM, rank, recv.shadow() + rank * n * elem, n);
    sendbuf = static_cast<unsigned char *>(recv.device()) + rank * n * elem;
  } else {
    fill_inputs(dtype, DDL_SUM, rank, send.shadow(), n);
  }
  RANK_OK(ddl_allgather(sendbuf, recv.device(), n, dtype, comm));
  for (int q = 0; q < nranks; ++q)
    for (size_t i = 0; i < n; ++i) {
      const double v = load_value(dtype, recv.shadow(), q * n + i);
      const double want = input_value(dtype, DDL_SUM, q, i);
      RANK_CHECK(v == want, "allgather %s n=%zu%s block %d [%zu]: %g, want %g",
                 ddl_datatype_name(dtype), n, in_place ? " in place" : "", q, i, v, want);
    }
  return 0;
}

int check_reduce_scatter(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op,
                         size_t n, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype), total = n * static_cast<size_t>(nranks);
  DeviceBuffer send(total * elem), recv(n * elem);
  fill_inputs(dtype, op, rank, send.shadow(), total);
  poison(dtype, recv.shadow(), n);
  unsigned char *recvbuf = static_cast<unsigned char *>(recv.device());
  const unsigned char *got = recv.shadow();
  if (in_place) {
    recvbuf = static_cast<unsigned char *>(send.device()) + rank * n * elem;
    got = send.shadow() + rank * n * elem;
  }
  RANK_OK(ddl_reduce_scatter(send.device(), recvbuf, n, dtype, op, comm));
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, got, i);
    const double want = expected_value(dtype, op, nranks, rank * n + i);
    RANK_CHECK(value_matches(dtype, op, v, want), "reduce_scatter %s %s n=%zu%s [%zu]: %g, want %g",
               ddl_datatype_name(dtype), ddl_op_name(op), n, in_place ? " in place" : "", i, v,
               want);
  }
  return 0;
}

// Alltoall: rank r's block q (input values q*n..) goes to rank q's block r.
int check_alltoall(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, size_t n,
                   bool in_place) {
  const size_t elem = ddl_datatype_size(dtype), total = n * static_cast<size_t>(nranks);
  DeviceBuffer send(total * elem), recv(total * elem);
  fill_inputs(dtype, DDL_SUM, rank, send.shadow(), total);
  poison(dtype, recv.shadow(), total);
  void *recvbuf = in_place ? send.device() : recv.device();
  RANK_OK(ddl_alltoall(send.device(), recvbuf, n, dtype, comm));
  const unsigned char *got = in_place ? send.shadow() : recv.shadow();
  for (int q = 0; q < nranks; ++q)
    for (size_t i = 0; i < n; ++i) {
      const double v = load_value(dtype, got, q * n + i);
      const double want = input_value(dtype, DDL_SUM, q, rank * n + i);
      RANK_CHECK(v == want, "alltoall %s n=%zu%s block %d [%zu]: %g, want %g",
                 ddl_datatype_name(dtype), n, in_place ? " in place" : "", q, i, v, want);
    }
  return 0;
}

// Reduce to `root`; the others' recvbuf stays as it was.
int check_reduce(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op, size_t n,
                 int root, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  DeviceBuffer in(n * elem), out(n * elem);
  fill_inputs(dtype, op, rank, in.shadow(), n);
  poison(dtype, out.shadow(), n);
  const bool root_in_place = in_place && rank == root;
  RANK_OK(ddl_reduce(in.device(), root_in_place ? in.device() : out.device(), n, dtype, op, root,
                     comm));
  const unsigned char *got = root_in_place ? in.shadow() : out.shadow();
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, got, i);
    const double want = rank == root ? expected_value(dtype, op, nranks, i) : poisoned(dtype);
    RANK_CHECK(rank == root ? value_matches(dtype, op, v, want) : v == want,
               "reduce %s %s n=%zu root %d%s [%zu]: %g, want %g", ddl_datatype_name(dtype),
               ddl_op_name(op), n, root, in_place ? " in place" : "", i, v, want);
  }
  return 0;
}

// Gather to `root` (in place: the root's block already in its recvbuf); scatter from it.
int check_gather_scatter(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, size_t n,
                         int root, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype), total = n * static_cast<size_t>(nranks);
  const bool root_in_place = in_place && rank == root;
  DeviceBuffer mine(n * elem), all(total * elem);
  poison(dtype, all.shadow(), total);
  if (root_in_place) {
    fill_inputs(dtype, DDL_SUM, rank, all.shadow() + rank * n * elem, n);
  } else {
    fill_inputs(dtype, DDL_SUM, rank, mine.shadow(), n);
  }
  const void *sendbuf =
      root_in_place ? static_cast<unsigned char *>(all.device()) + rank * n * elem : mine.device();
  RANK_OK(ddl_gather(sendbuf, all.device(), n, dtype, root, comm));
  for (int q = 0; q < nranks; ++q)
    for (size_t i = 0; i < n; ++i) {
      const double v = load_value(dtype, all.shadow(), q * n + i);
      const double want = rank == root ? input_value(dtype, DDL_SUM, q, i) : poisoned(dtype);
      RANK_CHECK(v == want, "gather %s n=%zu root %d%s block %d [%zu]: %g, want %g",
                 ddl_datatype_name(dtype), n, root, in_place ? " in place" : "", q, i, v, want);
    }
  // Scatter: the root's total inputs, rank q getting block q.
  if (rank == root) fill_inputs(dtype, DDL_SUM, root, all.shadow(), total);
  poison(dtype, mine.shadow(), n);
  void *recvbuf =
      root_in_place ? static_cast<unsigned char *>(all.device()) + rank * n * elem : mine.device();
  RANK_OK(ddl_scatter(all.device(), recvbuf, n, dtype, root, comm));
  const unsigned char *got = root_in_place ? all.shadow() + rank * n * elem : mine.shadow();
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, got, i);
    const double want = input_value(dtype, DDL_SUM, root, rank * n + i);
    RANK_CHECK(v == want, "scatter %s n=%zu root %d%s [%zu]: %g, want %g", ddl_datatype_name(dtype),
               n, root, in_place ? " in place" : "", i, v, want);
  }
  return 0;
}

// Inclusive and exclusive prefix reductions; rank 0's exscan output stays as it was.
int check_scans(ddl_comm_t comm, int rank, ddl_datatype_t dtype, ddl_op_t op, size_t n,
                bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  for (bool exclusive : {false, true}) {
    DeviceBuffer in(n * elem), out(n * elem);
    fill_inputs(dtype, op, rank, in.shadow(), n);
    poison(dtype, out.shadow(), n);
    void *recvbuf = in_place ? in.device() : out.device();
    RANK_OK(exclusive ? ddl_exscan(in.device(), recvbuf, n, dtype, op, comm)
                      : ddl_scan(in.device(), recvbuf, n, dtype, op, comm));
    const unsigned char *got = in_place ? in.shadow() : out.shadow();
    const int upto = exclusive ? rank : rank + 1;  // ranks 0..upto-1
    for (size_t i = 0; i < n; ++i) {
      const double v = load_value(dtype, got, i);
      const double before = in_place ? input_value(dtype, op, rank, i) : poisoned(dtype);
      const double want = upto == 0 ? before : expected_value(dtype, op, upto, i);
      RANK_CHECK(upto == 0 ? v == want : value_matches(dtype, op, v, want),
                 "%s %s %s n=%zu%s [%zu]: %g, want %g", exclusive ? "exscan" : "scan",
                 ddl_datatype_name(dtype), ddl_op_name(op), n, in_place ? " in place" : "", i, v,
                 want);
    }
  }
  return 0;
}

int every_collective(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda::get();
  const ddl_datatype_t dtypes[] = {DDL_FLOAT32,  DDL_FLOAT64, DDL_INT32,
                                   DDL_BFLOAT16, DDL_FLOAT16, DDL_UINT8};
  const size_t counts[] = {1, 7, 1003};
  for (ddl_datatype_t dtype : dtypes)
    for (size_t n : counts) {
      for (bool in_place : {false, true}) {
        for (ddl_op_t op : {DDL_SUM, DDL_AVG, DDL_MAX})
          if (check_allreduce(comm, rank, nranks, dtype, op, n, in_place)) return 1;
        if (check_allgather(comm, rank, nranks, dtype, n, in_place)) return 1;
        if (check_reduce_scatter(comm, rank, nranks, dtype, DDL_SUM, n, in_place)) return 1;
      }
      for (int root : {0, nranks - 1})
        if (check_broadcast(comm, rank, dtype, n, root)) return 1;
      for (bool in_place : {false, true}) {
        if (check_alltoall(comm, rank, nranks, dtype, n, in_place)) return 1;
        if (check_scans(comm, rank, dtype, DDL_SUM, n, in_place)) return 1;
        for (int root : {0, nranks - 1}) {
          if (check_reduce(comm, rank, nranks, dtype, DDL_MAX, n, root, in_place)) return 1;
          if (check_gather_scatter(comm, rank, nranks, dtype, n, root, in_place)) return 1;
        }
      }
    }
  // Larger than one stage: several chunks in flight.
  if (check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 300001, false)) return 1;
  return 0;
}

void expect_every_collective(int nranks, const char *stage_bytes) {
  const std::string failures = run_ranks(nranks, every_collective, with_fake(stage_bytes));
  cr_assert(failures.empty(), "%d ranks, stage %s: %s", nranks, stage_bytes, failures.c_str());
}

}  // namespace

// Stages of 96 B: most calls take several chunks, allgather and reduce_scatter many.
Test(device, every_collective_2_ranks_small_stages) {
  expect_every_collective(2, "96");
}
Test(device, every_collective_3_ranks_small_stages) {
  expect_every_collective(3, "96");
}
Test(device, every_collective_4_ranks_default_stages) {
  expect_every_collective(4, nullptr);
}

// Nonblocking and grouped calls on device buffers: the staging runs on the progress thread
// (the fake's copies need the buffers' context current there). Slow copies: any missing
// wait would read a slot before its input has arrived.
Test(device, nonblocking_and_grouped) {
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        const size_t n = 501;
        DeviceBuffer ar(n * 4), bc(n * 8), ag_in(n * 4), ag_out(n * 4 * nranks),
            rs_in(n * 4 * nranks), rs_out(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, ar.shadow(), n);
        if (rank == 1)
          fill_inputs(DDL_FLOAT64, DDL_SUM, 1, bc.shadow(), n);
        else
          poison(DDL_FLOAT64, bc.shadow(), n);
        fill_inputs(DDL_INT32, DDL_SUM, rank, ag_in.shadow(), n);
        poison(DDL_INT32, ag_out.shadow(), n * nranks);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, rs_in.shadow(), n * nranks);
        poison(DDL_FLOAT32, rs_out.shadow(), n);
        ddl_request_t r[4];
        RANK_OK(ddl_iallreduce(ar.device(), ar.device(), n, DDL_FLOAT32, DDL_SUM, comm, &r[0]));
        RANK_OK(ddl_ibroadcast(bc.device(), n, DDL_FLOAT64, 1, comm, &r[1]));
        RANK_OK(ddl_iallgather(ag_in.device(), ag_out.device(), n, DDL_INT32, comm, &r[2]));
        RANK_OK(ddl_ireduce_scatter(rs_in.device(), rs_out.device(), n, DDL_FLOAT32, DDL_SUM, comm,
                                    &r[3]));
        for (ddl_request_t req : r) {
          RANK_CHECK(ddl_wait(req) == DDL_SUCCESS, "%s", ddl_comm_last_error(nullptr));
          RANK_OK(ddl_request_free(req));
        }
        for (size_t i = 0; i < n; ++i) {
          RANK_CHECK(load_value(DDL_FLOAT32, ar.shadow(), i) ==
                         expected_value(DDL_FLOAT32, DDL_SUM, nranks, i),
                     "iallreduce [%zu]", i);
          RANK_CHECK(
              load_value(DDL_FLOAT64, bc.shadow(), i) == input_value(DDL_FLOAT64, DDL_SUM, 1, i),
              "ibroadcast [%zu]", i);
          for (int q = 0; q < nranks; ++q)
            RANK_CHECK(load_value(DDL_INT32, ag_out.shadow(), q * n + i) ==
                           input_value(DDL_INT32, DDL_SUM, q, i),
                       "iallgather block %d [%zu]", q, i);
          RANK_CHECK(load_value(DDL_FLOAT32, rs_out.shadow(), i) ==
                         expected_value(DDL_FLOAT32, DDL_SUM, nranks, rank * n + i),
                     "ireduce_scatter [%zu]", i);
        }
        // The rooted calls and alltoall in flight together too.
        DeviceBuffer a2a_in(n * 4 * nranks), a2a_out(n * 4 * nranks), sc_in(n * 4 * nranks),
            sc_out(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, a2a_in.shadow(), n * nranks);
        fill_inputs(DDL_FLOAT32, DDL_SUM, 2, sc_in.shadow(), n * nranks);
        ddl_request_t rooted[2];
        RANK_OK(ddl_ialltoall(a2a_in.device(), a2a_out.device(), n, DDL_FLOAT32, comm, &rooted[0]));
        RANK_OK(ddl_iscatter(sc_in.device(), sc_out.device(), n, DDL_FLOAT32, 2, comm, &rooted[1]));
        for (ddl_request_t req : rooted) {
          RANK_CHECK(ddl_wait(req) == DDL_SUCCESS, "%s", ddl_comm_last_error(nullptr));
          RANK_OK(ddl_request_free(req));
        }
        for (size_t i = 0; i < n; ++i) {
          for (int q = 0; q < nranks; ++q)
            RANK_CHECK(load_value(DDL_FLOAT32, a2a_out.shadow(), q * n + i) ==
                           input_value(DDL_FLOAT32, DDL_SUM, q, rank * n + i),
                       "ialltoall block %d [%zu]", q, i);
          RANK_CHECK(load_value(DDL_FLOAT32, sc_out.shadow(), i) ==
                         input_value(DDL_FLOAT32, DDL_SUM, 2, rank * n + i),
                     "iscatter [%zu]", i);
        }
        // Small device allreduces in a group: not fused (the fusion buffer is host memory).
        std::vector<std::unique_ptr<DeviceBuffer>> small;
        RANK_OK(ddl_group_start());
        for (int k = 0; k < 3; ++k) {
          small.emplace_back(new DeviceBuffer(16 * 4));
          fill_inputs(DDL_FLOAT32, DDL_SUM, rank, small.back()->shadow(), 16);
          RANK_OK(ddl_allreduce(small.back()->device(), small.back()->device(), 16, DDL_FLOAT32,
                                DDL_SUM, comm));
        }
        RANK_CHECK(ddl_group_end() == DDL_SUCCESS, "%s", ddl_comm_last_error(nullptr));
        for (auto &b : small)
          for (size_t i = 0; i < 16; ++i)
            RANK_CHECK(load_value(DDL_FLOAT32, b->shadow(), i) ==
                           expected_value(DDL_FLOAT32, DDL_SUM, nranks, i),
                       "grouped [%zu]", i);
        return 0;
      },
      with_fake("200", "300"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// Host and device buffers in one call: an invalid argument at the call, naming the rank, the
// collective and which buffer is which; the communicator stays usable. A stream-ordered call
// inside a group is refused.
Test(device, mixing_host_and_device_buffers_is_refused) {
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        DeviceBuffer dev(64 * 4);
        std::vector<float> host(64 * nranks, 1.0f);
        char rank_words[32];
        snprintf(rank_words, sizeof rank_words, "rank %d", rank);
        ddl_result_t r = ddl_allreduce(dev.device(), host.data(), 64, DDL_FLOAT32, DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT, "%s", ddl_result_string(r));
        const char *why = ddl_comm_last_error(comm);
        RANK_CHECK(contains(why, rank_words) && contains(why, "allreduce") &&
                       contains(why, "sendbuf") && contains(why, "is device memory") &&
                       contains(why, "recvbuf") && contains(why, "is host memory"),
                   "%s", why);
        ddl_request_t req = nullptr;
        r = ddl_iallgather(host.data(), dev.device(), 64, DDL_FLOAT32, comm, &req);
        RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT && req == nullptr, "%s", ddl_result_string(r));
        why = ddl_comm_last_error(comm);
        RANK_CHECK(contains(why, rank_words) && contains(why, "allgather") &&
                       contains(why, "sendbuf") && contains(why, "is host memory"),
                   "%s", why);
        r = ddl_reduce_scatter_stream(host.data(), dev.device(), 32, DDL_FLOAT32, DDL_SUM, comm,
                                      nullptr);
        RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT, "%s", ddl_result_string(r));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "reduce_scatter"), "%s",
                   ddl_comm_last_error(comm));
        // Stream-ordered calls are not grouped.
        RANK_OK(ddl_group_start());
        r = ddl_allreduce_stream(dev.device(), dev.device(), 64, DDL_FLOAT32, DDL_SUM, comm,
                                 nullptr);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE && contains(ddl_comm_last_error(comm), "grouped"),
                   "%s: %s", ddl_result_string(r), ddl_comm_last_error(comm));
        RANK_CHECK(ddl_group_end() == DDL_SUCCESS, "%s", ddl_comm_last_error(nullptr));
        // Still usable: both kinds, one call each.
        RANK_OK(ddl_allreduce(host.data(), host.data(), 64, DDL_FLOAT32, DDL_SUM, comm));
        RANK_CHECK(host[0] == nranks, "host allreduce: %g", host[0]);
        return check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 64, true);
      },
      with_fake("128"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

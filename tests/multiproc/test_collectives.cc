// Broadcast, allgather, reduce_scatter and barrier across real processes.
#include <criterion/criterion.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>
#include <vector>

#include "harness.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

const size_t kCounts[] = {0, 1, 7, 13, 1021, 300007};

int check_broadcast(ddl_comm_t comm, int rank, int nranks) {
  for (int root = 0; root < nranks; ++root)
    for (size_t count : kCounts)
      for (ddl_datatype_t dtype : {DDL_UINT8, DDL_FLOAT16, DDL_FLOAT64}) {
        std::vector<unsigned char> buf(count * ddl_datatype_size(dtype) + 1, 0xEE);
        if (rank == root) fill_inputs(dtype, DDL_SUM, root, buf.data(), count);
        RANK_OK(ddl_broadcast(buf.data(), count, dtype, root, comm));
        for (size_t i = 0; i < count; ++i)
          RANK_CHECK(load_value(dtype, buf.data(), i) == input_value(dtype, DDL_SUM, root, i),
                     "rank %d: broadcast root %d count %zu: element %zu wrong", rank, root, count,
                     i);
        RANK_CHECK(buf.back() == 0xEE, "rank %d: broadcast wrote past the end", rank);
      }
  return 0;
}

int check_allgather(ddl_comm_t comm, int rank, int nranks) {
  for (size_t count : kCounts)
    for (bool in_place : {false, true}) {
      const ddl_datatype_t dtype = DDL_INT32;
      const size_t elem = ddl_datatype_size(dtype);
      std::vector<unsigned char> recv(count * nranks * elem + 1, 0xEE), send(count * elem + 1);
      // Each rank's block holds indices rank*count.. so the layout is checkable.
      fill_inputs(dtype, DDL_SUM, rank, send.data(), count, rank * count);
      const void *src = send.data();
      if (in_place) {
        std::memcpy(recv.data() + rank * count * elem, send.data(), count * elem);
        src = recv.data() + rank * count * elem;
      }
      RANK_OK(ddl_allgather(src, recv.data(), count, dtype, comm));
      for (int r = 0; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i) {
          const size_t at = r * count + i;
          RANK_CHECK(load_value(dtype, recv.data(), at) == input_value(dtype, DDL_SUM, r, at),
                     "rank %d: allgather count %zu: block %d element %zu wrong", rank, count, r, i);
        }
      RANK_CHECK(recv.back() == 0xEE, "rank %d: allgather wrote past the end", rank);
    }
  return 0;
}

int check_reduce_scatter(ddl_comm_t comm, int rank, int nranks) {
  for (size_t count : kCounts)
    for (ddl_op_t op : {DDL_SUM, DDL_MAX, DDL_AVG})
      for (bool in_place : {false, true}) {
        const ddl_datatype_t dtype = op == DDL_AVG ? DDL_FLOAT32 : DDL_INT64;
        const size_t elem = ddl_datatype_size(dtype);
        std::vector<unsigned char> send(count * nranks * elem + 1), recv(count * elem + 1, 0xEE);
        fill_inputs(dtype, op, rank, send.data(), count * nranks);
        void *out = in_place ? send.data() + rank * count * elem : recv.data();
        RANK_OK(ddl_reduce_scatter(send.data(), out, count, dtype, op, comm));
        for (size_t i = 0; i < count; ++i) {
          const double got = load_value(dtype, out, i);
          const double want = expected_value(dtype, op, nranks, rank * count + i);
          RANK_CHECK(value_matches(dtype, op, got, want),
                     "rank %d: reduce_scatter count %zu op %s: element %zu is %g, expected %g",
                     rank, count, ddl_op_name(op), i, got, want);
        }
      }
  return 0;
}

constexpr int kBarriers = 50;

// Every rank counts itself in before each barrier, in memory the ranks share (mapped before
// they fork), one of them late: no rank may leave a barrier before every count is in.
int check_barrier(ddl_comm_t comm, int rank, int nranks, std::atomic<int> *arrivals) {
  for (int i = 0; i < kBarriers; ++i) {
    if (rank == i % nranks) usleep(1000);
    arrivals[i].fetch_add(1);
    RANK_OK(ddl_barrier(comm));
    const int in = arrivals[i].load();
    RANK_CHECK(in == nranks, "rank %d left barrier %d with %d of %d ranks in", rank, i, in, nranks);
  }
  return 0;
}

void expect_all_ranks_pass(int nranks) {
  void *shared = mmap(nullptr, sizeof(std::atomic<int>) * kBarriers, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(shared != MAP_FAILED);
  auto *arrivals = new (shared) std::atomic<int>[kBarriers]();
  std::string failures = run_ranks(nranks, [arrivals](ddl_comm_t comm, int rank, int n) {
    if (int rc = check_broadcast(comm, rank, n)) return rc;
    if (int rc = check_allgather(comm, rank, n)) return rc;
    if (int rc = check_reduce_scatter(comm, rank, n)) return rc;
    return check_barrier(comm, rank, n, arrivals);
  });
  munmap(shared, sizeof(std::atomic<int>) * kBarriers);
  cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
}

}  // namespace

Test(collectives, one_rank) {
  expect_all_ranks_pass(1);
}
Test(collectives, two_ranks) {
  expect_all_ranks_pass(2);
}
Test(collectives, three_ranks) {
  expect_all_ranks_pass(3);
}
Test(collectives, four_ranks) {
  expect_all_ranks_pass(4);
}
Test(collectives, five_ranks) {
  expect_all_ranks_pass(5);
}
Test(collectives, eight_ranks) {
  expect_all_ranks_pass(8);
}

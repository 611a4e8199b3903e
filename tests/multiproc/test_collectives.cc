// Broadcast, allgather, reduce_scatter and barrier across real processes.
#include <criterion/criterion.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
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

// The single-copy broadcast and allgather (lib/core/direct_copy.h) and the paths they sit
// between (shared slots, schedules), around their thresholds: every datatype, odd counts,
// every root, in place and not. Each rank's data differs, so a block read from the wrong
// rank or offset shows.
const size_t kPathCounts[] = {1, 7, 4095, 4097, 16385, 65537, 300007};

int check_paths(ddl_comm_t comm, int rank, int nranks) {
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d) {
    const ddl_datatype_t dtype = static_cast<ddl_datatype_t>(d);
    const size_t elem = ddl_datatype_size(dtype);
    for (size_t count : kPathCounts) {
      // The largest count for three datatypes (1, 2 and 8 bytes) keeps the test short.
      if (count > 100000 && dtype != DDL_UINT8 && dtype != DDL_FLOAT16 && dtype != DDL_FLOAT64)
        continue;
      for (int root = 0; root < nranks; ++root) {
        std::vector<unsigned char> buf(count * elem + 1, 0xEE);
        if (rank == root) fill_inputs(dtype, DDL_SUM, root, buf.data(), count);
        RANK_OK(ddl_broadcast(buf.data(), count, dtype, root, comm));
        for (size_t i = 0; i < count; ++i)
          RANK_CHECK(load_value(dtype, buf.data(), i) == input_value(dtype, DDL_SUM, root, i),
                     "rank %d: broadcast %s root %d count %zu: element %zu wrong", rank,
                     ddl_datatype_name(dtype), root, count, i);
        RANK_CHECK(buf.back() == 0xEE, "rank %d: broadcast wrote past the end", rank);
      }
      for (bool in_place : {false, true}) {
        std::vector<unsigned char> recv(count * nranks * elem + 1, 0xEE), send(count * elem);
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
                       "rank %d: allgather %s count %zu%s: block %d element %zu wrong", rank,
                       ddl_datatype_name(dtype), count, in_place ? " in place" : "", r, i);
          }
        RANK_CHECK(recv.back() == 0xEE, "rank %d: allgather wrote past the end", rank);
      }
    }
  }
  return 0;
}

// Runs check_paths with `variable`=`value` set in every rank (value null: unset).
void expect_paths_pass(int nranks, const char *variable, const char *value) {
  RunOptions options;
  options.before_init = [variable, value](int) {
    unsetenv("DDL_ALGO");
    if (value)
      setenv(variable, value, 1);
    else
      unsetenv(variable);
  };
  const std::string failures = run_ranks(nranks, check_paths, options);
  cr_assert(failures.empty(), "%d ranks, %s=%s:\n%s", nranks, variable, value ? value : "(unset)",
            failures.c_str());
}

}  // namespace

// Broadcast over every rail (lib/algorithms/rail_broadcast.h) for real: emulated hosts (each
// its own DDL_HOST_ID), by single copy inside hosts and through the cells (DDL_CMA=0), every
// root, counts that leave parts empty and one over several chunks.
Test(collectives, rails_broadcast_on_hosts) {
  for (int per_host : {2, 3})
    for (bool single_copy : {true, false}) {
      RunOptions options;
      options.before_init = [single_copy, per_host](int rank) {
        setenv("DDL_ALGO", "rails", 1);
        setenv("DDL_HOST_ID", ("emulated" + std::to_string(rank / per_host)).c_str(), 1);
        if (!single_copy) setenv("DDL_CMA", "0", 1);
      };
      const std::string failures = run_ranks(
          6,
          [](ddl_comm_t comm, int rank, int n) {
            for (ddl_datatype_t dtype : {DDL_FLOAT32, DDL_UINT8})
              for (size_t count : {size_t{1}, size_t{5}, size_t{1021}, size_t{300007}})
                for (int root = 0; root < n; ++root) {
                  const size_t elem = ddl_datatype_size(dtype);
                  std::vector<unsigned char> buf(count * elem + 1, 0xEE);
                  if (rank == root) fill_inputs(dtype, DDL_SUM, root, buf.data(), count);
                  RANK_OK(ddl_broadcast(buf.data(), count, dtype, root, comm));
                  for (size_t i = 0; i < count; ++i)
                    RANK_CHECK(
                        load_value(dtype, buf.data(), i) == input_value(dtype, DDL_SUM, root, i),
                        "rank %d: %s root %d count %zu: element %zu wrong", rank,
                        ddl_datatype_name(dtype), root, count, i);
                  RANK_CHECK(buf.back() == 0xEE, "rank %d: wrote past the end", rank);
                }
            return 0;
          },
          options);
      cr_assert(failures.empty(), "DDL_ALGO=rails, %d hosts x %d%s:\n%s", 6 / per_host, per_host,
                single_copy ? "" : " (DDL_CMA=0)", failures.c_str());
    }
}

// hier_bruck's allgather and reduce-scatter (ceil(log2 H) rounds between hosts) for real:
// 3 emulated hosts of 2 ranks (each its own DDL_HOST_ID: shared memory or single copies
// inside a host, UCX between), with and without single copies (DDL_CMA=0).
Test(collectives, hier_bruck_on_three_hosts) {
  for (bool single_copy : {true, false}) {
    RunOptions options;
    options.before_init = [single_copy](int rank) {
      setenv("DDL_ALGO", "hier_bruck", 1);
      setenv("DDL_HOST_ID", ("emulated" + std::to_string(rank / 2)).c_str(), 1);
      if (!single_copy) setenv("DDL_CMA", "0", 1);
    };
    const std::string failures = run_ranks(
        6,
        [](ddl_comm_t comm, int rank, int n) {
          if (int rc = check_allgather(comm, rank, n)) return rc;
          return check_reduce_scatter(comm, rank, n);
        },
        options);
    cr_assert(failures.empty(), "DDL_ALGO=hier_bruck, 3 hosts x 2%s:\n%s",
              single_copy ? "" : " (DDL_CMA=0)", failures.c_str());
  }
}

// Default choice: slots, single copy and schedules by size, with ranks sharing cores or not.
Test(collectives, broadcast_allgather_every_path) {
  for (int nranks : {2, 3, 4, 8}) expect_paths_pass(nranks, "DDL_ALGO", nullptr);
}
// The single copy at every size.
Test(collectives, broadcast_allgather_direct_forced) {
  for (int nranks : {2, 3, 5}) expect_paths_pass(nranks, "DDL_ALGO", "direct");
}
// No cross-memory attach: slots and schedules only (what a restricted kernel gets).
Test(collectives, broadcast_allgather_without_cma) {
  for (int nranks : {2, 5}) expect_paths_pass(nranks, "DDL_CMA", "0");
}
// DDL_ALGO naming the schedules keeps the single copy off for their collectives.
Test(collectives, broadcast_allgather_schedules_forced) {
  expect_paths_pass(3, "DDL_ALGO", "ring");
  expect_paths_pass(3, "DDL_ALGO", "chain");
}

// Mismatched calls through the single copy fail on every rank, before anyone reads another
// rank's memory: both ranks claiming the root of 256 KB, and a large allgather against a
// small one (single copy against the slots).
Test(collectives, direct_copy_mismatch_fails_every_rank) {
  using Call = ddl_result_t (*)(ddl_comm_t, int, float *);
  const std::pair<Call, const char *> cases[] = {
      {[](ddl_comm_t comm, int rank, float *buf) {
         return ddl_broadcast(buf, 1 << 16, DDL_FLOAT32, rank, comm);
       },
       "root 1"},
      {[](ddl_comm_t comm, int rank, float *buf) {
         return ddl_allgather(buf, buf + (1 << 17), rank == 0 ? 1 << 16 : 64, DDL_FLOAT32, comm);
       },
       "count 65536"},
  };
  for (const auto &c : cases) {
    RunOptions options;
    options.comm_timeout_ms = 3000;
    options.before_init = [](int) { unsetenv("DDL_ALGO"); };
    const std::string failures = run_ranks(
        2,
        [&c](ddl_comm_t comm, int rank, int) {
          std::vector<float> buf(1 << 19);
          const ddl_result_t r = c.first(comm, rank, buf.data());
          const std::string error = ddl_comm_last_error(comm);
          RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "rank %d got %s: %s", rank, ddl_result_string(r),
                     error.c_str());
          RANK_CHECK(error.find("mismatched collective calls") != std::string::npos &&
                         error.find(c.second) != std::string::npos,
                     "rank %d: %s", rank, error.c_str());
          return 0;
        },
        options);
    cr_assert(failures.empty(), "%s:\n%s", c.second, failures.c_str());
  }
}

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

// Nobody leaves a barrier before the last rank has entered it: the last rank writes a file
// only then (after a pause, so that a barrier that does not wait is caught), and every rank
// finds it after the barrier. Over shared memory's slots and over UCX's signals (DDL_SHM=0),
// where a barrier once compared its call with the ring's neighbour only.
Test(collectives, barrier_waits_for_every_rank) {
  for (const char *shm : {"1", "0"}) {
    char dir[] = "/tmp/ddl_barrier_XXXXXX";
    cr_assert(mkdtemp(dir) != nullptr);
    const std::string marker = std::string(dir) + "/entered";
    RunOptions options;
    options.before_init = [shm](int) { setenv("DDL_SHM", shm, 1); };
    std::string failures = run_ranks(
        5,
        [&marker](ddl_comm_t comm, int rank, int nranks) {
          for (int round = 0; round < 3; ++round) {
            const std::string mine = marker + std::to_string(round);
            if (rank == nranks - 1) {
              usleep(200 * 1000);
              FILE *f = fopen(mine.c_str(), "w");
              RANK_CHECK(f != nullptr, "cannot write %s", mine.c_str());
              fclose(f);
            }
            RANK_OK(ddl_barrier(comm));
            RANK_CHECK(access(mine.c_str(), F_OK) == 0,
                       "rank %d left barrier %d before rank %d entered it", rank, round,
                       nranks - 1);
          }
          return 0;
        },
        options);
    for (int round = 0; round < 3; ++round) unlink((marker + std::to_string(round)).c_str());
    rmdir(dir);
    cr_assert(failures.empty(), "DDL_SHM=%s:\n%s", shm, failures.c_str());
  }
}

// Every allreduce algorithm (and the single-copy path, "direct", and the shared slots,
// "flat", which take counts up to 64 KB and leave larger ones to the models), forced through
// DDL_ALGO,
// on 1..8 real processes: every datatype
// and op at small counts that do not divide by the rank count, float32 sum at ~100003
// elements, in place and out of place. The verifier proves the schedules right
// symbolically (tests/unit/test_schedules.cc); this runs them over the real transports and
// reduction kernels. Also: the override shows in the logs, and an unknown name is refused
// on every rank with the list of known ones.
#include <criterion/criterion.h>

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "ddl/ddl.hpp"
#include "harness.h"
#include "lib/common/datatype.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

// Allreduces `count` elements and checks every one, the send buffer left alone out of
// place, and nothing written past the end of the result.
// Buffers from ddl_mem_alloc, which peers on the host map instead of copying through the
// kernel (lib/core/direct_allreduce.h); std::vector's interface, as far as the checks use it.
class SharedBytes : public ddl::SharedBuffer<unsigned char> {
 public:
  SharedBytes(size_t size, unsigned char fill) : SharedBuffer(size) {
    std::memset(data(), fill, size);
  }
};

template <typename Bytes>
int check_allreduce_in(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op,
                       size_t count, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  Bytes send(count * elem + 1, 0xCD), recv(count * elem + 1, 0xAB);
  RANK_CHECK(send.data() && recv.data(), "rank %d: no buffers", rank);
  fill_inputs(dtype, op, rank, send.data(), count);
  const std::vector<unsigned char> original(send.data(), send.data() + send.size());
  void *out = in_place ? send.data() : recv.data();
  RANK_OK(ddl_allreduce(send.data(), out, count, dtype, op, comm));
  for (size_t i = 0; i < count; ++i) {
    const double got = load_value(dtype, out, i), want = expected_value(dtype, op, nranks, i);
    RANK_CHECK(value_matches(dtype, op, got, want),
               "rank %d of %d: %s %s count %zu %s: element %zu is %g, expected %g", rank, nranks,
               ddl_datatype_name(dtype), ddl_op_name(op), count,
               in_place ? "in place" : "out of place", i, got, want);
  }
  const unsigned char *end = static_cast<unsigned char *>(out) + count * elem;
  RANK_CHECK(*end == (in_place ? 0xCD : 0xAB), "rank %d: wrote past the end of the result", rank);
  if (!in_place)
    RANK_CHECK(std::memcmp(send.data(), original.data(), send.size()) == 0,
               "rank %d: the send buffer changed (%s %s count %zu)", rank, ddl_datatype_name(dtype),
               ddl_op_name(op), count);
  return 0;
}

int check_allreduce(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op,
                    size_t count, bool in_place) {
  return check_allreduce_in<std::vector<unsigned char>>(comm, rank, nranks, dtype, op, count,
                                                        in_place);
}

// The single-copy path with buffers from ddl_mem_alloc: on every rank (peers' data read in
// place), or on the even ranks only (each rank reads each peer the way that peer allows).
int shared_memory_sweep(ddl_comm_t comm, int rank, int nranks, bool every_rank) {
  const bool shared = every_rank || rank % 2 == 0;
  for (ddl_op_t op : {DDL_SUM, DDL_MAX, DDL_AVG})
    for (ddl_datatype_t dtype : {DDL_FLOAT32, DDL_BFLOAT16, DDL_INT64})
      for (size_t count : {size_t{1}, size_t{13}, size_t{100003}})
        for (bool in_place : {false, true}) {
          const int rc = shared ? check_allreduce_in<SharedBytes>(comm, rank, nranks, dtype, op,
                                                                  count, in_place)
                                : check_allreduce(comm, rank, nranks, dtype, op, count, in_place);
          if (rc) return rc;
        }
  return 0;
}

int sweep(ddl_comm_t comm, int rank, int nranks) {
  // 0 and 1 leave most blocks empty; 7 and 13 are prime; 1021 spans several blocks.
  const size_t small[] = {0, 1, 7, 13, 1021};
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d)
    for (int o = 0; o < DDL_OP_COUNT; ++o)
      for (size_t count : small)
        for (bool in_place : {false, true})
          if (int rc = check_allreduce(comm, rank, nranks, static_cast<ddl_datatype_t>(d),
                                       static_cast<ddl_op_t>(o), count, in_place))
            return rc;
  // A prime above the default chunk (512 KB of float32 is 131072 elements at 1 rank).
  for (bool in_place : {false, true})
    if (int rc = check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 100003, in_place))
      return rc;
  return 0;
}

void expect_sweep_passes(const char *algorithm, int nranks) {
  RunOptions options;
  options.before_init = [algorithm](int) { setenv("DDL_ALGO", algorithm, 1); };
  const std::string failures = run_ranks(nranks, sweep, options);
  cr_assert(failures.empty(), "DDL_ALGO=%s, %d ranks:\n%s", algorithm, nranks, failures.c_str());
}

// Ranks on emulated hosts (`sizes[h]` ranks on host h, numbered host by host, each host
// its own DDL_HOST_ID): shared memory inside a host, UCX between hosts, as on a cluster.
// Single copies inside a host unless `single_copy` is false (DDL_CMA=0).
RunOptions on_hosts(const char *algorithm, const std::vector<int> &sizes, bool single_copy) {
  std::vector<int> host_of;
  for (size_t h = 0; h < sizes.size(); ++h) host_of.insert(host_of.end(), sizes[h], h);
  RunOptions options;
  options.before_init = [algorithm, host_of, single_copy](int rank) {
    if (*algorithm) setenv("DDL_ALGO", algorithm, 1);
    if (!single_copy) setenv("DDL_CMA", "0", 1);
    setenv("DDL_HOST_ID", ("emulated" + std::to_string(host_of[rank])).c_str(), 1);
  };
  return options;
}

int ranks_on(const std::vector<int> &sizes) {
  int n = 0;
  for (int size : sizes) n += size;
  return n;
}

void expect_sweep_on_hosts(const char *algorithm, const std::vector<int> &sizes,
                           bool single_copy = true) {
  const std::string failures =
      run_ranks(ranks_on(sizes), sweep, on_hosts(algorithm, sizes, single_copy));
  cr_assert(failures.empty(), "DDL_ALGO=%s on %zu hosts%s:\n%s", algorithm, sizes.size(),
            single_copy ? "" : " (DDL_CMA=0)", failures.c_str());
}

// Counts of a few elements per rank, with and without a tail that does not divide among the
// ranks (hier_bruck allreduces it beside): every type and op small, float32 sum and avg over
// several chunks, in and out of place.
int per_rank_sweep(ddl_comm_t comm, int rank, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d)
    for (int o = 0; o < DDL_OP_COUNT; ++o)
      for (size_t count : {n, 7 * n + 3})
        for (bool in_place : {false, true})
          if (int rc = check_allreduce(comm, rank, nranks, static_cast<ddl_datatype_t>(d),
                                       static_cast<ddl_op_t>(o), count, in_place))
            return rc;
  for (ddl_op_t op : {DDL_SUM, DDL_AVG})
    for (size_t count : {1021 * n + 5, 100003 * n})
      for (bool in_place : {false, true})
        if (int rc = check_allreduce(comm, rank, nranks, DDL_FLOAT32, op, count, in_place))
          return rc;
  return 0;
}

// Runs nranks with DDL_ALGO=algorithm, logged (run_ranks_logged).
std::string run_logged(const char *algorithm, int nranks, const RankBody &body,
                       std::vector<std::string> *logs) {
  RunOptions options;
  options.before_init = [algorithm](int) { setenv("DDL_ALGO", algorithm, 1); };
  return run_ranks_logged(nranks, body, options, logs);
}

int one_call(ddl_comm_t comm, int rank, int nranks) {
  return check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 7, false);
}

}  // namespace

// One test per algorithm and rank count, so that a failure names both.
#define ALGORITHM_TESTS(name)        \
  Test(algorithms, name##_1_rank) {  \
    expect_sweep_passes(#name, 1);   \
  }                                  \
  Test(algorithms, name##_2_ranks) { \
    expect_sweep_passes(#name, 2);   \
  }                                  \
  Test(algorithms, name##_3_ranks) { \
    expect_sweep_passes(#name, 3);   \
  }                                  \
  Test(algorithms, name##_4_ranks) { \
    expect_sweep_passes(#name, 4);   \
  }                                  \
  Test(algorithms, name##_5_ranks) { \
    expect_sweep_passes(#name, 5);   \
  }                                  \
  Test(algorithms, name##_6_ranks) { \
    expect_sweep_passes(#name, 6);   \
  }                                  \
  Test(algorithms, name##_7_ranks) { \
    expect_sweep_passes(#name, 7);   \
  }                                  \
  Test(algorithms, name##_8_ranks) { \
    expect_sweep_passes(#name, 8);   \
  }

ALGORITHM_TESTS(ring)
ALGORITHM_TESTS(rd)
ALGORITHM_TESTS(rhd)
ALGORITHM_TESTS(tree)
ALGORITHM_TESTS(dbtree)
ALGORITHM_TESTS(direct)
ALGORITHM_TESTS(flat)

// hier_bruck's allreduce (each rail's segment in Bruck rounds) on 3 hosts of 2 and 2 of 3, by
// single copy inside hosts and through the cells.
Test(algorithms, hier_bruck_on_hosts) {
  for (const std::vector<int> &sizes : {std::vector<int>{2, 2, 2}, std::vector<int>{3, 3}})
    for (bool single_copy : {true, false}) {
      const std::string failures =
          run_ranks(ranks_on(sizes), per_rank_sweep, on_hosts("hier_bruck", sizes, single_copy));
      cr_assert(failures.empty(), "DDL_ALGO=hier_bruck on %zu hosts%s:\n%s", sizes.size(),
                single_copy ? "" : " (DDL_CMA=0)", failures.c_str());
    }
}

// hier over hosts of equal and unequal sizes; the verifier covers the shapes beyond 8 ranks.
Test(algorithms, hier_2_hosts_of_2) {
  expect_sweep_on_hosts("hier", {2, 2});
}
Test(algorithms, hier_2_hosts_of_3) {
  expect_sweep_on_hosts("hier", {3, 3});
}
Test(algorithms, hier_hosts_of_3_and_1) {
  expect_sweep_on_hosts("hier", {3, 1});
}
Test(algorithms, hier_hosts_of_1_2_and_2) {
  expect_sweep_on_hosts("hier", {1, 2, 2});
}
Test(algorithms, hier_2_hosts_of_3_through_the_cells) {
  expect_sweep_on_hosts("hier", {3, 3}, false);
}
Test(algorithms, hier_hosts_of_3_and_1_through_the_cells) {
  expect_sweep_on_hosts("hier", {3, 1}, false);
}
Test(algorithms, hier_in_pieces_on_hosts_of_2_3_and_1) {
  // DDL_HIER_PIECES: the vector in pieces whose tiers overlap (lib/algorithms/hier.h), by
  // single copy and through the cells.
  for (bool single_copy : {true, false}) {
    RunOptions options = on_hosts("hier", {2, 3, 1}, single_copy);
    const auto hosts = options.before_init;
    options.before_init = [hosts](int rank) {
      hosts(rank);
      setenv("DDL_HIER_PIECES", "3", 1);
    };
    const std::string failures = run_ranks(6, sweep, options);
    cr_assert(failures.empty(), "DDL_HIER_PIECES=3%s:\n%s", single_copy ? "" : " (DDL_CMA=0)",
              failures.c_str());
  }
}
Test(algorithms, hier_pieces_is_checked) {
  setenv("DDL_HIER_PIECES", "many", 1);
  ddl_comm_t refused = nullptr;
  const ddl_result_t rc = ddl_comm_init(&refused, 1, 0, nullptr, nullptr);
  const std::string words = ddl_comm_last_error(nullptr);
  unsetenv("DDL_HIER_PIECES");
  cr_assert_eq(rc, DDL_ERR_INVALID_ARGUMENT);
  cr_assert(words.find("DDL_HIER_PIECES=many: expected a number of pieces") != std::string::npos,
            "%s", words.c_str());
}
Test(algorithms, models_across_2_hosts_of_2) {
  expect_sweep_on_hosts("", {2, 2});
}

namespace {

int one_large_call(ddl_comm_t comm, int rank, int nranks) {
  return check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 100003, true);
}

}  // namespace

// The log says how hier's host tier copies: once, straight between the ranks of a host,
// where they may attach to each other's memory; through the shared-memory cells otherwise.
Test(algorithms, hier_host_tier_goes_single_copy) {
  const char *said = "single copy between the ranks of a host";
  for (bool single_copy : {true, false}) {
    std::vector<std::string> logs;
    const std::string failures =
        run_ranks_logged(4, one_large_call, on_hosts("hier", {2, 2}, single_copy), &logs);
    cr_assert(failures.empty(), "%s", failures.c_str());
    for (int r = 0; r < 4; ++r) {
      const bool found = logs[r].find(said) != std::string::npos;
      if (single_copy && !found && logs[r].find("no single-copy transfers") != std::string::npos)
        cr_skip("the kernel forbids cross-memory attach here: %s", logs[r].c_str());
      cr_assert(found == single_copy, "DDL_CMA=%d: rank %d's log %s \"%s\":\n%s", single_copy, r,
                single_copy ? "lacks" : "has", said, logs[r].c_str());
    }
  }
}

namespace {

// Slotted allreduces (lib/core/flat_collectives.h) between calls that go other ways, one rank
// lagging now and then: a rank reuses its slot only once every peer has read it, however
// far ahead a broadcast's root or an eager sender ran.
int slotted_between_others(ddl_comm_t comm, int rank, int nranks) {
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t mine[2] = {rank + i, -i * rank};
    int64_t sum[2] = {0, 0};
    RANK_OK(ddl_allreduce(mine, sum, 2, DDL_INT64, DDL_SUM, comm));
    const int64_t ranks_total = int64_t{nranks} * (nranks - 1) / 2;
    RANK_CHECK(sum[0] == nranks * i + ranks_total && sum[1] == -i * ranks_total,
               "rank %d, call %lld: got {%lld, %lld}", rank, static_cast<long long>(i),
               static_cast<long long>(sum[0]), static_cast<long long>(sum[1]));
    if (i % 3 == 0) {
      const int root = static_cast<int>(i % nranks);
      int64_t value = rank == root ? 1000 + i : -1;
      RANK_OK(ddl_broadcast(&value, 1, DDL_INT64, root, comm));
      RANK_CHECK(value == 1000 + i, "rank %d: broadcast %lld gave %lld", rank,
                 static_cast<long long>(i), static_cast<long long>(value));
    }
    if (i % 5 == 0) {
      std::vector<float> big(40000, 1.0f);  // 160 KB: above the slots
      RANK_OK(ddl_allreduce(big.data(), big.data(), big.size(), DDL_FLOAT32, DDL_SUM, comm));
      RANK_CHECK(big[39999] == static_cast<float>(nranks), "rank %d: large allreduce gave %g", rank,
                 big[39999]);
    }
    if (i % 4 == 1) RANK_OK(ddl_barrier(comm));  // slotted too, with nothing to reduce
    if (i % 7 == 0 && rank == static_cast<int>(i / 7 % nranks)) usleep(200);
  }
  return 0;
}

}  // namespace

// The slots' edge: 64 KB fills a slot, one element more goes to a schedule.
Test(algorithms, flat_at_the_slots_capacity) {
  RunOptions options;
  options.before_init = [](int) { setenv("DDL_ALGO", "flat", 1); };
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int nranks) {
        for (size_t count : {size_t{16383}, size_t{16384}, size_t{16385}})
          for (ddl_op_t op : {DDL_SUM, DDL_AVG})
            for (bool in_place : {false, true})
              if (int rc = check_allreduce(comm, rank, nranks, DDL_FLOAT32, op, count, in_place))
                return rc;
        return check_allreduce(comm, rank, nranks, DDL_FLOAT64, DDL_MAX, 8192, false);
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(algorithms, slotted_allreduces_between_other_calls) {
  for (int nranks : {2, 3, 4}) {
    RunOptions options;
    options.before_init = [](int) { unsetenv("DDL_ALGO"); };
    const std::string failures = run_ranks(nranks, slotted_between_others, options);
    cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
  }
}

Test(algorithms, direct_with_ddl_mem_alloc_buffers) {
  for (int nranks : {2, 3, 5})
    for (bool every_rank : {true, false}) {
      RunOptions options;
      options.before_init = [](int) { setenv("DDL_ALGO", "direct", 1); };
      const std::string failures = run_ranks(
          nranks,
          [every_rank](ddl_comm_t comm, int rank, int n) {
            return shared_memory_sweep(comm, rank, n, every_rank);
          },
          options);
      cr_assert(failures.empty(), "%d ranks, ddl_mem_alloc on %s:\n%s", nranks,
                every_rank ? "every rank" : "even ranks", failures.c_str());
    }
}

// The models would pick rd or the tree for 28 B on 3 ranks; each forced name must win, and
// the plan's log line says so on every rank.
Test(algorithms, forced_algorithm_shows_in_the_log) {
  for (const char *algorithm : {"ring", "rd", "rhd", "tree", "dbtree", "direct", "flat"}) {
    std::vector<std::string> logs;
    const std::string failures = run_logged(algorithm, 3, one_call, &logs);
    const std::string expected = std::string("allreduce of 28 B: ") + algorithm + " (forced";
    for (int r = 0; r < 3; ++r)
      cr_assert(failures.empty() && logs[r].find(expected) != std::string::npos,
                "DDL_ALGO=%s: rank %d's log lacks \"%s\":\n%s\n%s", algorithm, r, expected.c_str(),
                failures.c_str(), logs[r].c_str());
  }
}

namespace {

// An allreduce, a broadcast and a barrier of a few bytes, each checked.
int three_small_calls(ddl_comm_t comm, int rank, int nranks) {
  if (int failed = check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, 7, false))
    return failed;
  std::vector<int32_t> data(7, rank == 1 ? 41 : -1);
  RANK_OK(ddl_broadcast(data.data(), data.size(), DDL_INT32, 1, comm));
  for (int32_t v : data) RANK_CHECK(v == 41, "rank %d: broadcast gave %d", rank, v);
  RANK_OK(ddl_barrier(comm));
  return 0;
}

}  // namespace

// DDL_ALGO is read in one place (choose_way, lib/core/dispatch.cc): a one-host way by its name
// takes every collective it can, a schedule's name only its own collectives, and a name that is
// neither for a call leaves that call to the usual choice (here the shared slots for a few bytes).
Test(algorithms, forced_name_takes_the_calls_it_names_only) {
  const std::pair<const char *, std::vector<std::string>> cases[] = {
      {"flat",
       {"allreduce of 28 B: flat (forced", "broadcast of 28 B: flat (forced",
        "barrier of 0 B: flat (forced"}},
      {"chain",
       {"allreduce of 28 B: flat (shared slots", "broadcast of 28 B: chain (forced",
        "barrier of 0 B: flat (shared slots"}},
      {"ring",
       {"allreduce of 28 B: ring (forced", "broadcast of 28 B: flat (shared slots",
        "barrier of 0 B: flat (shared slots"}},
      {"direct",
       {"allreduce of 28 B: direct (forced", "broadcast of 28 B: direct (forced",
        "barrier of 0 B: flat (shared slots"}},
  };
  for (const auto &[algorithm, expected] : cases) {
    std::vector<std::string> logs;
    const std::string failures = run_logged(algorithm, 3, three_small_calls, &logs);
    cr_assert(failures.empty(), "DDL_ALGO=%s:\n%s", algorithm, failures.c_str());
    for (int r = 0; r < 3; ++r)
      for (const std::string &line : expected)
        cr_assert(logs[r].find(line) != std::string::npos,
                  "DDL_ALGO=%s: rank %d's log lacks \"%s\":\n%s", algorithm, r, line.c_str(),
                  logs[r].c_str());
  }
}

namespace {

// Rank 0 sends 7 int32 to rank 1, which checks them.
int one_message(ddl_comm_t comm, int rank, int) {
  std::vector<int32_t> data(7, rank == 0 ? 41 : -1);
  if (rank == 0) RANK_OK(ddl_send(data.data(), data.size(), DDL_INT32, 1, comm));
  if (rank == 1) {
    RANK_OK(ddl_recv(data.data(), data.size(), DDL_INT32, 0, comm));
    for (int32_t v : data) RANK_CHECK(v == 41, "rank 1: received %d", v);
  }
  return 0;
}

}  // namespace

// Sends and receives go through the one dispatch too: their row is logged like any other,
// and no DDL_ALGO name moves them off it.
Test(algorithms, send_and_recv_are_a_row_of_the_dispatch) {
  for (const char *algorithm : {"ring", "flat", "direct"}) {
    std::vector<std::string> logs;
    const std::string failures = run_logged(algorithm, 2, one_message, &logs);
    cr_assert(failures.empty(), "DDL_ALGO=%s:\n%s", algorithm, failures.c_str());
    const char *expected[] = {"send of 28 B: send_recv (", "recv of 28 B: send_recv ("};
    for (int r = 0; r < 2; ++r)
      cr_assert(logs[r].find(expected[r]) != std::string::npos,
                "DDL_ALGO=%s: rank %d's log lacks \"%s\":\n%s", algorithm, r, expected[r],
                logs[r].c_str());
  }
}

// Every rank refuses an unknown name at init, naming it and the known ones, instead of
// falling back silently or waiting for the others.
Test(algorithms, unknown_algorithm_fails_every_rank_clearly) {
  std::vector<std::string> logs;
  const std::string failures = run_logged("rhdd", 3, one_call, &logs);
  for (int r = 0; r < 3; ++r) {
    cr_assert(failures.find("rank " + std::to_string(r) + " exited with 2") != std::string::npos,
              "rank %d should fail in ddl_comm_init:\n%s", r, failures.c_str());
    cr_assert(logs[r].find("DDL_ERR_INVALID_ARGUMENT") != std::string::npos, "rank %d: %s", r,
              logs[r].c_str());
    cr_assert(logs[r].find("DDL_ALGO=rhdd: not an algorithm; known: ring, rd, rhd, tree") !=
                  std::string::npos,
              "rank %d: %s", r, logs[r].c_str());
  }
}

namespace {

// Broadcast from every root, allgather, reduce_scatter and a ring allreduce, each checked.
int every_collective(ddl_comm_t comm, int rank, int nranks) {
  const size_t count = 70001;  // several chunks, odd
  for (int root = 0; root < nranks; ++root) {
    std::vector<int32_t> data(count, rank == root ? root + 1 : -1);
    if (rank == root)
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<int32_t>(i * 3 + root);
    RANK_OK(ddl_broadcast(data.data(), count, DDL_INT32, root, comm));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(data[i] == static_cast<int32_t>(i * 3 + root), "rank %d: broadcast from %d [%zu]",
                 rank, root, i);
  }
  std::vector<double> mine(count, rank + 0.5), all(count * nranks, -1);
  RANK_OK(ddl_allgather(mine.data(), all.data(), count, DDL_FLOAT64, comm));
  for (size_t i = 0; i < all.size(); ++i)
    RANK_CHECK(all[i] == static_cast<double>(i / count) + 0.5, "rank %d: allgather [%zu] = %g",
               rank, i, all[i]);
  std::vector<double> in(count * nranks), out(count, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>(rank + i % 11);
  RANK_OK(ddl_reduce_scatter(in.data(), out.data(), count, DDL_FLOAT64, DDL_SUM, comm));
  for (size_t i = 0; i < count; ++i) {
    const double want = nranks * (nranks - 1) / 2.0 + nranks * ((rank * count + i) % 11);
    RANK_CHECK(out[i] == want, "rank %d: reduce_scatter [%zu] = %g, want %g", rank, i, out[i],
               want);
  }
  return check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, count, false);
}

}  // namespace

// Ranks numbered round-robin over emulated hosts (srun's cyclic distribution): the rings and
// chains follow the hosts (lib/algorithms/ring_order.h), not the rank numbers.
Test(algorithms, rings_and_chains_over_hosts_numbered_round_robin) {
  for (int nranks : {4, 5}) {
    RunOptions options;
    options.before_init = [](int rank) {
      setenv("DDL_ALGO", "ring", 1);
      setenv("DDL_HOST_ID", ("cyclic" + std::to_string(rank % 2)).c_str(), 1);
    };
    const std::string failures = run_ranks(nranks, every_collective, options);
    cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
  }
}

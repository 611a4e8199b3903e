// Going on after failures: ranks are killed (SIGKILL) or stopped (SIGSTOP) in the middle of
// collectives, in the middle of the shrink itself, two at once; every survivor must fail
// promptly, shrink to the same members (in their old order), and compute right on the shrunk
// communicator; the shrunk job grows back with a new process. Also agree and revoke, and bad
// arguments. scripts/elastic_stress.sh repeats the failure kinds many times.
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using ddltest::run_ranks;
using ddltest::RunOptions;

namespace {

bool contains(const std::string &text, const std::string &needle) {
  return text.find(needle) != std::string::npos;
}

double monotonic_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// When the victim killed itself (CLOCK_MONOTONIC, the same clock in every process): in memory
// the test process maps before forking the ranks, so that survivors can time their recovery.
double *g_kill_time = nullptr;

void share_kill_time() {
  if (!g_kill_time)
    g_kill_time = static_cast<double *>(
        mmap(nullptr, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  *g_kill_time = 0;
}

[[noreturn]] void die() {
  *g_kill_time = monotonic_s();
  raise(SIGKILL);
  _exit(99);  // not reached
}

enum class Work { kAllreduce, kSmallAllreduce, kAlltoall };

// Runs calls of `work` until one fails; rank `victim` (of `victims`) kills itself at call 20.
ddl_result_t work_until_failure(ddl_comm_t comm, int rank, int nranks, Work work,
                                const std::vector<int> &victims) {
  const size_t count = work == Work::kSmallAllreduce ? 16 : 1 << 18;
  std::vector<float> data(count, 1.0f), out(count);
  const bool victim = std::find(victims.begin(), victims.end(), rank) != victims.end();
  for (int i = 0;; ++i) {
    if (victim && i == 20) die();
    ddl_result_t r =
        work == Work::kAlltoall
            ? ddl_alltoall(data.data(), out.data(), count / nranks, DDL_FLOAT32, comm)
            : ddl_allreduce(data.data(), data.data(), count, DDL_FLOAT32, DDL_SUM, comm);
    if (r != DDL_SUCCESS) return r;
    if (i > 100000) return DDL_SUCCESS;  // never failed: the caller says so
  }
}

std::vector<int> survivors_of(int nranks, const std::vector<int> &failed) {
  std::vector<int> alive;
  for (int r = 0; r < nranks; ++r)
    if (std::find(failed.begin(), failed.end(), r) == failed.end()) alive.push_back(r);
  return alive;
}

// Checks a shrunk communicator against the survivors it must hold: its size, this rank's new
// rank (old order), the failed ranks the parent agreed on, every member's old rank (so that
// all members hold the same list), and an allreduce of old rank + 1.
int check_shrunk(ddl_comm_t parent, ddl_comm_t comm, int old_rank, const std::vector<int> &alive) {
  int size = 0, rank = -1;
  RANK_OK(ddl_comm_size(comm, &size));
  RANK_OK(ddl_comm_rank(comm, &rank));
  const int expected_rank =
      static_cast<int>(std::find(alive.begin(), alive.end(), old_rank) - alive.begin());
  RANK_CHECK(size == static_cast<int>(alive.size()) && rank == expected_rank,
             "old rank %d: rank %d of %d, expected %d of %zu", old_rank, rank, size, expected_rank,
             alive.size());
  int failed[64], nfailed = 0;
  RANK_CHECK(ddl_comm_failed_ranks(parent, failed, 64, &nfailed) == DDL_SUCCESS, "failed_ranks");
  std::vector<int> members(static_cast<size_t>(size));
  int mine = old_rank;
  RANK_OK(ddl_allgather(&mine, members.data(), 1, DDL_INT32, comm));
  RANK_CHECK(members == alive, "old rank %d: members differ from the survivors", old_rank);
  RANK_CHECK(nfailed + size >= static_cast<int>(alive.size()), "%d failed", nfailed);
  float value = static_cast<float>(old_rank + 1), sum = 0;
  RANK_OK(ddl_allreduce(&value, &sum, 1, DDL_FLOAT32, DDL_SUM, comm));
  float expected = 0;
  for (int r : alive) expected += static_cast<float>(r + 1);
  RANK_CHECK(sum == expected, "old rank %d: sum %g, expected %g", old_rank, sum, expected);
  return 0;
}

// Kill `victims` during `work` on `nranks` ranks; every survivor fails, shrinks, checks the
// shrunk communicator, and says how long kill -> first collective on it took.
void expect_shrink_after_kill(int nranks, Work work, const std::vector<int> &victims,
                              const char *what) {
  share_kill_time();
  RunOptions options;
  options.comm_timeout_ms = 20000;
  options.timeout_ms = 90000;
  const std::string failures = run_ranks(
      nranks,
      [&](ddl_comm_t comm, int rank, int n) {
        ddl_result_t r = work_until_failure(comm, rank, n, work, victims);
        RANK_CHECK(r == DDL_ERR_REMOTE, "%s: rank %d: the call ended with %s: %s", what, rank,
                   ddl_result_string(r), ddl_comm_last_error(comm));
        ddl_comm_t shrunk = nullptr;
        RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
        const std::vector<int> alive = survivors_of(n, victims);
        if (check_shrunk(comm, shrunk, rank, alive) != 0) return 1;
        fprintf(stderr, "%s: rank %d: kill -> first collective on the shrunk communicator %.3f s\n",
                what, rank, monotonic_s() - *g_kill_time);
        RANK_OK(ddl_comm_destroy(shrunk));
        return 0;
      },
      options);
  for (int r : survivors_of(nranks, victims))
    cr_expect(!contains(failures, "rank " + std::to_string(r) + " "), "%s: %s", what,
              failures.c_str());
}

// Rank 3 dies in an allreduce; `victim` dies at a random moment of the 30 ms after its failed
// allreduce returns: before, during or after the shrink (which takes 15-25 ms on 4 ranks
// here). Whatever the moment, the survivors end in one communicator without both: when the
// victim died after the agreement, the first call on the shrunk communicator fails and they
// shrink again.
void expect_death_during_shrink(int victim) {
  share_kill_time();
  RunOptions options;
  options.comm_timeout_ms = 20000;
  options.timeout_ms = 90000;
  const std::string failures = run_ranks(
      5,
      [victim](ddl_comm_t comm, int rank, int n) {
        ddl_result_t r = work_until_failure(comm, rank, n, Work::kAllreduce, {3});
        RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d: %s", rank, ddl_result_string(r));
        if (rank == victim) {
          srand(static_cast<unsigned>(getpid()));
          const int delay_us = rand() % 30000;
          std::thread([delay_us] {
            usleep(static_cast<useconds_t>(delay_us));
            raise(SIGKILL);
          }).detach();
        }
        ddl_comm_t current = comm;
        for (int round = 0; round < 4; ++round) {
          ddl_comm_t shrunk = nullptr;
          RANK_OK(ddl_comm_shrink(current, nullptr, 0, &shrunk));
          if (current != comm) ddl_comm_destroy(current);
          current = shrunk;
          // The victim made it through a shrink before its kill: it calls nothing more, so
          // that the others' next call fails on it (however late its kill comes) and they
          // shrink again.
          while (rank == victim) pause();
          float one = 1, sum = 0;
          if (ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, current) == DDL_SUCCESS) break;
        }
        // The members, in old ranks: allgather over the final communicator. Ranks of `current`
        // are positions among the survivors, so compare the list itself.
        int size = 0;
        RANK_OK(ddl_comm_size(current, &size));
        std::vector<int> members(static_cast<size_t>(size));
        int mine = rank;
        RANK_OK(ddl_allgather(&mine, members.data(), 1, DDL_INT32, current));
        std::vector<int> expected;
        for (int other = 0; other < n; ++other)
          if (other != 3 && other != victim) expected.push_back(other);
        RANK_CHECK(members == expected, "rank %d: %d members", rank, size);
        RANK_OK(ddl_comm_destroy(current));
        return 0;
      },
      options);
  for (int r = 0; r < 5; ++r)
    if (r != 3 && r != victim)
      cr_expect(!contains(failures, "rank " + std::to_string(r) + " "), "%s", failures.c_str());
}

}  // namespace

Test(elastic, a_rank_killed_mid_allreduce_is_shrunk_away) {
  expect_shrink_after_kill(4, Work::kAllreduce, {2}, "allreduce, rank 2 killed");
}

// Rank 0 serves the bootstrap and is the first to decide in an agreement: neither matters.
Test(elastic, rank_0_killed_mid_allreduce_is_shrunk_away) {
  expect_shrink_after_kill(4, Work::kAllreduce, {0}, "allreduce, rank 0 killed");
}

Test(elastic, a_rank_killed_mid_small_allreduces_is_shrunk_away) {
  expect_shrink_after_kill(4, Work::kSmallAllreduce, {1}, "small allreduce, rank 1 killed");
}

Test(elastic, a_rank_killed_mid_alltoall_is_shrunk_away) {
  expect_shrink_after_kill(4, Work::kAlltoall, {3}, "alltoall, rank 3 killed");
}

// More ranks than cores (8 and 16 on 2 here): the shrink's agreement and rendezvous among 7
// and 15 (issue 34 asks for 4, 8 and 16 ranks: bench/recovery.md).
Test(elastic, a_rank_killed_among_8_is_shrunk_away, .timeout = 120) {
  expect_shrink_after_kill(8, Work::kAllreduce, {5}, "allreduce, 8 ranks, rank 5 killed");
}

Test(elastic, a_rank_killed_among_16_is_shrunk_away, .timeout = 120) {
  expect_shrink_after_kill(16, Work::kAllreduce, {9}, "allreduce, 16 ranks, rank 9 killed");
}

Test(elastic, two_ranks_killed_at_once_are_shrunk_away) {
  expect_shrink_after_kill(6, Work::kAllreduce, {1, 4}, "allreduce, ranks 1 and 4 killed");
}

Test(elastic, a_rank_that_dies_during_the_shrink_is_agreed_away) {
  expect_death_during_shrink(1);
}

// Rank 0 makes the agreement's decision when it lives (agreement.h): killed before it decides,
// while it sends the decision, or after, the others end in one communicator all the same.
Test(elastic, rank_0_dying_during_the_shrink_is_agreed_away) {
  expect_death_during_shrink(0);
}

// A rank stopped with SIGSTOP is alive but silent: the others' call ends at its deadline, and
// the shrink leaves the stopped rank out once it has been stopped for DDL_PEER_TIMEOUT_MS.
// Continued afterwards, it is told that it was left out, and gets no seat.
Test(elastic, a_stopped_rank_is_left_out_and_told_so_when_it_continues) {
  RunOptions options;
  options.comm_timeout_ms = 3000;
  options.timeout_ms = 90000;
  options.before_init = [](int) { setenv("DDL_PEER_TIMEOUT_MS", "1000", 1); };
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int n) {
        int64_t pid = getpid(), pids[3] = {};
        RANK_OK(ddl_allgather(&pid, pids, 1, DDL_INT64, comm));
        float one = 1, sum = 0;
        if (rank == 2) {
          raise(SIGSTOP);
          // Continued by rank 0 after the others shrank.
          ddl_comm_t shrunk = nullptr;
          ddl_result_t r = ddl_comm_shrink(comm, nullptr, 0, &shrunk);
          // The words depend on how far the others got meanwhile: "declared rank 2 failed"
          // when their decision reached it; a minority of 1 when they had already left the
          // old communicator (connections closed). Either way: an error, and no seat.
          RANK_CHECK(r == DDL_ERR_REMOTE && shrunk == nullptr, "the continued rank got %s: %s",
                     ddl_result_string(r), ddl_comm_last_error(comm));
          return 0;
        }
        ddl_result_t r = ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_TIMEOUT || r == DDL_ERR_REMOTE, "rank %d: %s", rank,
                   ddl_result_string(r));
        ddl_comm_t shrunk = nullptr;
        RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
        if (check_shrunk(comm, shrunk, rank, survivors_of(n, {2})) != 0) return 1;
        if (rank == 0) kill(static_cast<pid_t>(pids[2]), SIGCONT);
        usleep(1500000);  // the old communicator stays while rank 2 reads the decisions
        RANK_OK(ddl_comm_destroy(shrunk));
        return 0;
      },
      options);
  cr_expect(failures.empty(), "%s", failures.c_str());
}

// ddl_comm_agree: the AND and OR of every live rank's value, the same everywhere; with no
// failure the communicator goes on; with a killed rank the survivors agree without its value
// and on its failure.
Test(elastic, agree_combines_the_live_ranks_values_and_names_the_failed) {
  share_kill_time();
  RunOptions options;
  options.comm_timeout_ms = 20000;
  const std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int) {
        uint64_t value = ~(uint64_t{1} << rank);
        RANK_OK(ddl_comm_agree(comm, DDL_AGREE_AND, &value));
        RANK_CHECK(value == ~uint64_t{0xF}, "AND: %#llx", static_cast<unsigned long long>(value));
        value = uint64_t{1} << rank;
        RANK_OK(ddl_comm_agree(comm, DDL_AGREE_OR, &value));
        RANK_CHECK(value == 0xF, "OR: %#llx", static_cast<unsigned long long>(value));
        int nfailed = -1;
        RANK_OK(ddl_comm_failed_ranks(comm, nullptr, 0, &nfailed));
        RANK_CHECK(nfailed == 0, "%d failed", nfailed);
        float one = 1, sum = 0;
        RANK_OK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm));
        RANK_CHECK(sum == 4, "sum %g", sum);
        if (rank == 1) die();
        usleep(200000);
        value = uint64_t{1} << rank;
        RANK_OK(ddl_comm_agree(comm, DDL_AGREE_OR, &value));
        RANK_CHECK(value == 0xD, "OR without rank 1: %#llx",
                   static_cast<unsigned long long>(value));
        int failed[4] = {};
        RANK_OK(ddl_comm_failed_ranks(comm, failed, 4, &nfailed));
        RANK_CHECK(nfailed == 1 && failed[0] == 1, "%d failed, first %d", nfailed, failed[0]);
        RANK_CHECK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm) == DDL_ERR_REMOTE,
                   "a call after agreeing on a failure must fail at once");
        return 0;
      },
      options);
  for (int r : {0, 2, 3})
    cr_expect(!contains(failures, "rank " + std::to_string(r) + " "), "%s", failures.c_str());
}

// Rank 0 revokes instead of calling the allreduce rank 1 waits in: rank 1 fails at once
// naming it, and both shrink to a communicator of both (nobody failed).
Test(elastic, revoke_ends_a_peers_wait_and_a_healthy_shrink_keeps_everyone) {
  RunOptions options;
  options.comm_timeout_ms = 30000;
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int n) {
        float one = 1, sum = 0;
        if (rank == 0) {
          usleep(200000);
          RANK_OK(ddl_comm_revoke(comm));
        } else {
          const double start = monotonic_s();
          ddl_result_t r = ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm);
          RANK_CHECK(r != DDL_SUCCESS && contains(ddl_comm_last_error(comm), "rank 0 revoked"),
                     "%s: %s", ddl_result_string(r), ddl_comm_last_error(comm));
          RANK_CHECK(monotonic_s() - start < 5, "the revoke took %.1f s", monotonic_s() - start);
        }
        RANK_CHECK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm) != DDL_SUCCESS,
                   "a revoked communicator ran a call");
        ddl_comm_t shrunk = nullptr;
        RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
        if (check_shrunk(comm, shrunk, rank, survivors_of(n, {})) != 0) return 1;
        RANK_OK(ddl_comm_destroy(shrunk));
        return 0;
      },
      options);
  cr_expect(failures.empty(), "%s", failures.c_str());
}

// Excluding a rank on purpose (torch's shrink_group passes them): it does not call.
Test(elastic, excluded_ranks_are_left_out_without_failing) {
  RunOptions options;
  options.comm_timeout_ms = 30000;
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int n) {
        if (rank == 1) return 0;
        const int exclude[] = {1};
        ddl_comm_t shrunk = nullptr;
        RANK_OK(ddl_comm_shrink(comm, exclude, 1, &shrunk));
        if (check_shrunk(comm, shrunk, rank, survivors_of(n, {1})) != 0) return 1;
        RANK_OK(ddl_comm_destroy(shrunk));
        return 0;
      },
      options);
  cr_expect(failures.empty(), "%s", failures.c_str());
}

Test(elastic, bad_arguments_are_refused_and_the_communicator_goes_on) {
  const std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    ddl_comm_t out = nullptr;
    const int self[] = {rank}, far[] = {7};
    RANK_CHECK(ddl_comm_shrink(comm, self, 1, &out) == DDL_ERR_INVALID_ARGUMENT &&
                   contains(ddl_comm_last_error(comm), "this rank"),
               "%s", ddl_comm_last_error(comm));
    RANK_CHECK(ddl_comm_shrink(comm, far, 1, &out) == DDL_ERR_INVALID_ARGUMENT, "rank 7");
    RANK_CHECK(ddl_comm_shrink(comm, nullptr, 1, &out) == DDL_ERR_INVALID_ARGUMENT, "NULL");
    RANK_CHECK(ddl_comm_shrink(comm, nullptr, 0, nullptr) == DDL_ERR_INVALID_ARGUMENT, "out");
    RANK_CHECK(ddl_comm_grow(comm, 3, nullptr, &out) == DDL_ERR_INVALID_ARGUMENT, "root");
    RANK_CHECK(ddl_comm_grow(comm, 1, "127.0.0.1:1", &out) == DDL_ERR_INVALID_ARGUMENT, "size");
    uint64_t value = 0;
    RANK_CHECK(
        ddl_comm_agree(comm, static_cast<ddl_agree_op_t>(9), &value) == DDL_ERR_INVALID_ARGUMENT,
        "op");
    RANK_CHECK(ddl_comm_agree(comm, DDL_AGREE_AND, nullptr) == DDL_ERR_INVALID_ARGUMENT, "value");
    RANK_CHECK(out == nullptr, "an output was written");
    float one = 1, sum = 0;
    RANK_OK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm));
    RANK_CHECK(sum == 2, "sum %g", sum);
    return 0;
  });
  cr_expect(failures.empty(), "%s", failures.c_str());
}

namespace {

// A process that joins a grown communicator as rank `rank` of `size`: forked by a rank
// before it initializes ddl (so it inherits nothing of it), it waits for the root address
// on a pipe, joins, checks an allreduce and exits with 0 on success.
struct Joiner {
  pid_t pid = -1;
  int go_fd = -1;
};
Joiner g_joiner;

void fork_joiner(int size, int rank) {
  int fds[2];
  if (pipe(fds) != 0) return;
  g_joiner.pid = fork();
  if (g_joiner.pid != 0) {
    close(fds[0]);
    g_joiner.go_fd = fds[1];
    return;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  close(fds[1]);
  pollfd p = {fds[0], POLLIN, 0};
  char root[128] = {};
  if (poll(&p, 1, 60000) != 1 || read(fds[0], root, sizeof root - 1) <= 0) _exit(10);
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  config.job_token = "test-token";  // the harness's job token
  config.timeout_ms = 30000;
  ddl_comm_t comm = nullptr;
  if (ddl_comm_init(&comm, size, rank, root, &config) != DDL_SUCCESS) {
    fprintf(stderr, "joiner: %s\n", ddl_comm_last_error(nullptr));
    _exit(11);
  }
  float value = static_cast<float>(rank + 1), sum = 0;
  const bool ok = ddl_allreduce(&value, &sum, 1, DDL_FLOAT32, DDL_SUM, comm) == DDL_SUCCESS &&
                  sum == static_cast<float>(size * (size + 1) / 2);
  ddl_comm_destroy(comm);
  _exit(ok ? 0 : 12);
}

}  // namespace

// 3 ranks lose rank 1, shrink to 2, and grow back to 3 with a new process (rank 2 of the
// grown communicator): the job is whole again.
Test(elastic, a_shrunk_job_grows_back_with_a_new_process) {
  share_kill_time();
  RunOptions options;
  options.comm_timeout_ms = 20000;
  options.before_init = [](int rank) {
    if (rank == 0) fork_joiner(3, 2);
  };
  const std::string root = "127.0.0.1:" + std::to_string(ddltest::free_port());
  const std::string failures = run_ranks(
      3,
      [&root](ddl_comm_t comm, int rank, int n) {
        ddl_result_t r = work_until_failure(comm, rank, n, Work::kSmallAllreduce, {1});
        RANK_CHECK(r == DDL_ERR_REMOTE, "%s", ddl_result_string(r));
        ddl_comm_t shrunk = nullptr, grown = nullptr;
        RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
        if (rank == 0 && write(g_joiner.go_fd, root.c_str(), root.size()) < 0) return 1;
        RANK_CHECK(ddl_comm_grow(shrunk, 3, root.c_str(), &grown) == DDL_SUCCESS, "grow: %s",
                   ddl_comm_last_error(shrunk));
        int size = 0, new_rank = -1;
        RANK_OK(ddl_comm_size(grown, &size));
        RANK_OK(ddl_comm_rank(grown, &new_rank));
        RANK_CHECK(size == 3 && new_rank == (rank == 0 ? 0 : 1), "rank %d of %d", new_rank, size);
        float value = static_cast<float>(new_rank + 1), sum = 0;
        RANK_OK(ddl_allreduce(&value, &sum, 1, DDL_FLOAT32, DDL_SUM, grown));
        RANK_CHECK(sum == 6, "sum %g", sum);
        RANK_OK(ddl_comm_destroy(grown));
        RANK_OK(ddl_comm_destroy(shrunk));
        if (rank == 0) {
          int status = 0;
          RANK_CHECK(waitpid(g_joiner.pid, &status, 0) == g_joiner.pid && WIFEXITED(status) &&
                         WEXITSTATUS(status) == 0,
                     "the joiner ended with status %#x", status);
        }
        return 0;
      },
      options);
  for (int r : {0, 2})
    cr_expect(!contains(failures, "rank " + std::to_string(r) + " "), "%s", failures.c_str());
}

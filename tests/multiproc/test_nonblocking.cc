// Nonblocking collectives and groups: several requests in flight, matched in call order with
// blocking calls between them; ddl_test/ddl_wait/ddl_request_free; failures (bad arguments at
// the call, mismatches, a killed rank, abort) reported through the request on every rank;
// groups with fused small allreduces.
#include <criterion/criterion.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace ddltest;

namespace {

bool contains(const char *text, const char *needle) {
  return std::strstr(text, needle) != nullptr;
}

// Waits for a request and frees it; the words of a failure are the thread's last error.
#define WAIT_OK(request)                                                        \
  do {                                                                          \
    ddl_result_t wait_result_ = ddl_wait(request);                              \
    RANK_CHECK(wait_result_ == DDL_SUCCESS, "ddl_wait(%s) -> %s: %s", #request, \
               ddl_result_string(wait_result_), ddl_comm_last_error(nullptr));  \
    RANK_OK(ddl_request_free(request));                                         \
  } while (0)

// Rank r contributes r + 1 + i to element i: the sum over n ranks is n(n+1)/2 + n*i.
double expected_sum(int nranks, size_t i) {
  return nranks * (nranks + 1) / 2.0 + static_cast<double>(nranks) * static_cast<double>(i % 97);
}

void fill(std::vector<double> *v, int rank) {
  for (size_t i = 0; i < v->size(); ++i) (*v)[i] = rank + 1 + static_cast<double>(i % 97);
}

int every_collective_in_flight(ddl_comm_t comm, int rank, int nranks) {
  // Sizes that take different paths: shared slots, pipelined schedules, single copy.
  const size_t sizes[] = {1, 7, 1000, 65537, 300001};
  constexpr size_t kSizes = sizeof sizes / sizeof sizes[0];
  std::vector<std::vector<double>> sums(kSizes);
  std::vector<ddl_request_t> requests;
  for (size_t s = 0; s < kSizes; ++s) {
    sums[s].resize(sizes[s]);
    fill(&sums[s], rank);
    ddl_request_t r = nullptr;
    RANK_OK(
        ddl_iallreduce(sums[s].data(), sums[s].data(), sizes[s], DDL_FLOAT64, DDL_SUM, comm, &r));
    requests.push_back(r);
  }
  const size_t block = 1001;
  std::vector<int32_t> bcast(block, rank == nranks - 1 ? 42 : -1);
  std::vector<int32_t> mine(block, rank), all(block * nranks, -1);
  std::vector<float> rs_in(block * nranks), rs_out(block, -1.0f);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(rank + i % 5);
  ddl_request_t r = nullptr;
  RANK_OK(ddl_ibroadcast(bcast.data(), block, DDL_INT32, nranks - 1, comm, &r));
  requests.push_back(r);
  RANK_OK(ddl_iallgather(mine.data(), all.data(), block, DDL_INT32, comm, &r));
  requests.push_back(r);
  RANK_OK(ddl_ireduce_scatter(rs_in.data(), rs_out.data(), block, DDL_FLOAT32, DDL_MAX, comm, &r));
  requests.push_back(r);
  RANK_OK(ddl_ibarrier(comm, &r));
  requests.push_back(r);
  // A blocking call after them runs after them (the same order on every rank).
  double one = 1;
  RANK_OK(ddl_allreduce(&one, &one, 1, DDL_FLOAT64, DDL_SUM, comm));
  RANK_CHECK(one == nranks, "rank %d: blocking sum %g", rank, one);
  // Waited for in reverse order: completion does not depend on the order of waits.
  for (size_t i = requests.size(); i-- > 0;) WAIT_OK(requests[i]);
  for (size_t s = 0; s < kSizes; ++s)
    for (size_t i = 0; i < sizes[s]; ++i)
      RANK_CHECK(sums[s][i] == expected_sum(nranks, i), "rank %d: size %zu [%zu] = %g", rank,
                 sizes[s], i, sums[s][i]);
  for (int32_t v : bcast) RANK_CHECK(v == 42, "rank %d: broadcast gave %d", rank, v);
  for (size_t i = 0; i < all.size(); ++i)
    RANK_CHECK(all[i] == static_cast<int32_t>(i / block), "rank %d: allgather [%zu] = %d", rank, i,
               all[i]);
  for (size_t i = 0; i < block; ++i) {
    const float want = static_cast<float>(nranks - 1 + (rank * block + i) % 5);
    RANK_CHECK(rs_out[i] == want, "rank %d: reduce_scatter [%zu] = %g, want %g", rank, i, rs_out[i],
               want);
  }
  return 0;
}

}  // namespace

Test(nonblocking, every_collective_in_flight_at_once) {
  for (int nranks : {1, 2, 3, 4}) {
    std::string failures = run_ranks(nranks, every_collective_in_flight);
    cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
  }
}

// ddl_test polls without blocking; a request freed before it finishes still runs to its end
// (the peer gets its sum), and destroying a communicator lets queued collectives finish.
Test(nonblocking, test_polls_and_free_and_destroy_let_work_finish) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    std::vector<float> data(1 << 20, 1.0f);
    ddl_request_t r = nullptr;
    RANK_OK(ddl_iallreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm, &r));
    int done = 0, polls = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      RANK_OK(ddl_test(r, &done));
      ++polls;
    }
    RANK_CHECK(done, "rank %d: not done after %d polls", rank, polls);
    RANK_OK(ddl_request_free(r));
    for (float v : data) RANK_CHECK(v == 2.0f, "rank %d: got %g", rank, v);
    // Freed at once: the collective still runs (its buffer must outlive it).
    RANK_OK(ddl_iallreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm, &r));
    RANK_OK(ddl_request_free(r));
    RANK_OK(ddl_barrier(comm));  // runs after the freed one
    for (float v : data) RANK_CHECK(v == 4.0f, "rank %d: after free, got %g", rank, v);
    // Freed handles are refused, not crashes.
    RANK_CHECK(ddl_wait(r) == DDL_ERR_INVALID_USAGE, "rank %d: wait on a freed request", rank);
    RANK_CHECK(ddl_request_free(r) == DDL_ERR_INVALID_USAGE, "rank %d: double free", rank);
    RANK_CHECK(contains(ddl_comm_last_error(nullptr), "not a live request"), "%s",
               ddl_comm_last_error(nullptr));
    // Queued, then the communicator destroyed: the request finishes and says how.
    ddl_comm_t sub = nullptr;
    RANK_OK(ddl_comm_split(comm, 0, rank, &sub));
    RANK_OK(ddl_iallreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, sub, &r));
    RANK_OK(ddl_comm_destroy(sub));
    RANK_CHECK(ddl_test(r, &done) == DDL_SUCCESS && done, "rank %d: not done after destroy", rank);
    RANK_CHECK(ddl_wait(r) == DDL_SUCCESS, "rank %d: %s", rank, ddl_comm_last_error(nullptr));
    RANK_OK(ddl_request_free(r));
    for (float v : data) RANK_CHECK(v == 8.0f, "rank %d: after destroy, got %g", rank, v);
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(nonblocking, bad_arguments_fail_at_the_call_without_a_request) {
  ddl_comm_t comm = nullptr;
  cr_assert_eq(ddl_comm_init(&comm, 1, 0, nullptr, nullptr), DDL_SUCCESS);
  float x = 1;
  ddl_request_t r = reinterpret_cast<ddl_request_t>(&x);
  cr_assert_eq(ddl_iallreduce(&x, &x, 1, static_cast<ddl_datatype_t>(77), DDL_SUM, comm, &r),
               DDL_ERR_INVALID_ARGUMENT);
  cr_assert_null(r);
  cr_assert(contains(ddl_comm_last_error(comm), "datatype 77"), "%s", ddl_comm_last_error(comm));
  cr_assert_eq(ddl_ibroadcast(&x, 1, DDL_FLOAT32, 3, comm, &r), DDL_ERR_INVALID_ARGUMENT);
  cr_assert(contains(ddl_comm_last_error(comm), "root 3"), "%s", ddl_comm_last_error(comm));
  cr_assert_eq(ddl_iallreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm, nullptr),
               DDL_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ddl_ibarrier(nullptr, &r), DDL_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ddl_test(nullptr, nullptr), DDL_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ddl_request_free(nullptr), DDL_SUCCESS);
  cr_assert_eq(ddl_group_end(), DDL_ERR_INVALID_USAGE);
  cr_assert(contains(ddl_comm_last_error(nullptr), "no ddl_group_start"));
  cr_assert_eq(ddl_comm_destroy(comm), DDL_SUCCESS);
}

// Ranks that queue different calls: every rank's request fails naming the collective, and
// the communicator refuses what follows.
Test(nonblocking, a_mismatch_fails_the_requests_of_every_rank) {
  RunOptions options;
  options.comm_timeout_ms = 5000;
  std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(1000 + (rank == 1 ? 1 : 0), 1.0f);
        ddl_request_t r = nullptr;
        RANK_OK(
            ddl_iallreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm, &r));
        ddl_result_t got = ddl_wait(r);
        RANK_CHECK(got == DDL_ERR_INVALID_USAGE, "rank %d: got %s: %s", rank,
                   ddl_result_string(got), ddl_comm_last_error(nullptr));
        RANK_CHECK(contains(ddl_comm_last_error(nullptr), "mismatched collective calls") &&
                       contains(ddl_comm_last_error(nullptr), "allreduce"),
                   "rank %d: %s", rank, ddl_comm_last_error(nullptr));
        RANK_OK(ddl_request_free(r));
        got = ddl_barrier(comm);
        RANK_CHECK(got != DDL_SUCCESS && contains(ddl_comm_last_error(comm), "failed earlier"),
                   "rank %d: after the mismatch: %s", rank, ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A rank killed while requests are queued: the survivor's wait names it, within the deadline.
Test(nonblocking, a_killed_rank_fails_the_survivors_requests) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(1 << 20, 1.0f);
        RANK_OK(ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm));
        if (rank == 1) raise(SIGKILL);
        std::vector<ddl_request_t> requests(4);
        for (ddl_request_t &r : requests)
          RANK_OK(ddl_iallreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm,
                                 &r));
        const auto start = std::chrono::steady_clock::now();
        for (ddl_request_t r : requests) {
          ddl_result_t got = ddl_wait(r);
          RANK_CHECK(got == DDL_ERR_REMOTE || got == DDL_ERR_TIMEOUT, "got %s",
                     ddl_result_string(got));
          RANK_CHECK(contains(ddl_comm_last_error(nullptr), "rank 1") ||
                         contains(ddl_comm_last_error(nullptr), "failed earlier"),
                     "%s", ddl_comm_last_error(nullptr));
          RANK_OK(ddl_request_free(r));
        }
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        RANK_CHECK(waited < 25, "the survivor waited %.1f s", waited);
        return 0;
      },
      options);
  cr_assert(failures.find("rank 0") == std::string::npos, "%s", failures.c_str());
}

// ddl_comm_abort from another thread ends a request whose peers never call.
Test(nonblocking, abort_ends_a_request_that_cannot_match) {
  RunOptions options;
  options.comm_timeout_ms = 60000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          return 0;  // never joins; the harness then destroys its communicator
        }
        float x = 1;
        ddl_request_t r = nullptr;
        RANK_OK(ddl_iallreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm, &r));
        std::thread aborter([comm] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ddl_comm_abort(comm);
        });
        const auto start = std::chrono::steady_clock::now();
        ddl_result_t got = ddl_wait(r);
        aborter.join();
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        RANK_CHECK(got != DDL_SUCCESS, "rank 0: the unmatched request succeeded");
        RANK_CHECK(waited < 10, "rank 0: abort took %.1f s to end the wait", waited);
        RANK_OK(ddl_request_free(r));
        return 0;
      },
      options);
  cr_assert(failures.find("check failed") == std::string::npos, "%s", failures.c_str());
}

// Calls waited at once (as torch's async_op=True then wait): each result right; several
// queued ones run in call order when the last is waited first; sends and receives queued
// ahead of a collective complete while the rank waits for the collective.
Test(nonblocking, waited_at_once) {
  for (int nranks : {2, 3}) {
    std::string failures = run_ranks(nranks, [](ddl_comm_t comm, int rank, int n) {
      const size_t sizes[] = {1, 1000, 65537};
      for (int k = 0; k < 300; ++k) {
        std::vector<double> sum(sizes[k % 3]);
        fill(&sum, rank);
        ddl_request_t r = nullptr;
        RANK_OK(ddl_iallreduce(sum.data(), sum.data(), sum.size(), DDL_FLOAT64, DDL_SUM, comm, &r));
        WAIT_OK(r);
        for (size_t i = 0; i < sum.size(); ++i)
          RANK_CHECK(sum[i] == expected_sum(n, i), "rank %d: call %d [%zu] = %g", rank, k, i,
                     sum[i]);
        if (k % 10 != 0) continue;
        // Three queued, the last waited first: the first two run before it.
        std::vector<int32_t> value(5, rank == k % n ? k : -1);
        std::vector<int32_t> all(5 * static_cast<size_t>(n), -1);
        int32_t token = rank;
        ddl_request_t q[3] = {};
        RANK_OK(ddl_ibroadcast(value.data(), value.size(), DDL_INT32, k % n, comm, &q[0]));
        RANK_OK(ddl_iallgather(value.data(), all.data(), value.size(), DDL_INT32, comm, &q[1]));
        RANK_OK(ddl_iallreduce(&token, &token, 1, DDL_INT32, DDL_MAX, comm, &q[2]));
        for (int i = 2; i >= 0; --i) WAIT_OK(q[i]);
        for (int32_t v : all) RANK_CHECK(v == k, "rank %d: call %d allgather %d", rank, k, v);
        RANK_CHECK(token == n - 1, "rank %d: call %d max %d", rank, k, token);
        // A ring of sends and receives queued ahead of a collective, the collective waited
        // first: the receive must complete on the thread while this rank waits.
        int32_t got = -1, mine = rank * 1000 + k;
        ddl_request_t p[3] = {};
        RANK_OK(ddl_irecv(&got, 1, DDL_INT32, (rank + n - 1) % n, comm, &p[0]));
        RANK_OK(ddl_isend(&mine, 1, DDL_INT32, (rank + 1) % n, comm, &p[1]));
        double one = 1;
        RANK_OK(ddl_iallreduce(&one, &one, 1, DDL_FLOAT64, DDL_SUM, comm, &p[2]));
        for (int i = 2; i >= 0; --i) WAIT_OK(p[i]);
        RANK_CHECK(got == ((rank + n - 1) % n) * 1000 + k, "rank %d: received %d", rank, got);
        RANK_CHECK(one == n, "rank %d: sum after the ring %g", rank, one);
      }
      return 0;
    });
    cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
  }
}

// A group: 200 small allreduces (fused into a few), a large one, a broadcast and blocking
// calls between, nested; every result as if issued one by one.
Test(nonblocking, groups_fuse_small_allreduces_and_keep_results) {
  for (int nranks : {2, 3}) {
    std::string failures = run_ranks(nranks, [](ddl_comm_t comm, int rank, int n) {
      constexpr int kSmall = 200;
      std::vector<std::vector<double>> small(kSmall);
      std::vector<ddl_request_t> requests;
      std::vector<double> large(200003), bcast(33, rank == 0 ? 5.0 : 0.0);
      fill(&large, rank);
      std::vector<int64_t> counts(7, rank), maxima(7, -1);
      RANK_OK(ddl_group_start());
      for (int k = 0; k < kSmall; ++k) {
        small[k].resize(1 + k % 37);
        fill(&small[k], rank);
        if (k == 50) RANK_OK(ddl_group_start());  // nested: only the outer end issues
        if (k % 3 == 0) {
          RANK_OK(ddl_allreduce(small[k].data(), small[k].data(), small[k].size(), DDL_FLOAT64,
                                DDL_SUM, comm));
        } else {
          ddl_request_t r = nullptr;
          RANK_OK(ddl_iallreduce(small[k].data(), small[k].data(), small[k].size(), DDL_FLOAT64,
                                 DDL_SUM, comm, &r));
          requests.push_back(r);
        }
        if (k == 60) RANK_OK(ddl_group_end());
        if (k == 100) {
          RANK_OK(ddl_allreduce(counts.data(), maxima.data(), 7, DDL_INT64, DDL_MAX, comm));
          RANK_OK(
              ddl_allreduce(large.data(), large.data(), large.size(), DDL_FLOAT64, DDL_SUM, comm));
          RANK_OK(ddl_broadcast(bcast.data(), bcast.size(), DDL_FLOAT64, 0, comm));
        }
      }
      RANK_OK(ddl_group_end());
      for (ddl_request_t r : requests) WAIT_OK(r);
      for (int k = 0; k < kSmall; ++k)
        for (size_t i = 0; i < small[k].size(); ++i)
          RANK_CHECK(small[k][i] == expected_sum(n, i), "rank %d: small %d [%zu] = %g", rank, k, i,
                     small[k][i]);
      for (size_t i = 0; i < large.size(); ++i)
        RANK_CHECK(large[i] == expected_sum(n, i), "rank %d: large [%zu] = %g", rank, i, large[i]);
      for (int64_t v : maxima) RANK_CHECK(v == n - 1, "rank %d: max %lld", rank, (long long)v);
      for (double v : bcast) RANK_CHECK(v == 5.0, "rank %d: broadcast %g", rank, v);
      return 0;
    });
    cr_assert(failures.empty(), "%d ranks:\n%s", nranks, failures.c_str());
  }
}

// DDL_FUSION_BYTES is checked at init; 0 turns fusion off and groups still give every result.
Test(nonblocking, fusion_bytes_is_checked_and_0_turns_fusion_off) {
  setenv("DDL_FUSION_BYTES", "lots", 1);
  ddl_comm_t refused = nullptr;
  cr_assert_eq(ddl_comm_init(&refused, 1, 0, nullptr, nullptr), DDL_ERR_INVALID_ARGUMENT);
  cr_assert(contains(ddl_comm_last_error(nullptr), "DDL_FUSION_BYTES=lots"), "%s",
            ddl_comm_last_error(nullptr));
  setenv("DDL_FUSION_BYTES", "0", 1);
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int n) {
    std::vector<std::vector<double>> bufs(20);
    RANK_OK(ddl_group_start());
    for (size_t k = 0; k < bufs.size(); ++k) {
      bufs[k].resize(1 + k);
      fill(&bufs[k], rank);
      RANK_OK(ddl_allreduce(bufs[k].data(), bufs[k].data(), bufs[k].size(), DDL_FLOAT64, DDL_SUM,
                            comm));
    }
    RANK_OK(ddl_group_end());
    for (const auto &b : bufs)
      for (size_t i = 0; i < b.size(); ++i)
        RANK_CHECK(b[i] == expected_sum(n, i), "rank %d: [%zu] = %g", rank, i, b[i]);
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// DDL_FUSION_BYTES also caps each fused buffer (as Horovod's threshold does): 64 grouped
// allreduces of 4 KB with a 16 KB cap run as 16 fused allreduces of 16 KB, none larger
// (the log names every new shape).
Test(nonblocking, fused_buffers_stay_within_fusion_bytes) {
  RunOptions options;
  options.before_init = [](int) { setenv("DDL_FUSION_BYTES", "16K", 1); };
  std::vector<std::string> logs;
  std::string failures = run_ranks_logged(
      2,
      [](ddl_comm_t comm, int rank, int n) {
        std::vector<std::vector<float>> bufs(64, std::vector<float>(1024));
        for (auto &b : bufs)
          for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rank + i % 7);
        RANK_OK(ddl_group_start());
        for (auto &b : bufs)
          RANK_OK(ddl_allreduce(b.data(), b.data(), b.size(), DDL_FLOAT32, DDL_SUM, comm));
        RANK_OK(ddl_group_end());
        for (const auto &b : bufs)
          for (size_t i = 0; i < b.size(); ++i)
            RANK_CHECK(b[i] == static_cast<float>(n * (n - 1) / 2 + n * (i % 7)),
                       "rank %d: [%zu] = %g", rank, i, b[i]);
        return 0;
      },
      options, &logs);
  cr_assert(failures.empty(), "%s", failures.c_str());
  for (int r = 0; r < 2; ++r) {
    cr_expect(contains(logs[r].c_str(), "allreduce of 16384 B"), "rank %d: no fused 16 KB:\n%s", r,
              logs[r].c_str());
    for (const char *larger :
         {"allreduce of 20480 B", "allreduce of 32768 B", "allreduce of 262144 B"})
      cr_expect(!contains(logs[r].c_str(), larger), "rank %d: %s:\n%s", r, larger, logs[r].c_str());
  }
}

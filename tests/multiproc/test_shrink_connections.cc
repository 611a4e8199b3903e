// A shrink keeps the survivors' network connections (NetworkTransport::subset): the shrunk
// communicator's messages never meet those the old one left behind, the old one refuses what
// would need its connections and lets them go at its destroy, and after 15 shrinks in a row
// (the tags' generations) the 16th builds new connections. Every message goes over UCX here
// (DDL_SHM=0), where the connections are kept; the kill tests in test_elastic keep them too.
// Rails (DDL_RAILS, two emulated hosts of two ranks): kept when every rank drives the rail it
// drove, made anew when a rank's place on its host, and so its rail, changed.
#include <criterion/criterion.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "harness.h"

using ddltest::RunOptions;

namespace {

constexpr int kStaleTag = 5, kAnySourceTag = 6;
constexpr int kShrinksInARow = 16;  // after the first: crosses the generations' end once

constexpr size_t kRailBytes = 1 << 20;  // an allreduce large enough to take the rails

int count_of(const std::string &text, const std::string &needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Rank 1 and 2 each send rank 0 a message it never receives; the allreduce after it makes
// sure they have arrived (a peer's messages arrive in order) before the shrink.
int leave_stale_messages(ddl_comm_t comm, int rank) {
  const float stale = 111;
  if (rank == 1) RANK_OK(ddl_send_tag(&stale, 1, DDL_FLOAT32, 0, kStaleTag, comm));
  if (rank == 2) RANK_OK(ddl_send_tag(&stale, 1, DDL_FLOAT32, 0, kAnySourceTag, comm));
  float one = 1, sum = 0;
  RANK_OK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm));
  return 0;
}

// The same (sender, tag, message number) again on the shrunk communicator, from a named
// sender and from any source: rank 0 must get the new values.
int expect_fresh_messages(ddl_comm_t comm, int rank) {
  const float fresh = static_cast<float>(rank * 100 + 22);
  if (rank == 1) RANK_OK(ddl_send_tag(&fresh, 1, DDL_FLOAT32, 0, kStaleTag, comm));
  if (rank == 2) RANK_OK(ddl_send_tag(&fresh, 1, DDL_FLOAT32, 0, kAnySourceTag, comm));
  if (rank != 0) return 0;
  float got = 0;
  int source = -1;
  RANK_OK(ddl_recv_tag(&got, 1, DDL_FLOAT32, 1, kStaleTag, comm, nullptr));
  RANK_CHECK(got == 122, "from rank 1: %g, expected 122 (111: the old communicator's message)",
             got);
  RANK_OK(ddl_recv_tag(&got, 1, DDL_FLOAT32, DDL_ANY_SOURCE, kAnySourceTag, comm, &source));
  RANK_CHECK(got == 222 && source == 2, "from any source: %g from rank %d, expected 222 from 2",
             got, source);
  return 0;
}

int sum_is_right(ddl_comm_t comm, int n) {
  float one = 1, sum = 0;
  RANK_OK(ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, comm));
  RANK_CHECK(sum == static_cast<float>(n), "sum %g on %d ranks", sum, n);
  return 0;
}

int keep_connections(ddl_comm_t comm, int rank, int n) {
  if (leave_stale_messages(comm, rank) != 0) return 1;
  ddl_comm_t shrunk = nullptr;
  RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
  if (expect_fresh_messages(shrunk, rank) != 0) return 1;

  // The old communicator: its connections are the shrunk one's now.
  uint64_t value = 1;
  const ddl_result_t agreed = ddl_comm_agree(comm, DDL_AGREE_AND, &value);
  const std::string said = ddl_comm_last_error(comm);
  RANK_CHECK(agreed == DDL_ERR_INVALID_USAGE &&
                 said.find("took over its connections") != std::string::npos,
             "agree on the old communicator: %s: %s", ddl_result_string(agreed), said.c_str());
  ddl_comm_t again = nullptr;
  RANK_CHECK(ddl_comm_shrink(comm, nullptr, 0, &again) == DDL_ERR_INVALID_USAGE && !again,
             "a second shrink of the old communicator: %s", ddl_comm_last_error(comm));
  // Its destroy leaves the connections to the shrunk one.
  RANK_OK(ddl_comm_destroy(comm));
  comm = shrunk;
  if (sum_is_right(comm, n) != 0) return 1;

  for (int i = 0; i < kShrinksInARow; ++i) {
    RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
    RANK_OK(ddl_comm_destroy(comm));
    comm = shrunk;
    if (sum_is_right(comm, n) != 0) return 1;
  }
  return ddl_comm_destroy(comm) == DDL_SUCCESS ? 0 : 1;
}

// Rank `left_out` does not call (excluded on purpose); the others shrink and allreduce over
// the rails.
int shrink_with_rails(ddl_comm_t comm, int rank, int n, int left_out) {
  if (rank == left_out) return 0;
  ddl_comm_t shrunk = nullptr;
  RANK_OK(ddl_comm_shrink(comm, &left_out, 1, &shrunk));
  std::vector<float> data(kRailBytes / sizeof(float), 1.0f);
  const ddl_result_t r =
      ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, shrunk);
  RANK_CHECK(r == DDL_SUCCESS, "allreduce over the rails: %s", ddl_comm_last_error(shrunk));
  RANK_CHECK(data[0] == n - 1 && data.back() == n - 1, "sum %g on %d ranks", data[0], n - 1);
  return ddl_comm_destroy(shrunk) == DDL_SUCCESS ? 0 : 1;
}

}  // namespace

Test(shrink_connections, rails_kept_where_every_rank_keeps_its_rail) {
  RunOptions options;
  options.comm_timeout_ms = 30000;
  options.before_init = [](int rank) {
    setenv("DDL_HOST_ID", ("rails" + std::to_string(rank / 2)).c_str(), 1);
    setenv("DDL_RAILS", "lo,lo", 1);  // two rails over loopback: every machine has it
  };
  // Rank 3 left out: rank 2 stays its host's first, on rail 0; rank 2 left out: rank 3
  // becomes its host's first, rail 1 -> 0, so every rank makes new rails.
  for (const int left_out : {3, 2}) {
    std::vector<std::string> logs;
    const std::string failures = ddltest::run_ranks_logged(
        4,
        [left_out](ddl_comm_t comm, int rank, int n) {
          return shrink_with_rails(comm, rank, n, left_out);
        },
        options, &logs);
    cr_assert(failures.empty(), "rank %d left out: %s", left_out, failures.c_str());
    for (int r = 0; r < 4; ++r) {
      if (r == left_out) continue;
      const bool kept = count_of(logs[r], "connections and rail kept") == 1;
      cr_expect(kept == (left_out == 3), "rank %d (rank %d left out): rail %s:\n%s", r, left_out,
                kept ? "kept" : "not kept", logs[r].c_str());
      cr_expect_eq(count_of(logs[r], "connections kept") + count_of(logs[r], "rail kept"), 1,
                   "rank %d: the connections were not kept:\n%s", r, logs[r].c_str());
    }
  }
}

// One rank that will not keep its connections (DDL_SHRINK_KEEP_CONNECTIONS=0 there alone):
// every rank makes new ones, and the shrunk communicator works.
Test(shrink_connections, one_rank_that_will_not_keep_them_makes_every_rank_connect_anew) {
  RunOptions options;
  options.comm_timeout_ms = 30000;
  options.before_init = [](int rank) {
    if (rank == 1) setenv("DDL_SHRINK_KEEP_CONNECTIONS", "0", 1);
  };
  std::vector<std::string> logs;
  const std::string failures = ddltest::run_ranks_logged(
      3,
      [](ddl_comm_t comm, int, int n) {
        ddl_comm_t shrunk = nullptr;
        RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
        if (sum_is_right(shrunk, n) != 0) return 1;
        return ddl_comm_destroy(shrunk) == DDL_SUCCESS ? 0 : 1;
      },
      options, &logs);
  cr_assert(failures.empty(), "%s", failures.c_str());
  for (int r = 0; r < 3; ++r)
    cr_expect_eq(count_of(logs[r], "new connections"), 1, "rank %d:\n%s", r, logs[r].c_str());
}

Test(shrink_connections, kept_through_shrinks_and_made_anew_after_the_generations) {
  setenv("DDL_SHM", "0", 1);
  RunOptions options;
  options.comm_timeout_ms = 30000;
  std::vector<std::string> logs;
  // The harness destroys the communicator it passed in; this body destroys its own copies,
  // so it hands the harness nothing back to destroy twice: it runs on a split of its own.
  const std::string failures = ddltest::run_ranks_logged(
      3,
      [](ddl_comm_t comm, int rank, int n) {
        ddl_comm_t mine = nullptr;
        RANK_OK(ddl_comm_split(comm, 0, rank, &mine));
        return keep_connections(mine, rank, n);
      },
      options, &logs);
  unsetenv("DDL_SHM");
  cr_assert(failures.empty(), "%s", failures.c_str());
  for (int r = 0; r < 3; ++r) {
    // Shrinks 1-15 keep the connections (generations 1-15), the 16th makes new ones, the
    // 17th keeps those.
    cr_expect_eq(count_of(logs[r], "connections kept"), kShrinksInARow, "rank %d:\n%s", r,
                 logs[r].c_str());
    cr_expect_eq(count_of(logs[r], "new connections"), 1, "rank %d", r);
  }
}

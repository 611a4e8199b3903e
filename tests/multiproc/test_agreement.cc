// The agreement with a rank dying at every point of it (lib/core/agreement.h): on entry, with
// its subtree's values in but not sent up, after sending them up, with the decision taken and
// passed to one child only, and just before it returns. DDL_AGREEMENT_FAULT=RANK:POINT kills
// the rank there (SIGKILL). Whatever the point, every survivor must return the same decision
// (value and failed ranks, the one consistent with the other), and the shrink that follows
// must hold every survivor. The root (rank 0), inner ranks (4 of 8: children 5 and 6; 2:
// child 3) and leaves (7, 1) die; 6 ranks for a tree that is not full; and ranks on hosts of
// their own (DDL_HOST_ID), where every message goes over UCX and heartbeats watch the ranks.
#include <criterion/criterion.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

using ddltest::run_ranks;
using ddltest::RunOptions;

namespace {

enum class Form {
  kAgreeThenShrink,  // the fault in ddl_comm_agree; a shrink after it
  kShrink,           // the fault in the shrink's own agreement
};

// Every survivor's (value, failed ranks as a bit mask) over the shrunk communicator: all
// equal.
int check_same_everywhere(ddl_comm_t shrunk, int rank, uint64_t value, uint64_t failed_mask) {
  ddl_comm_t comm = shrunk;  // for RANK_OK's error text
  int size = 0;
  RANK_OK(ddl_comm_size(shrunk, &size));
  const uint64_t mine[2] = {value, failed_mask};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  RANK_OK(ddl_allgather(mine, all.data(), 2, DDL_UINT64, shrunk));
  for (int r = 0; r < size; ++r)
    RANK_CHECK(all[2 * r] == value && all[2 * r + 1] == failed_mask,
               "old rank %d: decided value %#llx failed %#llx, survivor %d of the shrunk: %#llx "
               "%#llx",
               rank, static_cast<unsigned long long>(value),
               static_cast<unsigned long long>(failed_mask), r,
               static_cast<unsigned long long>(all[2 * r]),
               static_cast<unsigned long long>(all[2 * r + 1]));
  return 0;
}

// The members of the shrunk communicator, by their old ranks: every rank but the victim.
int check_members(ddl_comm_t shrunk, int rank, int n, int victim) {
  ddl_comm_t comm = shrunk;
  int size = 0;
  RANK_OK(ddl_comm_size(shrunk, &size));
  std::vector<int> members(static_cast<size_t>(size)), expected;
  for (int r = 0; r < n; ++r)
    if (r != victim) expected.push_back(r);
  RANK_OK(ddl_allgather(&rank, members.data(), 1, DDL_INT32, shrunk));
  RANK_CHECK(members == expected, "old rank %d: %d members, expected %zu", rank, size,
             expected.size());
  return 0;
}

int agree_then_shrink(ddl_comm_t comm, int rank, int n, int victim) {
  uint64_t value = ~(uint64_t{1} << rank);
  RANK_OK(ddl_comm_agree(comm, DDL_AGREE_AND, &value));
  int failed[64], nfailed = 0;
  RANK_OK(ddl_comm_failed_ranks(comm, failed, 64, &nfailed));
  RANK_CHECK(nfailed == 0 || (nfailed == 1 && failed[0] == victim),
             "old rank %d: %d failed, the first %d, the last %d", rank, nfailed, failed[0],
             failed[nfailed > 0 ? nfailed - 1 : 0]);
  // The value is the AND of the values of exactly the ranks the decision keeps.
  uint64_t expected = ~uint64_t{0}, failed_mask = 0;
  for (int i = 0; i < nfailed; ++i) failed_mask |= uint64_t{1} << failed[i];
  for (int r = 0; r < n; ++r)
    if (!(failed_mask >> r & 1)) expected &= ~(uint64_t{1} << r);
  RANK_CHECK(value == expected, "old rank %d: value %#llx, expected %#llx", rank,
             static_cast<unsigned long long>(value), static_cast<unsigned long long>(expected));
  ddl_comm_t shrunk = nullptr;
  RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
  if (check_members(shrunk, rank, n, victim) != 0) return 1;
  if (check_same_everywhere(shrunk, rank, value, failed_mask) != 0) return 1;
  RANK_OK(ddl_comm_destroy(shrunk));
  return 0;
}

int shrink_at_once(ddl_comm_t comm, int rank, int n, int victim) {
  ddl_comm_t shrunk = nullptr;
  RANK_OK(ddl_comm_shrink(comm, nullptr, 0, &shrunk));
  // Decided with the victim still in (it died after the decision), the shrunk communicator's
  // first call fails on it: shrink again, as an application would.
  float one = 1, sum = 0;
  if (ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, shrunk) != DDL_SUCCESS) {
    ddl_comm_t again = nullptr;
    RANK_OK(ddl_comm_shrink(shrunk, nullptr, 0, &again));
    ddl_comm_destroy(shrunk);
    shrunk = again;
  }
  if (check_members(shrunk, rank, n, victim) != 0) return 1;
  RANK_OK(ddl_comm_destroy(shrunk));
  return 0;
}

// hosts_apart: every rank a host of its own (DDL_HOST_ID), so that every message goes over
// UCX and the ranks watch each other by heartbeats, not pids.
void expect_agreement_survives(int nranks, int victim, const char *point, Form form,
                               bool hosts_apart = false) {
  const std::string fault = std::to_string(victim) + ":" + point;
  fprintf(stderr, "-- %d ranks%s, DDL_AGREEMENT_FAULT=%s, %s\n", nranks,
          hosts_apart ? " on hosts of their own" : "", fault.c_str(),
          form == Form::kShrink ? "shrink" : "agree");
  RunOptions options;
  options.comm_timeout_ms = 20000;
  options.timeout_ms = 60000;
  options.before_init = [fault, hosts_apart](int rank) {
    setenv("DDL_AGREEMENT_FAULT", fault.c_str(), 1);
    if (hosts_apart) setenv("DDL_HOST_ID", ("host" + std::to_string(rank)).c_str(), 1);
  };
  const std::string failures = run_ranks(
      nranks,
      [victim, form](ddl_comm_t comm, int rank, int n) {
        return form == Form::kShrink ? shrink_at_once(comm, rank, n, victim)
                                     : agree_then_shrink(comm, rank, n, victim);
      },
      options);
  for (int r = 0; r < nranks; ++r)
    if (r != victim)
      cr_expect(failures.find("rank " + std::to_string(r) + " ") == std::string::npos,
                "%d ranks, rank %s dies, %s: %s", nranks, fault.c_str(),
                form == Form::kShrink ? "shrink" : "agree", failures.c_str());
}

const char *const kPoints[] = {"start", "gathered", "sent_up", "passing_on", "returned"};

}  // namespace

// The root decides: killed on entry (rank 1 decides), while passing the decision on, after.
Test(agreement, the_root_dying_at_every_point_is_agreed_away, .timeout = 240) {
  for (const char *point : {"start", "passing_on", "returned"})
    expect_agreement_survives(8, 0, point, Form::kAgreeThenShrink);
  expect_agreement_survives(8, 0, "passing_on", Form::kShrink);
}

// Rank 4 of 8 holds ranks 5, 6 and 7 below it: they must find their way around it.
Test(agreement, an_inner_rank_dying_at_every_point_is_agreed_away, .timeout = 240) {
  for (const char *point : kPoints) expect_agreement_survives(8, 4, point, Form::kAgreeThenShrink);
  expect_agreement_survives(8, 4, "sent_up", Form::kShrink);
  expect_agreement_survives(8, 2, "passing_on", Form::kShrink);
}

Test(agreement, a_leaf_dying_is_agreed_away_in_a_tree_that_is_not_full, .timeout = 240) {
  expect_agreement_survives(8, 7, "sent_up", Form::kAgreeThenShrink);
  expect_agreement_survives(6, 5, "gathered", Form::kAgreeThenShrink);
  expect_agreement_survives(6, 4, "passing_on", Form::kAgreeThenShrink);
  expect_agreement_survives(6, 1, "returned", Form::kShrink);
}

// The same over UCX alone: ranks on hosts of their own.
Test(agreement, ranks_on_hosts_of_their_own_agree_round_a_death, .timeout = 240) {
  expect_agreement_survives(8, 0, "passing_on", Form::kAgreeThenShrink, true);
  expect_agreement_survives(8, 4, "sent_up", Form::kAgreeThenShrink, true);
  expect_agreement_survives(6, 1, "returned", Form::kShrink, true);
}

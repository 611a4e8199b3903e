// ddl_comm_split: groups by color ordered by key, DDL_SPLIT_NOCOLOR, nested splits,
// collectives on several communicators in turn, a bad color refused on every rank, and
// groups that span emulated hosts (hier inside a split), and groups within one host of a
// job that spans several, which take the one-host paths (shared slots, single copy).
#include <criterion/criterion.h>

#include <stdlib.h>

#include <string>
#include <vector>

#include "harness.h"

using namespace ddltest;

namespace {

// Allreduces (sum) `value` over comm and returns the result, or -1 on failure.
double sum_over(ddl_comm_t comm, double value, size_t count = 1) {
  std::vector<double> buf(count, value);
  if (ddl_allreduce(buf.data(), buf.data(), count, DDL_FLOAT64, DDL_SUM, comm) != DDL_SUCCESS)
    return -1;
  for (double v : buf)
    if (v != buf[0]) return -2;
  return buf[0];
}

int split_by_parity(ddl_comm_t comm, int rank, int nranks) {
  ddl_comm_t half = nullptr;
  // Keys reversed: the highest parent rank of each color becomes rank 0.
  RANK_OK(ddl_comm_split(comm, rank % 2, nranks - rank, &half));
  RANK_CHECK(half != nullptr, "rank %d: no communicator", rank);
  int new_rank = -1, new_size = -1;
  RANK_OK(ddl_comm_rank(half, &new_rank));
  RANK_OK(ddl_comm_size(half, &new_size));
  std::vector<int> members;
  for (int r = nranks - 1; r >= 0; --r)
    if (r % 2 == rank % 2) members.push_back(r);
  RANK_CHECK(new_size == static_cast<int>(members.size()), "rank %d: size %d, expected %zu", rank,
             new_size, members.size());
  RANK_CHECK(members[new_rank] == rank, "rank %d: new rank %d is parent rank %d", rank, new_rank,
             members[new_rank]);
  // Collectives on both communicators in turn, small and large.
  double want = 0;
  for (int m : members) want += m;
  for (int round = 0; round < 3; ++round) {
    RANK_CHECK(sum_over(half, rank) == want, "rank %d: group sum wrong", rank);
    RANK_CHECK(sum_over(comm, 1) == nranks, "rank %d: parent sum wrong", rank);
    RANK_CHECK(sum_over(half, rank, 100003) == want, "rank %d: large group sum wrong", rank);
    RANK_OK(ddl_barrier(half));
    RANK_OK(ddl_barrier(comm));
  }
  // Nested: split the group again, by new rank < half of it.
  ddl_comm_t quarter = nullptr;
  RANK_OK(ddl_comm_split(half, new_rank < new_size / 2 ? 0 : 1, 0, &quarter));
  RANK_CHECK(quarter != nullptr, "rank %d: no nested communicator", rank);
  double nested_want = 0;
  for (int i = 0; i < new_size; ++i)
    if ((i < new_size / 2) == (new_rank < new_size / 2)) nested_want += members[i];
  RANK_CHECK(sum_over(quarter, rank) == nested_want, "rank %d: nested sum wrong", rank);
  // The parent is destroyed first: its children go on.
  RANK_OK(ddl_comm_destroy(quarter));
  RANK_CHECK(sum_over(half, rank) == want, "rank %d: group sum after nested destroy", rank);
  RANK_OK(ddl_comm_destroy(half));
  return 0;
}

// 4 ranks on 2 emulated hosts, split by host: each host's group has every rank on one host,
// so its small allreduces go through the shared slots and its large ones single-copy, as a
// one-host job's do; the parent spans the hosts and takes neither.
constexpr size_t kLargeCount = size_t{1} << 20;  // 8 MB of float64: past every direct threshold

int split_by_host(ddl_comm_t comm, int rank, int nranks) {
  ddl_comm_t host = nullptr;
  RANK_OK(ddl_comm_split(comm, rank / 2, rank, &host));
  const double host_sum = (rank / 2) * 4 + 1;  // ranks 0+1, or 2+3
  RANK_CHECK(sum_over(host, rank) == host_sum, "rank %d: small host sum wrong", rank);
  RANK_CHECK(sum_over(host, rank, kLargeCount) == host_sum, "rank %d: large host sum wrong", rank);
  RANK_CHECK(sum_over(comm, 1, kLargeCount) == nranks, "rank %d: large parent sum wrong", rank);
  RANK_OK(ddl_comm_destroy(host));
  return 0;
}

int split_with_nocolor(ddl_comm_t comm, int rank, int nranks) {
  ddl_comm_t sub = reinterpret_cast<ddl_comm_t>(&sub);  // must be overwritten
  const int color = rank == 0 ? DDL_SPLIT_NOCOLOR : 7;
  RANK_OK(ddl_comm_split(comm, color, 0, &sub));
  if (rank == 0) {
    RANK_CHECK(sub == nullptr, "rank 0 passed DDL_SPLIT_NOCOLOR and got a communicator");
  } else {
    int size = 0;
    RANK_OK(ddl_comm_size(sub, &size));
    RANK_CHECK(size == nranks - 1, "rank %d: size %d", rank, size);
    RANK_CHECK(sum_over(sub, 1) == nranks - 1, "rank %d: sum wrong", rank);
    RANK_OK(ddl_comm_destroy(sub));
  }
  RANK_CHECK(sum_over(comm, 1) == nranks, "rank %d: parent sum wrong", rank);
  return 0;
}

int split_with_a_bad_color(ddl_comm_t comm, int rank, int) {
  ddl_comm_t sub = nullptr;
  const ddl_result_t r = ddl_comm_split(comm, rank == 1 ? -5 : 0, 0, &sub);
  RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT, "rank %d: got %s", rank, ddl_result_string(r));
  const std::string why = ddl_comm_last_error(comm);
  RANK_CHECK(why.find("rank 1 passed color -5") != std::string::npos, "rank %d: %s", rank,
             why.c_str());
  RANK_CHECK(sub == nullptr, "rank %d: a communicator after a failed split", rank);
  return 0;
}

}  // namespace

Test(split, by_parity_nested_and_in_turn_3_ranks) {
  const std::string failures = run_ranks(3, split_by_parity);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(split, by_parity_nested_and_in_turn_6_ranks) {
  const std::string failures = run_ranks(6, split_by_parity);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(split, nocolor_leaves_a_rank_out) {
  const std::string failures = run_ranks(4, split_with_nocolor);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(split, a_bad_color_fails_every_rank_naming_it) {
  const std::string failures = run_ranks(3, split_with_a_bad_color);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(split, groups_across_emulated_hosts_run_hier) {
  // 6 ranks on 2 hosts (0-2, 3-5); parity groups span both hosts: {0,2,4} and {1,3,5}.
  RunOptions options;
  options.before_init = [](int rank) {
    setenv("DDL_HOST_ID", rank < 3 ? "splithost0" : "splithost1", 1);
    setenv("DDL_ALGO", "hier", 1);
  };
  const std::string failures = run_ranks(6, split_by_parity, options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(split, host_groups_of_a_multi_host_job_take_the_one_host_paths) {
  RunOptions options;
  options.before_init = [](int rank) {
    setenv("DDL_HOST_ID", rank < 2 ? "splithost0" : "splithost1", 1);
  };
  std::vector<std::string> logs;
  const std::string failures = run_ranks_logged(4, split_by_host, options, &logs);
  cr_assert(failures.empty(), "%s", failures.c_str());
  for (int r = 0; r < 4; ++r) {
    const std::string &log = logs[r];
    cr_expect(log.find("allreduce of 8 B: flat (shared slots") != std::string::npos,
              "rank %d: the host group's small allreduce did not use the slots:\n%s", r,
              log.c_str());
    const std::string large = "allreduce of " + std::to_string(kLargeCount * 8) + " B: ";
    const size_t first = log.find(large), second = log.find(large, first + 1);
    if (log.find("no single-copy transfers") != std::string::npos) {
      cr_log_warn("rank %d: the kernel refuses single-copy transfers here; not checked", r);
      continue;
    }
    cr_expect(first != std::string::npos && log.compare(first + large.size(), 6, "direct") == 0,
              "rank %d: the host group's large allreduce was not single-copy:\n%s", r, log.c_str());
    cr_expect(second != std::string::npos && log.compare(second + large.size(), 6, "direct") != 0,
              "rank %d: the parent (two hosts) took the one-host path:\n%s", r, log.c_str());
  }
}

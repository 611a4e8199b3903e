// The bootstrap's relays (lib/bootstrap/relay.h) with threads as ranks: answers that reach
// every rank through trees of several depths and fanouts (and the default tree beyond 64
// ranks), a relay that leaves or falls silent, and ranks that disagree on the tree.
#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "tests/bootstrap/threads_as_ranks.h"

using namespace ddl;
using namespace ddltest;

namespace {

std::string loopback_root() {
  return "127.0.0.1:" + std::to_string(free_port());
}

// Ranks 0..6 with fanout 2: rank 1 relays to 3 and 4, rank 2 to 5 and 6.
constexpr int kRanks = 7, kFanout = 2, kRelay = 1;

}  // namespace

Test(relays, the_tree_covers_every_rank_once_up_to_the_largest_job) {
  // Every rank but 0 is the child of exactly one rank, the parent that names it among its
  // children; a star below 64 ranks; no overflow at the protocol's 2^20 ranks.
  for (int n : {2, 3, 9, 64, 65, 80, 4096, 1 << 20})
    for (int fanout : {1, 2, 8, n - 1}) {
      if (fanout < 1) continue;
      const bootstrap::RelayTree tree(n, fanout);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < tree.child_count(r); ++c) {
          const int child = tree.first_child(r) + c;
          cr_assert(child > r && child < n, "n %d fanout %d: rank %d's child %d", n, fanout, r,
                    child);
          cr_assert_eq(tree.parent(child), r, "n %d fanout %d: rank %d's parent", n, fanout, child);
          ++seen[static_cast<size_t>(child)];
        }
      for (int r = 1; r < n; ++r)
        cr_assert_eq(seen[static_cast<size_t>(r)], 1, "n %d fanout %d: rank %d", n, fanout, r);
      cr_assert_eq(tree.star(), fanout >= n - 1);
    }
}

Test(relays, every_rank_gets_every_answer_through_trees_of_any_shape) {
  // Depths 1 (fanout 12: a star) to 4 (fanout 1: a chain of 5), blobs from 0 bytes to 64 KiB.
  for (int fanout : {1, 2, 3, 12}) assert_all_ok(run_job(13, loopback_root(), 4, fanout));
}

Test(relays, beyond_64_ranks_the_default_tree_carries_the_answers) {
  // 80 ranks: rank 0's 8 children relay to the other 71 (BootstrapOptions::relay_fanout 0).
  assert_all_ok(run_job(80, loopback_root(), 2));
}

Test(relays, relays_admit_their_children_with_the_token_rank_0_made) {
  // Rank 0 makes the job's token and publishes it in the rendezvous file; the relays must
  // take their children's hellos with it, not with the token the ranks were started with.
  char dir[] = "/tmp/ddl-relays-test-XXXXXX";
  cr_assert(mkdtemp(dir) != nullptr);
  const std::string file = std::string(dir) + "/ddl-job.root";
  auto sts = run_ranks(kRanks, [&](int r) -> Status {
    BootstrapOptions o = opts_for(r, kRanks, "", 5000, kFanout);
    o.job_token = "ignored: rank 0 makes the token";
    o.fresh_token = true;
    o.rendezvous_file = file;
    o.all_local = true;
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(o, &b));
    std::vector<std::string> all;
    DDL_RETURN_IF_ERROR(b->allgather(std::to_string(r), &all));
    for (int q = 0; q < kRanks; ++q)
      if (all[q] != std::to_string(q)) return ddl::internal_error("rank %d: blob %d differs", r, q);
    return Status::Ok();
  });
  assert_all_ok(sts);
  rmdir(dir);
}

Test(relays, a_relay_that_leaves_is_named_by_every_rank) {
  quiet_logs();
  const std::string root = loopback_root();
  auto sts = run_ranks(kRanks, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, kRanks, root, 3000, kFanout), &b));
    DDL_RETURN_IF_ERROR(b->barrier());
    if (r == kRelay) return Status::Ok();  // leaves: ~Bootstrap closes its sockets
    std::vector<std::string> all;
    return b->allgather("x", &all);
  });
  cr_assert(sts[kRelay].ok(), "%s", sts[kRelay].message().c_str());
  for (int r = 0; r < kRanks; ++r) {
    if (r == kRelay) continue;
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "rank 1"), "rank %d: %s", r, sts[r].message().c_str());
    cr_log_info("rank %d: %s", r, sts[r].message().c_str());
  }
}

Test(relays, the_children_of_a_silent_relay_hear_rank_0s_word) {
  quiet_logs();
  const std::string root = loopback_root();
  const auto start = Clock::now();
  std::vector<double> took(kRanks);
  auto sts = run_ranks(kRanks, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, kRanks, root, 1000, kFanout), &b));
    if (r == kRelay) {
      sleep_ms(1600);  // connected, but never joins the allgather: its children wait on it
      return Status::Ok();
    }
    std::vector<std::string> all;
    Status st = b->allgather("x", &all);
    took[r] = seconds_since(start);
    return st;
  });
  cr_assert_eq(sts[0].code(), DDL_ERR_TIMEOUT, "%s", sts[0].message().c_str());
  for (int r : {2, 3, 4, 5, 6}) {
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "waiting for rank 1"), "rank %d: %s", r, sts[r].message().c_str());
  }
  // Rank 1's children end at rank 0's deadline (1 s), not at their own (1.2 s) nor when
  // rank 1 leaves (1.6 s).
  for (int r : {3, 4}) cr_assert(took[r] < 1.15, "rank %d took %.2f s", r, took[r]);
}

Test(relays, a_rank_that_expects_another_tree_fails_the_job_at_once) {
  quiet_logs();
  const std::string root = loopback_root();
  const auto start = Clock::now();
  auto sts = run_ranks(kRanks, [&](int r) -> Status {
    // Rank 5 expects a star, so it skips the relays' setup the others begin with.
    const int fanout = r == 5 ? kRanks - 1 : kFanout;
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, kRanks, root, 3000, fanout), &b));
    std::vector<std::string> all;
    return b->allgather("x", &all);
  });
  for (int r = 0; r < kRanks; ++r) {
    cr_assert(!sts[r].ok(), "rank %d succeeded", r);
    cr_log_info("rank %d: %s", r, sts[r].message().c_str());
  }
  cr_assert(contains(sts[0], "mismatched collectives") && contains(sts[0], "rank 5"), "%s",
            sts[0].message().c_str());
  cr_assert(seconds_since(start) < 2.5, "took %.2f s", seconds_since(start));
}

// The verifier runs every algorithm's schedules symbolically for 1..64 ranks and counts
// that do not divide evenly; mutated schedules prove that it catches mistakes.
#include <criterion/criterion.h>

#include <cmath>

#include "lib/algorithms/dbtree.h"
#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/rhd.h"
#include "lib/algorithms/tree.h"
#include "lib/algorithms/verifier.h"

using namespace ddl;

namespace {

CollectiveArgs make_args(Collective c, int nranks, size_t count, size_t chunk, bool in_place) {
  CollectiveArgs a;
  a.collective = c;
  a.nranks = nranks;
  a.count = count;
  a.chunk_elems = chunk;
  a.in_place = in_place;
  a.algorithm = "ring";  // the mutation tests below assume the ring's shape
  return a;
}

void verify_all_ranks(Collective c, const std::vector<size_t> &counts,
                      const std::string &algorithm = "") {
  for (int n = 1; n <= 64; ++n) {
    for (size_t count : counts) {
      for (size_t chunk : {size_t{0}, size_t{2}}) {
        for (bool in_place : {false, true}) {
          CollectiveArgs a = make_args(c, n, count, chunk, in_place);
          a.root = n > 1 ? (n / 2 + 1) % n : 0;
          a.algorithm = algorithm;
          Status s = verify_collective(a);
          cr_assert(s.ok(), "%s %s n=%d count=%zu chunk=%zu in_place=%d: %s", collective_name(c),
                    algorithm.c_str(), n, count, chunk, in_place, s.message().c_str());
        }
      }
    }
  }
}

std::vector<Schedule> build_all(const CollectiveArgs &args) {
  std::vector<Schedule> out;
  Status s = build_every_schedule(args, &out);
  cr_assert(s.ok(), "%s", s.message().c_str());
  return out;
}

// Every rank's tree schedule with a given radix (the registry's builder picks its own).
std::vector<Schedule> build_tree(const CollectiveArgs &args, int radix) {
  std::vector<Schedule> out(args.nranks);
  for (int r = 0; r < args.nranks; ++r) {
    CollectiveArgs mine = args;
    mine.rank = r;
    build_tree_allreduce_radix(mine, radix, &out[r]);
  }
  return out;
}

// The index of rank's n-th step of `kind` (n from 0); fails the test when there is none.
size_t nth_step(const Schedule &s, StepKind kind, int n) {
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].kind == kind && n-- == 0) return i;
  cr_assert_fail("no such step");
  return 0;
}

void expect_caught(const CollectiveArgs &a, const std::vector<Schedule> &s, const char *what) {
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok(), "the verifier missed the mutation");
  if (what) cr_assert(st.message().find(what) != std::string::npos, "%s", st.message().c_str());
}

CollectiveArgs allreduce_args(const char *algorithm, int nranks, size_t count, bool in_place) {
  CollectiveArgs a = make_args(Collective::kAllreduce, nranks, count, 0, in_place);
  a.algorithm = algorithm;
  return a;
}

}  // namespace

Test(schedules, ring_allreduce_1_to_64_ranks) {
  verify_all_ranks(Collective::kAllreduce, {1, 7, 64, 131}, "ring");
}

Test(schedules, recursive_doubling_allreduce_1_to_64_ranks) {
  verify_all_ranks(Collective::kAllreduce, {1, 7, 131}, "rd");
}

Test(schedules, rhd_allreduce_1_to_64_ranks) {
  // Counts below the rank count leave blocks empty: those pairs skip their messages.
  verify_all_ranks(Collective::kAllreduce, {0, 1, 3, 7, 64, 131, 1021}, "rhd");
}

Test(schedules, tree_allreduce_1_to_64_ranks) {
  // The radix the models pick...
  verify_all_ranks(Collective::kAllreduce, {1, 7, 131}, "tree");
  // ...and every shape: binomial, ternary, 4-nomial, 10-nomial, flat.
  for (int n = 1; n <= 64; ++n)
    for (int radix : {2, 3, 4, 10, 64})
      for (size_t count : {size_t{1}, size_t{7}, size_t{131}})
        for (bool in_place : {false, true}) {
          CollectiveArgs a = allreduce_args("tree", n, count, in_place);
          Status s = verify_schedules(a, build_tree(a, radix));
          cr_assert(s.ok(), "tree radix %d n=%d count=%zu in_place=%d: %s", radix, n, count,
                    in_place, s.message().c_str());
        }
}

// The double binary tree: every rank count to 64 (both tree shapes: mirrored for even counts,
// shifted for odd), chunked or not, in place or not; each rank an inner node of at most one
// tree, and each tree's parent links form a tree rooted at one rank.
Test(schedules, dbtree_allreduce_1_to_64_ranks) {
  for (int n = 1; n <= 64; ++n) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{131}})
      for (size_t chunk : {size_t{0}, size_t{3}})
        for (bool in_place : {false, true}) {
          CollectiveArgs a = allreduce_args("dbtree", n, count, in_place);
          a.chunk_elems = chunk;
          Status s = verify_collective(a);
          cr_assert(s.ok(), "dbtree n=%d count=%zu chunk=%zu in_place=%d: %s", n, count, chunk,
                    in_place, s.message().c_str());
        }
    for (int r = 0; r < n; ++r) {
      const DbtreePlace a = dbtree_place(n, r, 0), b = dbtree_place(n, r, 1);
      cr_assert(a.children.size() <= 2 && b.children.size() <= 2, "n=%d rank %d", n, r);
      cr_assert(a.children.empty() || b.children.empty(), "n=%d: rank %d is inner in both", n, r);
    }
    for (int tree = 0; tree < 2; ++tree) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        int at = r, hops = 0;
        while (dbtree_place(n, at, tree).parent >= 0 && hops <= n) {
          at = dbtree_place(n, at, tree).parent;
          ++hops;
        }
        cr_assert(hops <= n, "n=%d tree %d: a cycle above rank %d", n, tree, r);
        cr_assert(hops <= 2 * static_cast<int>(std::ceil(std::log2(std::max(n, 2)))),
                  "n=%d tree %d: rank %d is %d hops deep", n, tree, r, hops);
        roots += dbtree_place(n, r, tree).parent < 0;
      }
      cr_assert_eq(roots, 1, "n=%d tree %d: %d roots", n, tree, roots);
    }
  }
}

// What the communicator passes for chunk_elems by default (DDL_CHUNK_BYTES = 512K): the
// ring's model counts on its chunk pipeline above that.
constexpr size_t kDefaultChunkBytes = 512 << 10;

// The models' choices where they are clear-cut (with the constants of cost_model.h; if
// re-measured constants move a crossover, update the expectation here with the reason).
Test(schedules, models_pick_by_size_and_rank_count) {
  struct Case {
    int nranks;
    size_t bytes;
    const char *expected;
  } cases[] = {
      {8, 8, "rd"},           // 3 exchanges beat the tree's 2 levels of 7 messages
      {4, 8, "rd"},           //
      {2, 8, "rd"},           //
      {3, 8, "tree"},         // rd's fold costs 2 extra rounds; a flat tree 2 latencies
      {5, 8, "tree"},         //
      {6, 8, "rd"},           // cheaper rounds: the fold beats 5 children one by one
      {8, 256 << 10, "rhd"},  // the ring's bandwidth in 6 rounds instead of 14
      {4, 1 << 20, "rhd"},    //
      {2, 1 << 20, "ring"},   // rhd ties with the ring at 2 ranks; the ring comes first
      {6, 1 << 20, "ring"},   // rhd's fold moves the whole vector twice
      {8, 64 << 20, "ring"},  // the chunk pipeline hides the reduction
      {7, 64 << 20, "ring"},
  };
  for (const Case &c : cases) {
    CollectiveArgs a =
        make_args(Collective::kAllreduce, c.nranks, c.bytes / 4, kDefaultChunkBytes / 4, false);
    a.algorithm = "";
    std::string why;
    cr_assert_str_eq(choose_algorithm(a, &why).name, c.expected, "%d ranks, %zu B: %s", c.nranks,
                     c.bytes, why.c_str());
  }
  // The flat tree for a handful of ranks and tiny messages, narrower as messages grow.
  cr_assert_eq(tree_radix(3, 8, kCostConstants), 3);
  cr_assert_eq(tree_radix(7, 8, kCostConstants), 7);
  cr_assert_eq(tree_radix(64, 8, kCostConstants), 4);
  cr_assert_eq(tree_radix(8, 64 << 20, kCostConstants), 2);
}

// DDL_ALGO (CollectiveArgs::algorithm) wins over the models at every size, and the schedule
// says which algorithm built it (ddl_perf and the logs print it).
Test(schedules, forced_algorithm_is_honoured) {
  cr_assert(known_algorithm("ring") && known_algorithm("rd") && known_algorithm("rhd") &&
            known_algorithm("tree") && known_algorithm("") && !known_algorithm("bogus") &&
            !known_algorithm("rh"));
  const std::string names = algorithm_names();
  cr_assert_str_eq(
      names.c_str(),
      "ring, rd, rhd, tree, dbtree, hier, hier_bruck, chain, rails, dissemination, pairwise, "
      "linear");
  for (const char *name : {"ring", "rd", "rhd", "tree"})
    for (size_t count : {size_t{1}, size_t{1000}, size_t{64} << 20})
      for (int n : {2, 3, 8}) {
        CollectiveArgs a = allreduce_args(name, n, count, false);
        a.rank = n - 1;
        std::string why;
        cr_assert_str_eq(choose_algorithm(a, &why).name, name);
        cr_assert(why.find("forced") != std::string::npos, "%s", why.c_str());
        Schedule s;
        cr_assert(build_schedule(a, &s).ok());
        cr_assert_str_eq(s.algorithm.c_str(), name);
      }
  // An allreduce algorithm forced on a broadcast falls back to the broadcast's own.
  CollectiveArgs b = make_args(Collective::kBroadcast, 4, 10, 0, true);
  b.algorithm = "rhd";
  std::string why;
  cr_assert_str_eq(choose_algorithm(b, &why).name, "chain", "%s", why.c_str());
}

Test(schedules, models_pick_rd_for_small_and_ring_for_large) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 8, 2, kDefaultChunkBytes / 4, false);
  a.algorithm = "";
  std::string why;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "rd", "%s", why.c_str());
  a.count = 64 << 20;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "ring", "%s", why.c_str());
  a.algorithm = "rd";
  cr_assert_str_eq(choose_algorithm(a, &why).name, "rd", "forced: %s", why.c_str());
}

Test(schedules, ring_reduce_scatter_1_to_64_ranks) {
  verify_all_ranks(Collective::kReduceScatter, {1, 3, 5});
}

Test(schedules, ring_allgather_1_to_64_ranks) {
  verify_all_ranks(Collective::kAllgather, {1, 3, 5});
}

Test(schedules, chain_broadcast_1_to_64_ranks) {
  verify_all_ranks(Collective::kBroadcast, {1, 7, 64, 131});
}

Test(schedules, dissemination_barrier_1_to_64_ranks) {
  verify_all_ranks(Collective::kBarrier, {0});
}

Test(schedules, ring_allreduce_chunks_evenly_and_bounds_scratch) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 4, 1000003, 4096, false);
  Schedule s;
  cr_assert(build_schedule(a, &s).ok());
  cr_assert_eq(s.algorithm, "ring");
  // 4 blocks of ~250001 elements in 62 chunks; 2(n-1) steps of a send and a receive each.
  cr_assert_eq(s.steps.size(), 2u * 3u * 62u * 2u);
  cr_assert_leq(s.scratch_count, 8u * 4096u);
}

Test(verifier, catches_a_missing_dependency) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 3, 10, 0, true);
  std::vector<Schedule> s = build_all(a);
  // Rank 1's allgather receives must wait for the reduce-scatter send of the same block.
  for (Step &step : s[1].steps)
    if (step.kind == StepKind::kRecv) step.deps.clear();
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok());
  cr_assert(st.message().find("without an order") != std::string::npos, "%s", st.message().c_str());
}

Test(verifier, catches_a_wrong_offset) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 3, 10, 0, false);
  std::vector<Schedule> s = build_all(a);
  for (Step &step : s[2].steps)
    if (step.kind == StepKind::kRecvReduce) {
      step.src.offset += 1;
      break;
    }
  cr_assert_not(verify_schedules(a, s).ok());
}

Test(verifier, catches_a_double_contribution) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 2, 4, 0, false);
  std::vector<Schedule> s = build_all(a);
  // Rank 0 reduces what it received into its own block instead of the sender's.
  for (Step &step : s[0].steps)
    if (step.kind == StepKind::kSend) {
      step.src = output_at(step.src.offset);
      break;
    }
  cr_assert_not(verify_schedules(a, s).ok());
}

Test(verifier, catches_an_unmatched_message_and_deadlock) {
  CollectiveArgs a = make_args(Collective::kAllgather, 4, 2, 0, false);
  std::vector<Schedule> s = build_all(a);
  for (Step &step : s[3].steps)
    if (step.kind == StepKind::kSend) step.tag += 100;
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok());
}

// The walk's graph (walk.h) names what cannot match: a receive of another size than its
// send, and a receive whose send is gone.
Test(verifier, names_messages_that_cannot_match) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 2, 8, 0, false);
  a.algorithm = "rd";
  std::vector<Schedule> s = build_all(a);
  std::vector<Schedule> sizes = s;
  for (Step &step : sizes[1].steps)
    if (step.kind == StepKind::kRecv || step.kind == StepKind::kRecvReduce) --step.count;
  Status st = verify_schedules(a, sizes);
  cr_assert(!st.ok() && st.message().find("expects 7") != std::string::npos, "%s",
            st.message().c_str());
  std::vector<Schedule> unsent = s;
  for (Step &step : unsent[0].steps)
    if (step.kind == StepKind::kSend) {  // a local copy instead
      step.kind = StepKind::kCopy;
      step.dst = output_at(0);
    }
  st = verify_schedules(a, unsent);
  cr_assert(!st.ok() && st.message().find("never sends") != std::string::npos, "%s",
            st.message().c_str());
}

Test(verifier, catches_a_barrier_that_leaves_early) {
  CollectiveArgs a = make_args(Collective::kBarrier, 5, 0, 0, true);
  std::vector<Schedule> s = build_all(a);
  // Drop the last round everywhere: nobody hears from everyone.
  for (Schedule &sched : s) sched.steps.resize(sched.steps.size() - 2);
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok());
  cr_assert(st.message().find("without hearing") != std::string::npos, "%s", st.message().c_str());
}

Test(verifier, catches_a_write_to_an_out_of_place_input) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 2, 4, 0, false);
  std::vector<Schedule> s = build_all(a);
  for (Step &step : s[0].steps)
    if (step.kind == StepKind::kRecvReduce) step.dst = input_at(step.dst.offset);
  cr_assert_not(verify_schedules(a, s).ok());
}

// Two ranks that each wait for their own send to finish before posting the receive deadlock
// on a rendezvous transport; the verifier models sends that way and must say so.
Test(verifier, catches_a_rendezvous_deadlock) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 2, 1000, 0, false);
  a.algorithm = "rd";
  std::vector<Schedule> s = build_all(a);
  for (Schedule &sched : s)
    for (size_t i = 0; i < sched.steps.size(); ++i)
      if (sched.steps[i].kind == StepKind::kRecv || sched.steps[i].kind == StepKind::kRecvReduce)
        sched.steps[i].deps = {static_cast<uint32_t>(i - 1)};
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok());
  cr_assert(st.message().find("deadlock") != std::string::npos, "%s", st.message().c_str());
}

// Rabenseifner: the allgather receive of a range must wait for the halving send that read
// it (in place they are the same memory).
Test(verifier, catches_rhd_allgather_overwriting_a_range_being_sent) {
  CollectiveArgs a = allreduce_args("rhd", 4, 13, true);
  std::vector<Schedule> s = build_all(a);
  Step &first_gather = s[1].steps[nth_step(s[1], StepKind::kRecv, 0)];
  cr_assert_eq(first_gather.deps.size(), 1u);
  first_gather.deps.clear();
  expect_caught(a, s, "without an order");
}

// Halving rounds share the landing area and reduce what the round before produced.
Test(verifier, catches_rhd_rounds_out_of_order) {
  CollectiveArgs a = allreduce_args("rhd", 8, 64, false);
  std::vector<Schedule> s = build_all(a);
  s[5].steps[nth_step(s[5], StepKind::kRecvReduce, 2)].deps.clear();
  expect_caught(a, s, "without an order");
}

Test(verifier, catches_rhd_reducing_the_wrong_half) {
  CollectiveArgs a = allreduce_args("rhd", 6, 31, false);
  std::vector<Schedule> s = build_all(a);
  // Rank 2's second halving round reduces the half it gave away instead of the one it keeps.
  Step &reduce = s[2].steps[nth_step(s[2], StepKind::kRecvReduce, 1)];
  const Step &send = s[2].steps[nth_step(s[2], StepKind::kSend, 1)];
  reduce.src.offset = reduce.dst.offset = send.src.offset;
  expect_caught(a, s, nullptr);
}

Test(verifier, catches_rhd_final_reduce_in_the_wrong_round) {
  CollectiveArgs a = allreduce_args("rhd", 8, 40, true);
  std::vector<Schedule> s = build_all(a);
  s[3].steps[nth_step(s[3], StepKind::kRecvReduce, 1)].final_reduce = true;
  expect_caught(a, s, "final_reduce");
}

Test(verifier, catches_rhd_fold_missing_the_unfold) {
  CollectiveArgs a = allreduce_args("rhd", 5, 9, false);
  std::vector<Schedule> s = build_all(a);
  s[0].steps.pop_back();  // rank 0 never sends rank 4 its result
  expect_caught(a, s, nullptr);
}

// Tree: in place, the result arrives where the partial is still being sent from.
Test(verifier, catches_tree_result_overwriting_the_partial) {
  CollectiveArgs a = allreduce_args("tree", 4, 9, true);
  std::vector<Schedule> s = build_tree(a, 2);
  s[3].steps[nth_step(s[3], StepKind::kRecv, 0)].deps.clear();
  expect_caught(a, s, "without an order");
}

// A parent folds its children in one after another: they all write the output.
Test(verifier, catches_tree_children_reduced_at_once) {
  CollectiveArgs a = allreduce_args("tree", 12, 5, false);
  std::vector<Schedule> s = build_tree(a, 12);
  s[0].steps[nth_step(s[0], StepKind::kRecvReduce, 5)].deps.clear();
  expect_caught(a, s, "without an order");
}

Test(verifier, catches_tree_dropping_a_child) {
  CollectiveArgs a = allreduce_args("tree", 5, 3, false);
  std::vector<Schedule> s = build_tree(a, 5);
  // The root combines child 2 with its input instead of the running result.
  s[0].steps[nth_step(s[0], StepKind::kRecvReduce, 1)].src = input_at(0);
  expect_caught(a, s, nullptr);
}

Test(verifier, catches_tree_final_reduce_off_the_root) {
  CollectiveArgs a = allreduce_args("tree", 8, 4, false);
  std::vector<Schedule> s = build_tree(a, 2);
  s[4].steps[nth_step(s[4], StepKind::kRecvReduce, 0)].final_reduce = true;
  expect_caught(a, s, "final_reduce");
}

// The verifier runs every algorithm's schedules symbolically for 1..64 ranks and counts
// that do not divide evenly; mutated schedules prove that it catches mistakes.
#include <criterion/criterion.h>

#include "lib/algorithms/registry.h"
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
  std::vector<Schedule> out(args.nranks);
  for (int r = 0; r < args.nranks; ++r) {
    CollectiveArgs mine = args;
    mine.rank = r;
    cr_assert(build_schedule(mine, &out[r]).ok());
  }
  return out;
}

}  // namespace

Test(schedules, ring_allreduce_1_to_64_ranks) {
  verify_all_ranks(Collective::kAllreduce, {1, 7, 64, 131}, "ring");
}

Test(schedules, recursive_doubling_allreduce_1_to_64_ranks) {
  verify_all_ranks(Collective::kAllreduce, {1, 7, 131}, "rd");
}

Test(schedules, models_pick_rd_for_small_and_ring_for_large) {
  CollectiveArgs a = make_args(Collective::kAllreduce, 8, 2, 0, false);
  a.algorithm = "";
  std::string why;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "rd", "%s", why.c_str());
  a.count = 64 << 20;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "ring", "%s", why.c_str());
  a.algorithm = "rd";
  cr_assert_str_eq(choose_algorithm(a, &why).name, "rd", "forced: %s", why.c_str());
  cr_assert(known_algorithm("ring") && known_algorithm("") && !known_algorithm("tree"));
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
      if (sched.steps[i].kind == StepKind::kRecv)
        sched.steps[i].deps = {static_cast<uint32_t>(i - 1)};
  Status st = verify_schedules(a, s);
  cr_assert_not(st.ok());
  cr_assert(st.message().find("deadlock") != std::string::npos, "%s", st.message().c_str());
}

// Every algorithm's schedules at 1024 ranks, those with O(log n) rounds per rank at 3000 and
// 4096, hier over sampled uneven hosts at 4096, hier_bruck over 512 hosts (its allreduce at
// 4096)
// (lib/algorithms/scale_check.h: values summed instead of rank sets, so that thousands of ranks
// fit); mutated schedules prove that the check catches what it claims to.
#include <criterion/criterion.h>

#include <random>
#include <string>

#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/scale_check.h"

using namespace ddl;

namespace {

// The count that gives every rank a block and leaves a remainder: n + 3 elements for the
// collectives on one vector, 2 per rank (or per peer) for those of blocks.
size_t count_for(Collective c, int n) {
  const bool one_vector =
      c == Collective::kAllreduce || c == Collective::kBroadcast || c == Collective::kReduce;
  return one_vector ? static_cast<size_t>(n) + 3 : 2;
}

CollectiveArgs call(Collective c, const char *algorithm, int n) {
  CollectiveArgs a;
  a.collective = c;
  a.algorithm = algorithm;
  a.nranks = n;
  a.count = count_for(c, n);
  a.root = n / 3;
  return a;
}

// Hosts of 1..max_per_host ranks (a seeded draw), as tiers[0].
void uneven_hosts(CollectiveArgs *a, int max_per_host, unsigned seed) {
  std::mt19937 draw(seed);
  std::uniform_int_distribution<int> size(1, max_per_host);
  std::vector<int> host_of;
  int hosts = 0;
  while (static_cast<int>(host_of.size()) < a->nranks) {
    const int here = std::min(size(draw), a->nranks - static_cast<int>(host_of.size()));
    host_of.insert(host_of.end(), static_cast<size_t>(here), hosts++);
  }
  a->tiers = {host_of};
  a->hosts = hosts;
}

// Hosts of `per_host` ranks each, as tiers[0].
void even_hosts(CollectiveArgs *a, int per_host) {
  std::vector<int> host_of(static_cast<size_t>(a->nranks));
  for (int r = 0; r < a->nranks; ++r) host_of[static_cast<size_t>(r)] = r / per_host;
  a->tiers = {host_of};
  a->hosts = a->nranks / per_host;
}

void expect_ok(const CollectiveArgs &a, const char *what) {
  Status s = check_schedules_at_scale(a);
  cr_assert(s.ok(), "%s %s %s, %d ranks: %s", what, collective_name(a.collective),
            a.algorithm.c_str(), a.nranks, s.message().c_str());
}

}  // namespace

Test(schedules_at_scale, every_algorithm_at_1024_ranks, .timeout = 120) {
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (per_peer_counts(info.collective)) continue;
    CollectiveArgs a = call(info.collective, info.name, 1024);
    if (std::string(info.name) != "hier") {
      expect_ok(a, "");
      continue;
    }
    uneven_hosts(&a, 12, 1024);
    expect_ok(a, "");
    a.peer_memory = true;  // single copy inside hosts (allreduce, allgather, reduce-scatter)
    expect_ok(a, "single copy,");
  }
}

Test(schedules_at_scale, logarithmic_algorithms_at_3000_and_4096_ranks, .timeout = 120) {
  const std::pair<Collective, const char *> calls[] = {
      {Collective::kAllreduce, "rd"},    {Collective::kAllreduce, "rhd"},
      {Collective::kAllreduce, "tree"},  {Collective::kAllreduce, "dbtree"},
      {Collective::kBroadcast, "chain"}, {Collective::kBarrier, "dissemination"},
      {Collective::kReduce, "tree"},     {Collective::kGather, "linear"},
      {Collective::kScatter, "linear"}};
  for (int n : {3000, 4096})
    for (const auto &c : calls) expect_ok(call(c.first, c.second, n), "");
}

Test(schedules_at_scale, hier_over_uneven_hosts_at_4096_ranks, .timeout = 300) {
  // 4096 ranks on hosts of 1..16 ranks; then on hosts of 1..8 grouped into racks of 8 hosts
  // as a second tier.
  CollectiveArgs uneven = call(Collective::kAllreduce, "hier", 4096);
  uneven_hosts(&uneven, 16, 16);
  expect_ok(uneven, "uneven hosts");
  CollectiveArgs a = call(Collective::kAllreduce, "hier", 4096);
  uneven_hosts(&a, 8, 7);
  std::vector<int> rack_of(a.tiers[0].size());
  for (size_t r = 0; r < rack_of.size(); ++r) rack_of[r] = a.tiers[0][r] / 8;
  a.tiers.push_back(rack_of);
  expect_ok(a, "hosts in racks");
  // hier_bruck's rounds over 512 hosts of 2 and 128 hosts of 8 (and its fallback to hier's
  // forms on uneven hosts), at 1024 ranks: an allgather's check moves n^2 elements, and 512
  // hosts of 8 took 1.5 minutes of the suite for rounds that 512 hosts of 2 have as well.
  for (Collective c : {Collective::kAllgather, Collective::kReduceScatter}) {
    CollectiveArgs bruck = call(c, "hier_bruck", 1024);
    even_hosts(&bruck, 2);
    expect_ok(bruck, "512 hosts x 2");
    even_hosts(&bruck, 8);
    expect_ok(bruck, "128 hosts x 8");
    uneven_hosts(&bruck, 8, 9);
    expect_ok(bruck, "uneven hosts");
  }
  // hier_bruck's allreduce over 512 hosts of 8 (4 elements a rank and a tail of 3 beside),
  // also in 2 pieces, and of 2; on uneven hosts it builds hier.
  CollectiveArgs rails = call(Collective::kAllreduce, "hier_bruck", 4096);
  rails.count = 4 * 4096 + 3;
  even_hosts(&rails, 8);
  expect_ok(rails, "512 hosts x 8");
  rails.pieces = 2;
  expect_ok(rails, "512 hosts x 8, 2 pieces");
  rails = call(Collective::kAllreduce, "hier_bruck", 1024);
  rails.count = 3 * 1024;
  even_hosts(&rails, 2);
  expect_ok(rails, "512 hosts x 2");
  uneven_hosts(&rails, 8, 11);
  expect_ok(rails, "uneven hosts");
  CollectiveArgs b = call(Collective::kBroadcast, "hier", 4096);
  uneven_hosts(&b, 16, 3);
  expect_ok(b, "uneven hosts");
  // In pieces whose tiers overlap (lib/algorithms/hier.h), each rank with a few elements of
  // every piece.
  CollectiveArgs pieces = call(Collective::kAllreduce, "hier", 4096);
  pieces.count = 4 * 4096 + 3;
  pieces.pieces = 4;
  uneven_hosts(&pieces, 16, 5);
  expect_ok(pieces, "uneven hosts, 4 pieces");
}

namespace {

std::vector<Schedule> build_all(const CollectiveArgs &args) {
  std::vector<Schedule> out;
  Status s = build_every_schedule(args, &out);
  cr_assert(s.ok(), "%s", s.message().c_str());
  return out;
}

void expect_caught(const CollectiveArgs &a, std::vector<Schedule> by_rank, const char *mistake) {
  Status s = check_schedules_at_scale(a, std::move(by_rank));
  cr_assert(!s.ok(), "a schedule with %s passed", mistake);
}

}  // namespace

Test(schedules_at_scale, catches_mutated_schedules) {
  const CollectiveArgs a = call(Collective::kAllreduce, "ring", 64);
  const std::vector<Schedule> good = build_all(a);
  cr_assert(check_schedules_at_scale(a, good).ok());
  // A receive-and-reduce that overwrites instead: a contribution lost.
  std::vector<Schedule> lost = good;
  for (Step &step : lost[5].steps)
    if (step.kind == StepKind::kRecvReduce) {
      step.kind = StepKind::kRecv;
      break;
    }
  expect_caught(a, lost, "a lost contribution");
  // The reduction that completes rank 7's own block done twice: an operand counted twice
  // (its own block: the allgather does not overwrite it afterwards).
  std::vector<Schedule> doubled = good;
  for (Step &step : doubled[7].steps)
    if (step.kind == StepKind::kRecvReduce && step.final_reduce) {
      Step again = reduce_step(step.tmp, step.dst, step.dst, step.count, false,
                               {static_cast<uint32_t>(&step - doubled[7].steps.data())});
      add_step(&doubled[7], again);
      break;
    }
  expect_caught(a, doubled, "a contribution counted twice");
  // A block sent from the wrong offset.
  std::vector<Schedule> shifted = good;
  for (Step &step : shifted[3].steps)
    if (step.kind == StepKind::kSend && step.src.offset > 0) {
      --step.src.offset;
      break;
    }
  expect_caught(a, shifted, "a shifted block");
  // A receive nobody sends: the schedules cannot complete.
  std::vector<Schedule> stuck = good;
  add_step(&stuck[9], recv_step(10, kMaxStepTag, output_at(0), 1, {}));
  expect_caught(a, stuck, "a receive that never comes");
  // Two ranks that each wait for the other's later message before sending: a deadlock.
  std::vector<Schedule> deadlock(2);
  CollectiveArgs two = call(Collective::kAllreduce, "ring", 2);
  for (int r = 0; r < 2; ++r) {
    deadlock[r].input_count = deadlock[r].output_count = two.count;
    const uint32_t recv = add_step(&deadlock[r], recv_step(1 - r, 1, output_at(0), 1, {}));
    add_step(&deadlock[r], send_step(1 - r, 1, input_at(0), 1, {recv}));
  }
  Status s = check_schedules_at_scale(two, deadlock);
  cr_assert(!s.ok() && s.message().find("deadlock") != std::string::npos, "%s",
            s.message().c_str());
}

// The verifier runs the schedules of alltoall(v), reduce, gather(v), scatter(v), scan and
// exscan for 1..1024 ranks: every element delivered exactly once to the right place, uneven and
// zero counts, every root, in place and not; mutated layouts prove that it catches mistakes.
#include <criterion/criterion.h>

#include <algorithm>
#include <random>

#include "lib/algorithms/registry.h"
#include "lib/algorithms/verifier.h"

using namespace ddl;

namespace {

CollectiveArgs make_args(Collective c, int nranks, int rank, size_t count) {
  CollectiveArgs a;
  a.collective = c;
  a.nranks = nranks;
  a.rank = rank;
  a.count = count;
  return a;
}

void check(const std::vector<CollectiveArgs> &all, const char *what) {
  const CollectiveArgs &a = all[0];
  Status s = verify_collective(all);
  cr_assert(s.ok(), "%s %s n=%d count=%zu root=%d in_place=%d algo=%s: %s", what,
            collective_name(a.collective), a.nranks, a.count, a.root, a.in_place,
            a.algorithm.c_str(), s.message().c_str());
}

// Every rank's args of a collective with one count (layouts made by the builders).
std::vector<CollectiveArgs> uniform(Collective c, int n, size_t count, int root, bool in_place,
                                    size_t chunk = 0, const std::string &algorithm = "") {
  std::vector<CollectiveArgs> all;
  for (int r = 0; r < n; ++r) {
    CollectiveArgs a = make_args(c, n, r, count);
    a.root = root;
    // Only the root of a rooted call has an in-place layout.
    a.in_place = in_place && (!has_root(c) || r == root);
    a.chunk_elems = chunk;
    a.algorithm = algorithm;
    all.push_back(a);
  }
  return all;
}

// counts[i][j]: what rank i sends to rank j; blocks packed in rank order with a gap of
// `gap` elements between them, so that displacements are not the running sums.
std::vector<CollectiveArgs> alltoallv(const std::vector<std::vector<size_t>> &counts, size_t gap,
                                      bool in_place) {
  const int n = static_cast<int>(counts.size());
  std::vector<CollectiveArgs> all;
  for (int r = 0; r < n; ++r) {
    auto layout = std::make_shared<BlockLayout>();
    size_t send_at = gap, recv_at = 0;
    for (int j = 0; j < n; ++j) {
      layout->send_counts.push_back(counts[r][j]);
      layout->send_displs.push_back(send_at);
      send_at += counts[r][j] + gap;
      layout->recv_counts.push_back(counts[j][r]);
      layout->recv_displs.push_back(recv_at);
      recv_at += counts[j][r] + gap;
    }
    CollectiveArgs a = make_args(Collective::kAlltoallv, n, r, 0);
    a.in_place = in_place;
    if (in_place) layout->send_counts.clear(), layout->send_displs.clear();
    a.layout = layout;
    all.push_back(a);
  }
  return all;
}

std::vector<std::vector<size_t>> random_counts(int n, size_t max, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<size_t>> counts(n, std::vector<size_t>(n));
  for (auto &row : counts)
    for (size_t &c : row) c = rng() % (max + 1);  // zeros included
  return counts;
}

// Gatherv / scatterv: rank i's block has counts[i] elements at the root, `gap` apart, in
// reverse rank order (displacements need not grow with the rank).
std::vector<CollectiveArgs> rooted_v(Collective c, const std::vector<size_t> &counts, int root,
                                     bool in_place) {
  const int n = static_cast<int>(counts.size());
  auto layout = std::make_shared<BlockLayout>();
  layout->recv_counts.assign(n, 0);
  layout->recv_displs.assign(n, 0);
  size_t at = 0;
  for (int i = n - 1; i >= 0; --i) {
    layout->recv_counts[i] = counts[i];
    layout->recv_displs[i] = at;
    at += counts[i] + 1;
  }
  if (c == Collective::kScatterv) {
    std::swap(layout->send_counts, layout->recv_counts);
    std::swap(layout->send_displs, layout->recv_displs);
  }
  std::vector<CollectiveArgs> all;
  for (int r = 0; r < n; ++r) {
    CollectiveArgs a = make_args(c, n, r, counts[r]);
    a.root = root;
    a.in_place = in_place && r == root;
    if (r == root)
      a.layout = layout;
    else
      a.layout = std::make_shared<BlockLayout>();
    all.push_back(a);
  }
  return all;
}

const std::vector<int> kLarge = {100, 256, 1024};

// tiers[0] for hosts of shape[h] ranks each: numbered host by host, or (cyclic) shifted by
// one rank so that no host's ranks are consecutive from 0.
std::vector<int> host_tier(const std::vector<int> &shape, bool cyclic) {
  std::vector<int> tier;
  for (size_t h = 0; h < shape.size(); ++h)
    for (int k = 0; k < shape[h]; ++k) tier.push_back(static_cast<int>(h));
  if (cyclic) std::rotate(tier.begin(), tier.begin() + 1, tier.end());
  return tier;
}

}  // namespace

Test(rooted_schedules, alltoall_every_size) {
  for (int n = 1; n <= 24; ++n)
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}})
      for (bool in_place : {false, true})
        check(uniform(Collective::kAlltoall, n, count, 0, in_place), "uniform");
  for (int n : {100, 256}) check(uniform(Collective::kAlltoall, n, 1, 0, false), "large");
}

Test(rooted_schedules, alltoall_1024_ranks, .timeout = 600) {
  check(uniform(Collective::kAlltoall, 1024, 1, 0, false), "1024");
}

Test(rooted_schedules, alltoallv_uneven_and_zero) {
  for (int n = 1; n <= 16; ++n)
    for (unsigned seed = 0; seed < 3; ++seed)
      for (bool in_place : {false, true}) {
        std::vector<std::vector<size_t>> counts = random_counts(n, 4, seed * 31 + n);
        // In place a rank sends what it receives (MPI_IN_PLACE): the counts are symmetric.
        for (int i = 0; in_place && i < n; ++i)
          for (int j = 0; j < i; ++j) counts[i][j] = counts[j][i];
        check(alltoallv(counts, seed % 2, in_place), "random");
      }
  // All zero but one pair.
  std::vector<std::vector<size_t>> sparse(9, std::vector<size_t>(9, 0));
  sparse[7][2] = 5;
  check(alltoallv(sparse, 0, false), "sparse");
}

Test(rooted_schedules, gather_scatter_every_root) {
  for (Collective c : {Collective::kGather, Collective::kScatter})
    for (int n = 1; n <= 17; ++n)
      for (int root = 0; root < n; root += (n > 6 ? 5 : 1))
        for (size_t count : {size_t{0}, size_t{1}, size_t{5}})
          for (bool in_place : {false, true})
            check(uniform(c, n, count, root, in_place), "uniform");
  for (Collective c : {Collective::kGather, Collective::kScatter})
    for (int n : kLarge) check(uniform(c, n, 2, n / 3, false), "large");
}

Test(rooted_schedules, gatherv_scatterv_uneven) {
  std::mt19937 rng(7);
  for (Collective c : {Collective::kGatherv, Collective::kScatterv})
    for (int n = 1; n <= 13; ++n)
      for (int root : {0, n - 1, n / 2})
        for (bool in_place : {false, true}) {
          std::vector<size_t> counts(n);
          for (size_t &k : counts) k = rng() % 4;
          check(rooted_v(c, counts, root, in_place), "uneven");
        }
}

// Allgatherv: every rank receives every block (counts[i] elements of rank i, one element
// apart, in reverse rank order), in place (each rank's block already where it belongs) or
// not; empty blocks included.
Test(rooted_schedules, allgatherv_uneven) {
  std::mt19937 rng(11);
  for (int n = 1; n <= 13; ++n)
    for (bool in_place : {false, true}) {
      std::vector<size_t> counts(n);
      for (size_t &k : counts) k = rng() % 4;
      std::vector<CollectiveArgs> all = rooted_v(Collective::kGatherv, counts, 0, false);
      for (int r = 0; r < n; ++r) {
        all[r].collective = Collective::kAllgatherv;
        all[r].layout = all[0].layout;
        all[r].in_place = in_place;
      }
      check(all, "uneven");
    }
  std::vector<CollectiveArgs> large =
      rooted_v(Collective::kGatherv, std::vector<size_t>(256, 2), 0, false);
  for (CollectiveArgs &a : large) {
    a.collective = Collective::kAllgatherv;
    a.layout = large[0].layout;
  }
  check(large, "large");
}

// Reduce_scatterv: blocks of 0-3 elements, packed, every rank's layout alike; in place (the
// output is the own block of the input) or not.
Test(rooted_schedules, reduce_scatterv_uneven) {
  std::mt19937 rng(13);
  for (int n = 1; n <= 13; ++n)
    for (bool in_place : {false, true}) {
      auto layout = std::make_shared<BlockLayout>();
      size_t at = 0;
      for (int j = 0; j < n; ++j) {
        layout->send_counts.push_back(rng() % 4);
        layout->send_displs.push_back(at);
        at += layout->send_counts.back();
      }
      std::vector<CollectiveArgs> all;
      for (int r = 0; r < n; ++r) {
        CollectiveArgs a = make_args(Collective::kReduceScatterv, n, r, layout->send_counts[r]);
        a.layout = layout;
        a.in_place = in_place;
        all.push_back(a);
      }
      check(all, "uneven");
    }
}

// The pairwise exchanges across hosts, where each rank sends to at most two other hosts at
// once (NetworkSendWindow): alltoall, alltoallv, allgatherv and reduce_scatterv on one
// rank per host and on hosts of several ranks, numbered round robin, with no deadlock (the
// verifier completes a send only once its receive is posted).
Test(rooted_schedules, pairwise_exchanges_over_hosts) {
  std::mt19937 rng(17);
  for (int n = 2; n <= 13; ++n)
    for (int hosts : {n, 2, 3}) {
      if (hosts > n) continue;
      std::vector<int> host_of;
      for (int r = 0; r < n; ++r) host_of.push_back(r % hosts);
      auto over_hosts = [&](std::vector<CollectiveArgs> all) {
        for (CollectiveArgs &a : all) a.tiers = {host_of}, a.hosts = hosts;
        return all;
      };
      for (bool in_place : {false, true}) {
        check(over_hosts(uniform(Collective::kAlltoall, n, 2, 0, in_place, 0, "pairwise")),
              "alltoall");
        std::vector<std::vector<size_t>> pairs = random_counts(n, 3, rng());
        for (int i = 0; in_place && i < n; ++i)  // in place: symmetric, as above
          for (int j = 0; j < i; ++j) pairs[i][j] = pairs[j][i];
        check(over_hosts(alltoallv(pairs, 1, in_place)), "alltoallv");
        std::vector<size_t> counts(n);
        for (size_t &k : counts) k = rng() % 4;
        std::vector<CollectiveArgs> all = rooted_v(Collective::kGatherv, counts, 0, false);
        for (CollectiveArgs &a : all) {
          a.collective = Collective::kAllgatherv;
          a.layout = all[0].layout;
          a.in_place = in_place;
        }
        check(over_hosts(all), "allgatherv");
        auto layout = std::make_shared<BlockLayout>();
        for (int j = 0; j < n; ++j) {
          layout->send_displs.push_back(j == 0 ? 0 : layout->send_displs.back() + counts[j - 1]);
          layout->send_counts.push_back(counts[j]);
        }
        all.clear();
        for (int r = 0; r < n; ++r) {
          CollectiveArgs a = make_args(Collective::kReduceScatterv, n, r, counts[r]);
          a.layout = layout;
          a.in_place = in_place;
          all.push_back(a);
        }
        check(over_hosts(all), "reduce_scatterv");
      }
    }
  // The window itself: rank 0 of 6 ranks on 6 hosts sends to 1..5; its third send waits for
  // its first, its fourth for its second. On one host nothing waits.
  for (bool across : {true, false}) {
    CollectiveArgs a = make_args(Collective::kAlltoall, 6, 0, 1);
    a.algorithm = "pairwise";
    if (across) a.tiers = {{0, 1, 2, 3, 4, 5}}, a.hosts = 6;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    std::vector<uint32_t> sends;
    for (uint32_t i = 0; i < s.steps.size(); ++i)
      if (s.steps[i].kind == StepKind::kSend) sends.push_back(i);
    cr_assert_eq(sends.size(), 5u);
    for (size_t k = 0; k < sends.size(); ++k) {
      const std::vector<uint32_t> &deps = s.steps[sends[k]].deps;
      const bool waits =
          std::find(deps.begin(), deps.end(), k >= 2 ? sends[k - 2] : ~0u) != deps.end();
      cr_assert_eq(waits, across && k >= 2, "send %zu (across hosts: %d)", k, across);
    }
  }
}

Test(rooted_schedules, reduce_tree_and_ring) {
  for (const char *algo : {"tree", "ring"})
    for (int n = 1; n <= 19; ++n)
      for (int root = 0; root < n; root += (n > 6 ? 4 : 1))
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{40}})
          for (size_t chunk : {size_t{0}, size_t{3}})
            for (bool in_place : {false, true})
              check(uniform(Collective::kReduce, n, count, root, in_place, chunk, algo), "reduce");
  for (const char *algo : {"tree", "ring"})
    for (int n : kLarge)
      check(uniform(Collective::kReduce, n, static_cast<size_t>(n) + 3, n - 1, false, 0, algo),
            "large");
}

Test(rooted_schedules, scan_and_exscan) {
  for (Collective c : {Collective::kScan, Collective::kExscan}) {
    for (int n = 1; n <= 19; ++n)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}})
        for (bool in_place : {false, true}) check(uniform(c, n, count, 0, in_place), "scan");
    for (int n : kLarge) check(uniform(c, n, 3, 0, n % 2 == 1), "large");
  }
}

// In place, a scan's reduce overwrites what the round's send reads: without waiting for the
// send it races it, and the verifier says so. An exscan that writes rank 0's output is wrong.
Test(rooted_schedules, the_verifier_catches_a_scan_that_races_its_send) {
  std::vector<CollectiveArgs> all = uniform(Collective::kScan, 4, 5, 0, true);
  std::vector<Schedule> by_rank(all.size());
  for (size_t r = 0; r < all.size(); ++r) cr_assert(build_schedule(all[r], &by_rank[r]).ok());
  cr_assert(verify_schedules(all, by_rank).ok());
  bool mutated = false;
  std::vector<Step> &steps = by_rank[1].steps;
  for (Step &step : steps)
    if (step.kind == StepKind::kReduce && !mutated) {
      const auto send = std::find_if(step.deps.begin(), step.deps.end(),
                                     [&](uint32_t d) { return steps[d].kind == StepKind::kSend; });
      cr_assert(send != step.deps.end(), "rank 1's first reduce waits for its send");
      step.deps.erase(send);
      mutated = true;
    }
  cr_assert(mutated);
  cr_assert(!verify_schedules(all, by_rank).ok());
  all = uniform(Collective::kExscan, 3, 2, 0, false);
  by_rank.assign(3, Schedule());
  for (int r = 0; r < 3; ++r) cr_assert(build_schedule(all[r], &by_rank[r]).ok());
  add_step(&by_rank[0], copy_step(input_at(0), output_at(0), 2, {}));
  cr_assert(!verify_schedules(all, by_rank).ok());
}

Test(rooted_schedules, the_verifier_catches_a_misplaced_block) {
  // Rank 1 receives rank 0's block one element later than its layout says.
  std::vector<CollectiveArgs> all = alltoallv(random_counts(3, 3, 1), 1, false);
  std::vector<Schedule> by_rank(all.size());
  for (size_t r = 0; r < all.size(); ++r) cr_assert(build_schedule(all[r], &by_rank[r]).ok());
  cr_assert(verify_schedules(all, by_rank).ok());
  bool mutated = false;
  for (Step &step : by_rank[1].steps)
    if (step.kind == StepKind::kRecv && step.peer == 0 && step.count > 0) {
      step.dst.offset += 1;
      mutated = true;
    }
  cr_assert(mutated);
  cr_assert(!verify_schedules(all, by_rank).ok());
  // Counts that disagree: rank 2 expects one element more from rank 0 than it sends.
  all = alltoallv(random_counts(3, 3, 2), 0, false);
  auto layout = std::make_shared<BlockLayout>(*all[2].layout);
  layout->recv_counts[0] += 1;
  all[2].layout = layout;
  cr_assert(!verify_collective(all).ok());
  // A gather whose root writes its own block to the wrong place.
  all = uniform(Collective::kGather, 4, 2, 1, false);
  by_rank.assign(4, Schedule());
  for (int r = 0; r < 4; ++r) cr_assert(build_schedule(all[r], &by_rank[r]).ok());
  for (Step &step : by_rank[1].steps)
    if (step.kind == StepKind::kCopy) step.dst.offset = 0;
  cr_assert(!verify_schedules(all, by_rank).ok());
}

// hier's alltoall over hosts of every shape (tiers[0] groups), uneven ones included, in place
// and not; forced, and as the models choose.
Test(rooted_schedules, hier_alltoall_over_hosts) {
  const std::vector<std::vector<int>> shapes = {{2, 2}, {1, 3},    {3, 1, 2}, {4, 4, 4, 4},
                                                {2, 5}, {1, 1, 1}, {3}};
  for (const std::vector<int> &shape : shapes)
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}})
      for (bool in_place : {false, true}) {
        // Round-robin numbering as well as host by host.
        for (bool cyclic : {false, true}) {
          const std::vector<int> tier = host_tier(shape, cyclic);
          const int n = static_cast<int>(tier.size());
          std::vector<CollectiveArgs> all =
              uniform(Collective::kAlltoall, n, count, 0, in_place, 0, "hier");
          for (CollectiveArgs &a : all) {
            a.tiers = {tier};
            a.hosts = static_cast<int>(shape.size());
          }
          check(all, cyclic ? "hier cyclic" : "hier");
        }
      }
  std::vector<int> tier;
  for (int h = 0; h < 16; ++h)
    for (int k = 0; k < 8; ++k) tier.push_back(h);
  std::vector<CollectiveArgs> all = uniform(Collective::kAlltoall, 128, 1, 0, false, 0, "hier");
  for (CollectiveArgs &a : all) a.tiers = {tier}, a.hosts = 16;
  check(all, "hier 16 x 8");
}

// The rails' alltoall over hosts of every shape, 1 to 4 rails, in place and not; and on 2
// hosts x 4 ranks x 2 rails every message between hosts joins two ranks of one rail.
Test(rooted_schedules, rail_alltoall_over_hosts) {
  const std::vector<std::vector<int>> shapes = {{2, 2}, {4, 4}, {3, 1, 2}, {2, 2, 2, 2}, {1, 3}};
  for (const std::vector<int> &shape : shapes)
    for (int rails : {1, 2, 3, 4})
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}})
        for (bool in_place : {false, true})
          for (bool cyclic : {false, true}) {
            const std::vector<int> tier = host_tier(shape, cyclic);
            const int n = static_cast<int>(tier.size());
            std::vector<CollectiveArgs> all =
                uniform(Collective::kAlltoall, n, count, 0, in_place, 0, "rails");
            for (CollectiveArgs &a : all) {
              a.tiers = {tier};
              a.hosts = static_cast<int>(shape.size());
              a.rails = rails;
            }
            check(all, "rails");
          }
  for (int r = 0; r < 8; ++r) {
    CollectiveArgs a = make_args(Collective::kAlltoall, 8, r, 2);
    a.algorithm = "rails";
    a.tiers = {{0, 0, 0, 0, 1, 1, 1, 1}};
    a.hosts = 2;
    a.rails = 2;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    for (const Step &step : s.steps)
      if (step.kind == StepKind::kSend && step.peer / 4 != r / 4)
        cr_assert_eq(step.peer % 2, r % 2, "rank %d sends to rank %d across hosts", r, step.peer);
  }
}

Test(rooted_schedules, alltoall_models_take_hier_for_small_blocks_across_hosts) {
  std::vector<int> tier;
  for (int h = 0; h < 4; ++h)
    for (int k = 0; k < 4; ++k) tier.push_back(h);
  CollectiveArgs a = make_args(Collective::kAlltoall, 16, 0, 2);
  a.tiers = {tier};
  a.hosts = 4;
  a.elem_size = 4;
  std::string why;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  a.count = 1 << 20;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "pairwise", "%s", why.c_str());
  // With a rail per local rank, large blocks go by the rails.
  a.rails = 4;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "rails", "%s", why.c_str());
  a.rails = 1;
  a.tiers.clear();
  a.hosts = 1;
  a.count = 2;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "pairwise", "%s", why.c_str());
}

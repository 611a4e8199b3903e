// The verifier runs hier's schedules symbolically over many tier shapes: even and uneven
// hosts, three tiers up to 16 x 16 x 4 (1024 ranks), every count edge, in place and not.
#include <criterion/criterion.h>

#include <functional>
#include <string>
#include <vector>

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/hier.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/verifier.h"
#include "tests/unit/hier_verify.h"

using namespace ddl;

namespace {

// Tiers d1 x d2 x ... of consecutive ranks, fastest first (DDL_TIERS' meaning).
std::vector<std::vector<int>> even_tiers(const std::vector<int> &dims) {
  int n = 1;
  for (int d : dims) n *= d;
  std::vector<std::vector<int>> tiers;
  int span = 1;
  for (size_t t = 0; t + 1 < dims.size(); ++t) {
    span *= dims[t];
    std::vector<int> group_of(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) group_of[static_cast<size_t>(r)] = r / span;
    tiers.push_back(group_of);
  }
  return tiers;
}

// hier's collectives: allreduce (multi-tier), allgather and reduce-scatter (two levels).
const Collective kHierCollectives[] = {Collective::kAllreduce, Collective::kAllgather,
                                       Collective::kReduceScatter};

}  // namespace

Test(hier_schedules, even_hosts) {
  for (Collective c : kHierCollectives)
    for (int hosts : {1, 2, 3, 4})
      for (int local : {1, 2, 3, 4})
        verify_hier(hosts_of_sizes(std::vector<int>(hosts, local)), hosts * local,
                    {0, 1, 5, 13, 64, 131}, {0, 3}, c);
}

Test(hier_schedules, uneven_hosts) {
  const std::vector<std::vector<int>> shapes = {{1, 2}, {2, 1},    {3, 1},    {1, 3}, {2, 4},
                                                {4, 2}, {3, 2, 1}, {1, 1, 2}, {5, 3}, {2, 3, 4, 1}};
  for (const auto &sizes : shapes) {
    int n = 0;
    for (int s : sizes) n += s;
    for (Collective c : kHierCollectives)
      verify_hier(hosts_of_sizes(sizes), n, {0, 1, 2, 7, 13, 60, 131}, {0, 2}, c);
  }
}

Test(hier_schedules, hosts_not_in_rank_order) {
  // Ranks of a host need not be consecutive: ranks 0 and 2 on one host, 1 and 3 on another.
  for (Collective c : kHierCollectives) {
    verify_hier({{0, 1, 0, 1}}, 4, {1, 9, 64}, {0, 4}, c);
    verify_hier({{1, 0, 2, 1, 0, 2}}, 6, {5, 37}, {0, 3}, c);
  }
}

Test(hier_schedules, three_tiers) {
  for (const std::vector<int> &dims :
       std::vector<std::vector<int>>{{2, 2, 2}, {2, 3, 2}, {4, 2, 3}, {3, 3, 3}})
    for (Collective c : kHierCollectives)
      verify_hier(even_tiers(dims), dims[0] * dims[1] * dims[2], {1, 11, 97}, {0, 5}, c);
}

Test(hier_schedules, single_copy_host_tier) {
  // The host tier by kPeerRead / kPeerWrite: even, uneven, interleaved hosts, three tiers.
  for (Collective c : kHierCollectives) {
    for (int hosts : {1, 2, 3})
      for (int local : {1, 2, 3, 4})
        verify_hier(hosts_of_sizes(std::vector<int>(hosts, local)), hosts * local,
                    {0, 1, 5, 13, 64, 131}, {0, 3}, c, true);
    for (const std::vector<int> &sizes :
         std::vector<std::vector<int>>{{1, 2}, {3, 1}, {2, 4}, {5, 3}, {2, 3, 4, 1}}) {
      int n = 0;
      for (int size : sizes) n += size;
      verify_hier(hosts_of_sizes(sizes), n, {1, 7, 60, 131}, {0, 2}, c, true);
    }
    verify_hier({{1, 0, 2, 1, 0, 2}}, 6, {5, 37}, {0, 3}, c, true);
    verify_hier(even_tiers({3, 2, 2}), 12, {1, 11, 97}, {0, 5}, c, true);
  }
}

Test(hier_schedules, pipelined_pieces) {
  // The vector in pieces whose tiers overlap (each piece's host reduce-scatter after the
  // previous piece's): by messages and by single copy, even and uneven hosts, three tiers,
  // more pieces than some ranks have elements.
  for (int pieces : {2, 3, 8})
    for (bool peer_memory : {false, true}) {
      verify_hier(hosts_of_sizes({2, 2}), 4, {1, 7, 64, 131}, {0, 3}, Collective::kAllreduce,
                  peer_memory, pieces);
      verify_hier(hosts_of_sizes({3, 1, 2}), 6, {13, 97}, {0, 2}, Collective::kAllreduce,
                  peer_memory, pieces);
      verify_hier(even_tiers({2, 3, 2}), 12, {50, 131}, {0, 5}, Collective::kAllreduce, peer_memory,
                  pieces);
    }
}

namespace {

// An allreduce on DGX-like hosts of 8 ranks: the host tier by single copy at 370 GB/s, 8 NICs
// of 47.5 GB/s, `overhead` a message.
CollectiveArgs dgx_like(int hosts, size_t count, double overhead = 1e-6) {
  CollectiveArgs a;
  a.nranks = hosts * 8;
  a.elem_size = 4;
  a.count = count;
  std::vector<int> host_of;
  for (int r = 0; r < a.nranks; ++r) host_of.push_back(r / 8);
  a.tiers = {host_of};
  a.hosts = hosts;
  a.peer_memory = true;
  a.local = CostConstants{3e-6, overhead, 1.0 / 370e9, 1.0 / 1e12};
  a.net = CostConstants{4e-6, overhead, 1.0 / 47.5e9, 1.0 / 1e12};
  a.rails = 8;
  return a;
}

}  // namespace

Test(hier_schedules, models_choose_pieces_when_the_tiers_are_alike) {
  // 16 hosts x 8 ranks at 256 MB: the host tier by single copy at 370 GB/s, 8 NICs of 47.5
  // GB/s; both tiers take about as long, so overlapping them pays. A few bytes: one piece.
  CollectiveArgs a = dgx_like(16, 64u << 20);
  a.chunk_elems = 128u << 10;
  cr_assert_gt(hier_pieces(a), 2, "%d pieces", hier_pieces(a));
  a.count = 1024;
  cr_assert_eq(hier_pieces(a), 1);
  a.pieces = 5;  // DDL_HIER_PIECES
  cr_assert_eq(hier_pieces(a), 5);
}

Test(hier_schedules, each_ranks_messages_are_a_stage_of_the_pipeline) {
  // 1 GB among 512 DGX-like hosts (8 ranks, 8 NICs): each piece's network tier is rhd's 36
  // sends and receives per rank. At 1 us a message, 64 pieces keep the ranks busy for less
  // than the network's time; at 20 us, their messages would take longer than the bytes, and
  // the models take fewer pieces.
  auto pieces_at = [](double overhead) { return hier_pieces(dgx_like(512, 256u << 20, overhead)); };
  cr_assert_eq(pieces_at(1e-6), kMaxHierPieces, "%d pieces", pieces_at(1e-6));
  cr_assert_lt(pieces_at(20e-6), kMaxHierPieces / 2, "%d pieces", pieces_at(20e-6));
  cr_assert_gt(pieces_at(20e-6), 1, "%d pieces", pieces_at(20e-6));
}

Test(hier_schedules, the_network_tier_is_chosen_for_all_the_pieces) {
  // 16 DGX-like hosts x 8 ranks, 64 MB in 32 pieces: each rank's block of a piece is 256 KB.
  // Alone, an allreduce of 256 KB among 16 hosts is latency-bound and the models take rd,
  // which sends the block 4 times; the pieces together are bandwidth-bound, and hier runs
  // one that sends it about twice (ddl_sim: 43 % of the bound with rd, 57 % with rhd).
  CollectiveArgs a = dgx_like(16, 16u << 20);
  a.chunk_elems = 128u << 10;
  a.algorithm = "hier";
  a.pieces = 32;
  const std::vector<int> &host_of = a.tiers[0];
  CollectiveArgs one_piece = a;
  one_piece.nranks = 16;
  one_piece.count = a.count / 32 / 8;
  one_piece.tiers.clear();
  one_piece.algorithm.clear();
  one_piece.peer_memory = false;
  cr_assert_str_eq(choose_algorithm(one_piece, nullptr).name, "rd");
  const HierPlan plan = hier_plan(a);
  cr_assert_eq(plan.pieces, 32);
  cr_assert(plan.leaf != nullptr && std::string(plan.leaf) != "rd", "%s", plan.leaf);
  // And the builder runs what was priced: the first rank of each host sends its blocks to
  // other hosts about twice on average (rd: 4 times).
  size_t across = 0;
  for (int h = 0; h < 16; ++h) {
    a.rank = 8 * h;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    for (const Step &step : s.steps)
      if (step.kind == StepKind::kSend && host_of[static_cast<size_t>(step.peer)] != h)
        across += step.count;
  }
  const size_t blocks = a.count / 8;
  cr_assert(across / 16 >= blocks * 2 * 15 / 16 && across / 16 <= blocks * 2,
            "%zu elements sent to other hosts per rank", across / 16);
}

Test(hier_schedules, reduce_scatter_takes_partials_as_they_arrive) {
  // 4 hosts x 2 ranks, single copy inside hosts: a rank's receives of its block's partials
  // from the other hosts wait for nothing of its own host (no read, no reduction of the host's
  // operands, directly or through other steps), so that each is added when it comes.
  CollectiveArgs a;
  a.collective = Collective::kReduceScatter;
  a.nranks = 8;
  a.count = 1000;
  a.chunk_elems = 100;
  a.algorithm = "hier";
  a.tiers = hosts_of_sizes({2, 2, 2, 2});
  a.hosts = 4;
  a.peer_memory = true;
  Schedule s;
  cr_assert(build_schedule(a, &s).ok());
  std::vector<bool> after_host_work(s.steps.size(), false);
  size_t partials = 0;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step &step = s.steps[i];
    bool after = step.kind == StepKind::kPeerRead || step.kind == StepKind::kReduce;
    for (uint32_t d : step.deps) after = after || after_host_work[d];
    after_host_work[i] = after;
    const bool partial =
        (step.kind == StepKind::kRecv || step.kind == StepKind::kRecvReduce) && step.peer / 2 != 0;
    if (!partial) continue;
    ++partials;
    cr_assert_not(after, "step %zu (%s rank %d) waits for the host's work", i,
                  step_kind_text(step.kind), step.peer);
  }
  cr_assert_eq(partials, 3 * 10u, "%zu partials received", partials);  // 3 hosts x 10 chunks
}

// Builds rank r's hier schedule on 2 hosts x 2 ranks with a single-copy host tier.
std::vector<Schedule> single_copy_schedules(size_t count, bool in_place) {
  std::vector<Schedule> by_rank(4);
  for (int r = 0; r < 4; ++r) {
    CollectiveArgs a;
    a.nranks = 4;
    a.rank = r;
    a.count = count;
    a.in_place = in_place;
    a.algorithm = "hier";
    a.tiers = hosts_of_sizes({2, 2});
    a.hosts = 2;
    a.peer_memory = true;
    build_schedule(a, &by_rank[r]);
    cr_assert(by_rank[r].peer_memory, "rank %d: no single-copy steps", r);
  }
  return by_rank;
}

Test(hier_schedules, verifier_catches_races_on_peer_memory) {
  CollectiveArgs a;
  a.nranks = 4;
  a.count = 8;
  a.algorithm = "hier";
  a.tiers = hosts_of_sizes({2, 2});
  a.hosts = 2;
  a.peer_memory = true;
  // A write into a peer before that peer's block is complete: the reads it depends on go.
  std::vector<Schedule> early = single_copy_schedules(8, false);
  for (Step &step : early[0].steps)
    if (step.kind == StepKind::kPeerWrite) step.deps.clear();
  cr_assert_not(verify_schedules(a, early).ok());
  // Rank 1 writing into the part of rank 0's output that rank 0 itself reduces.
  std::vector<Schedule> overlap = single_copy_schedules(8, false);
  for (Step &step : overlap[1].steps)
    if (step.kind == StepKind::kPeerWrite) step.dst.offset = 0;
  const Status s = verify_schedules(a, overlap);
  cr_assert_not(s.ok());
  cr_assert(s.message().find("rank 0's memory") != std::string::npos, "%s", s.message().c_str());
  // In place, a read of a peer's input after that peer may have overwritten it.
  a.in_place = true;
  std::vector<Schedule> late = single_copy_schedules(8, true);
  for (Step &step : late[1].steps)  // rank 1 reads rank 0's own block, which rank 0 reduces
    if (step.kind == StepKind::kPeerRead) step.src.offset = 0;
  cr_assert_not(verify_schedules(a, late).ok());
}

Test(hier_schedules, sixteen_by_sixteen_by_four, .timeout = 600) {
  // 1024 ranks: a rack of 16-rank hosts, 16 hosts a rack, 4 racks.
  verify_hier(even_tiers({16, 16, 4}), 1024, {1031}, {0});
  verify_hier(even_tiers({4, 16, 16}), 1024, {300}, {0});
}

Test(hier_schedules, sixteen_by_sixteen_allgather_and_reduce_scatter, .timeout = 600) {
  // 256 ranks, 16-rank hosts (allgather and reduce-scatter take the fastest tier as hosts).
  for (Collective c : {Collective::kAllgather, Collective::kReduceScatter})
    for (bool peer_memory : {false, true})
      verify_hier(even_tiers({16, 16}), 256, {3}, {0, 2}, c, peer_memory);
}

Test(hier_schedules, moves_what_the_tiers_promise) {
  // 2 hosts x 4 ranks, 64 MB of floats, in 512 KB chunks: each rank sends 3/4 of a host
  // shard's worth inside the host twice and its shard's half across: what leaves a host is
  // N bytes (the flat ring's is 2(8-1)/8 N = 1.75 N).
  CollectiveArgs a;
  a.nranks = 8;
  a.count = 16u << 20;
  a.chunk_elems = 128u << 10;
  a.algorithm = "hier";
  a.tiers = hosts_of_sizes({4, 4});
  a.hosts = 2;
  size_t across = 0;
  for (int r = 0; r < 4; ++r) {
    a.rank = r;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    for (const Step &step : s.steps)
      if (step.kind == StepKind::kSend && step.peer >= 4) across += step.count;
  }
  cr_assert_eq(across, a.count, "host 0 sends %zu elements to host 1, expected %zu", across,
               a.count);
}

Test(hier_schedules, models_pick_hier_for_large_messages_across_hosts) {
  CollectiveArgs a;
  a.nranks = 4;
  a.elem_size = 4;
  a.chunk_elems = 128u << 10;
  a.tiers = hosts_of_sizes({2, 2});
  a.hosts = 2;
  std::string why;
  a.count = 16u << 20;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  a.count = 2;
  cr_assert_str_neq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  // One host: the flat paths.
  a.count = 16u << 20;
  a.tiers.clear();
  a.hosts = 1;
  cr_assert_str_neq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
}

// hier's network tier is priced as leaf() runs it (the models' choice among the hosts), and
// recursive doubling's rounds inside a host at a local message's latency: among 512 hosts of
// 8 GPUs a 4 KB allreduce is 2 local phases and rd's 9 network rounds, where the ring's model
// had priced hier at 2 x 511 network latencies and the models chose flat rd (12 rounds, 3 of
// them inside the host), 1.3x slower in ddl_sim.
Test(hier_schedules, models_price_the_network_tier_as_it_runs) {
  CollectiveArgs a;
  a.nranks = 512 * 8;
  a.elem_size = 4;
  a.count = 1024;
  a.tiers = hosts_of_sizes(std::vector<int>(512, 8));
  a.hosts = 512;
  a.peer_memory = true;
  a.local = CostConstants{3e-6, 1e-6, 1 / 370e9, 1e-12};
  a.net = CostConstants{4e-6, 1e-6, 1 / 47.5e9, 1e-12};
  a.rails = 8;
  std::string why;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  const double rd_rounds = 9 * a.net.alpha;
  cr_assert(hier_allreduce_cost(a) < rd_rounds + 2 * a.local.alpha + 1e-6, "%s", why.c_str());
  // rd's round between ranks 0 and 1: inside the host when hosts hold blocks of ranks; with
  // ranks 0 and 3 on one host, 1 and 2 on the other, every round crosses hosts.
  CollectiveArgs b;
  b.nranks = 4;
  b.elem_size = 4;
  b.count = 2;
  b.hosts = 2;
  double blocks = 0, crossing = 0;
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != Collective::kAllreduce || std::string(info.name) != "rd") continue;
    b.tiers = hosts_of_sizes({2, 2});
    blocks = info.cost(b);
    b.tiers = {{0, 1, 1, 0}};
    crossing = info.cost(b);
  }
  cr_assert_float_eq(crossing - blocks, b.net.alpha - b.local.alpha, 1e-8, "rd: %g us vs %g us",
                     blocks * 1e6, crossing * 1e6);
}

namespace {

// Tiers for hosts that own ranks round-robin (srun's cyclic distribution): rank r on host
// r % hosts.
std::vector<std::vector<int>> cyclic_hosts(int nranks, int hosts) {
  std::vector<int> group_of;
  for (int r = 0; r < nranks; ++r) group_of.push_back(r % hosts);
  return {group_of};
}

// Elements that the ranks of `host` send to ranks of other hosts in one call.
size_t sent_across(CollectiveArgs a, const std::vector<int> &host_of, int host) {
  size_t across = 0;
  for (int r = 0; r < a.nranks; ++r) {
    if (host_of[r] != host) continue;
    a.rank = r;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    for (const Step &step : s.steps)
      if (step.kind == StepKind::kSend && host_of[step.peer] != host) across += step.count;
  }
  return across;
}

}  // namespace

// Ring and chain schedules visit each host's ranks together, whatever the rank numbering:
// correct (the verifier) and each host's link crossed the least number of times.
Test(hier_schedules, rings_and_chains_follow_the_hosts) {
  struct Case {
    Collective collective;
    const char *algorithm;
  };
  const Case cases[] = {{Collective::kAllreduce, "ring"},
                        {Collective::kReduceScatter, "ring"},
                        {Collective::kAllgather, "ring"},
                        {Collective::kBroadcast, "chain"}};
  for (const Case &c : cases)
    for (int hosts : {2, 3})
      for (int n : {hosts * 2, hosts * 3 + 1})
        for (int root : {0, n - 1})
          for (size_t count : {size_t{1}, size_t{37}}) {
            CollectiveArgs a;
            a.collective = c.collective;
            a.algorithm = c.algorithm;
            a.nranks = n;
            a.count = count;
            a.root = root;
            a.chunk_elems = 8;
            a.tiers = cyclic_hosts(n, hosts);
            a.hosts = hosts;
            const Status s = verify_collective(a);
            cr_assert(s.ok(), "%s %s n=%d hosts=%d root=%d count=%zu: %s",
                      collective_name(c.collective), c.algorithm, n, hosts, root, count,
                      s.message().c_str());
          }
  // 2 hosts x 4 ranks numbered round-robin: a broadcast from rank 0 leaves its host once
  // (N elements), an allgather's ring crosses each host boundary once (7 blocks leave each
  // host), where rank order would cross at every hop.
  CollectiveArgs a;
  a.nranks = 8;
  a.count = 1000;
  a.chunk_elems = 100;
  a.tiers = cyclic_hosts(8, 2);
  a.hosts = 2;
  const std::vector<int> &host_of = a.tiers[0];
  a.collective = Collective::kBroadcast;
  a.algorithm = "chain";
  for (int root : {0, 5}) {
    a.root = root;
    cr_assert_eq(sent_across(a, host_of, host_of[root]), a.count, "root %d", root);
    cr_assert_eq(sent_across(a, host_of, 1 - host_of[root]), 0u, "root %d", root);
  }
  a.collective = Collective::kAllgather;
  a.algorithm = "ring";
  for (int host : {0, 1}) cr_assert_eq(sent_across(a, host_of, host), 7 * a.count);
}

// Allgather and reduce-scatter across hosts: each block leaves its host once for every other
// host, (H-1)·L blocks per host, where the ring carries P-1; and the models take hier across
// hosts (whatever the size) but not with one rank per host or on one host.
Test(hier_schedules, blocks_cross_each_host_link_once) {
  for (Collective c : {Collective::kAllgather, Collective::kReduceScatter}) {
    for (const std::vector<int> &sizes : std::vector<std::vector<int>>{{4, 4}, {2, 2, 2}, {3, 1}}) {
      CollectiveArgs a;
      a.collective = c;
      a.count = 1000;
      a.chunk_elems = 100;
      a.tiers = hosts_of_sizes(sizes);
      a.nranks = static_cast<int>(a.tiers[0].size());
      a.hosts = static_cast<int>(sizes.size());
      a.algorithm = "hier";
      for (int host = 0; host < a.hosts; ++host) {
        const size_t blocks = c == Collective::kAllgather
                                  ? static_cast<size_t>(sizes[host]) * (sizes.size() - 1)
                                  : static_cast<size_t>(a.nranks - sizes[host]);
        cr_assert_eq(sent_across(a, a.tiers[0], host), blocks * a.count, "%s host %d of %zu",
                     collective_name(c), host, sizes.size());
      }
    }
    CollectiveArgs a;
    a.collective = c;
    a.nranks = 4;
    a.tiers = hosts_of_sizes({2, 2});
    a.hosts = 2;
    std::string why;
    for (size_t count : {size_t{2}, size_t{16u << 20}}) {
      a.count = count;
      cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
    }
    a.tiers = hosts_of_sizes({1, 1, 1, 1});
    a.hosts = 4;
    cr_assert_str_eq(choose_algorithm(a, &why).name, "ring", "%s", why.c_str());
    a.tiers.clear();
    a.hosts = 1;
    cr_assert_str_eq(choose_algorithm(a, &why).name, "ring", "%s", why.c_str());
  }
}

// Broadcast: every root, even and uneven hosts, hosts out of rank order, chunked or not; the
// message leaves the root's host once per tree child (not once per rank), and the models take
// hier for small messages across hosts, the chain for large ones.
namespace {

// Every root of every shape, at these counts, in chunks of 4 and in one, by `algorithm`.
void verify_broadcasts(const char *algorithm, const std::vector<std::vector<int>> &shapes,
                       const std::vector<size_t> &counts, const std::vector<bool> &peer_memories) {
  for (const auto &sizes : shapes) {
    const std::vector<std::vector<int>> tiers = hosts_of_sizes(sizes);
    const int n = static_cast<int>(tiers[0].size());
    for (int root = 0; root < n; ++root)
      for (size_t count : counts)
        for (size_t chunk : {size_t{0}, size_t{4}})
          for (bool peer_memory : peer_memories) {
            CollectiveArgs a;
            a.collective = Collective::kBroadcast;
            a.algorithm = algorithm;
            a.nranks = n;
            a.root = root;
            a.count = count;
            a.chunk_elems = chunk;
            a.tiers = tiers;
            a.hosts = static_cast<int>(sizes.size());
            a.peer_memory = peer_memory;
            const Status s = verify_collective(a);
            cr_assert(s.ok(), "%s broadcast, %zu hosts, root %d, count %zu, chunk %zu%s: %s",
                      algorithm, sizes.size(), root, count, chunk,
                      peer_memory ? ", peer memory" : "", s.message().c_str());
          }
  }
}

}  // namespace

Test(hier_schedules, broadcast_over_a_tree_of_hosts) {
  verify_broadcasts("hier", {{2, 2}, {1, 1, 1, 1}, {3, 1, 2}, {2, 2, 2, 2, 2}, {1, 4}}, {1, 13},
                    {false});
  verify_hier({{1, 0, 2, 1, 0, 2}}, 6, {5, 37}, {0, 3}, Collective::kBroadcast);

  CollectiveArgs a;
  a.collective = Collective::kBroadcast;
  a.algorithm = "hier";
  a.nranks = 8;
  a.count = 100;
  a.tiers = hosts_of_sizes({1, 1, 1, 1, 1, 1, 1, 1});
  a.hosts = 8;
  // 8 hosts, binomial from host 0: 0 -> 4, 2, 1; 1 -> 5, 3; 2 -> 6; 3 -> 7; the rest are leaves.
  const size_t children[] = {3, 2, 1, 1, 0, 0, 0, 0};
  for (int host = 0; host < 8; ++host)
    cr_assert_eq(sent_across(a, a.tiers[0], host), children[host] * a.count, "host %d", host);

  a.algorithm.clear();
  a.tiers = hosts_of_sizes({2, 2, 2, 2});
  a.hosts = 4;
  a.chunk_elems = 16u << 10;
  std::string why;
  a.count = 2;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  a.count = 16u << 20;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "chain", "%s", why.c_str());
  a.count = 2;
  a.tiers.clear();
  a.hosts = 1;
  cr_assert_str_eq(choose_algorithm(a, &why).name, "chain", "%s", why.c_str());
}

Test(hier_schedules, broadcast_over_every_rail) {
  // Every root, counts that leave parts and chunks empty or uneven, with and without peer
  // memory; hosts of unlike sizes and of one rank fall back to the chain.
  verify_broadcasts("rails", {{2, 2}, {3, 3, 3}, {4, 4}, {2, 2, 2, 2}, {2, 3}, {1, 1, 1}},
                    {1, 5, 37}, {false, true});
  // From 7 hosts each rail runs down two trees of the other hosts (15 and 16 of them: the
  // trees of an odd and an even count, one chunk or many).
  verify_broadcasts("rails", {std::vector<int>(16, 2), std::vector<int>(17, 2)}, {3, 101},
                    {false, true});
}

namespace {

// H hosts x L ranks, L rails, root on host 1: each rank of another host receives its part of
// the vector once from another host, each rank of the root's host sends its part out once, no
// rank sends more than two parts (a tree's inner rank: a chunk to each of two children), and
// the root's bytes leave it once inside its host. Returns the most any rank sent across.
size_t expect_rail_traffic(int H, int L, size_t count) {
  CollectiveArgs a;
  a.collective = Collective::kBroadcast;
  a.algorithm = "rails";
  a.nranks = H * L;
  a.root = L + 1;  // host 1, local index 1
  a.count = count;
  a.tiers = hosts_of_sizes(std::vector<int>(static_cast<size_t>(H), L));
  a.hosts = H;
  a.peer_memory = true;
  const size_t part = count / static_cast<size_t>(L);
  size_t all_across = 0, most = 0;
  for (int r = 0; r < a.nranks; ++r) {
    a.rank = r;
    Schedule s;
    cr_assert(build_schedule(a, &s).ok());
    cr_assert_str_eq(s.algorithm.c_str(), "rails");
    size_t sent_across = 0, received_across = 0, read_from_root = 0;
    for (const Step &step : s.steps) {
      const bool across = step.peer / L != r / L;
      if (step.kind == StepKind::kSend && across) sent_across += step.count;
      if (step.kind == StepKind::kRecv && across) received_across += step.count;
      if (step.kind == StepKind::kPeerRead && step.peer == a.root) read_from_root += step.count;
    }
    all_across += sent_across;
    most = std::max(most, sent_across);
    const bool root_host = r / L == 1;
    cr_assert_eq(received_across, root_host ? 0u : part, "%d hosts: rank %d receives %zu", H, r,
                 received_across);
    if (root_host)
      cr_assert_eq(sent_across, part, "%d hosts: rank %d sends %zu across", H, r, sent_across);
    cr_assert(sent_across <= 2 * part, "%d hosts: rank %d sends %zu across", H, r, sent_across);
    if (root_host && r != a.root)  // a part and a share of the root's
      cr_assert(
          read_from_root >= part + part / (L - 1) && read_from_root <= part + part / (L - 1) + 1,
          "%d hosts: rank %d reads %zu", H, r, read_from_root);
  }
  cr_assert_eq(all_across, static_cast<size_t>(H - 1) * count, "%d hosts: %zu elements crossed", H,
               all_across);
  return most;
}

}  // namespace

Test(hier_schedules, rail_broadcast_sends_each_byte_once_per_host) {
  // A chain among 4 hosts: the last one sends nothing; every other sends its part once.
  cr_assert_eq(expect_rail_traffic(4, 4, 4000), 1000u);
  // Trees among 16: an inner rank sends a one-chunk part to its two children.
  cr_assert_eq(expect_rail_traffic(16, 4, 4000), 2000u);
}

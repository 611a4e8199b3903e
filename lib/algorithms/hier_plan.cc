// hier's plan: how many pieces and which algorithm among the hosts, chosen by pricing each
// tier with its cost model (the tiers of one piece take turns; in pieces they overlap), and
// what the models price the call at (hier.h). The schedule itself: hier.cc.
#include <algorithm>
#include <limits>

#include "lib/algorithms/hier.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/ring.h"

namespace ddl {
namespace {

// One tier's cost model split in two: what does not depend on the bytes (its messages'
// latencies) and what does; and how many messages one rank handles in it.
struct TierCost {
  double latency = 0, bandwidth = 0, messages = 0;
  double total() const { return latency + bandwidth; }
};

// A ring allreduce's model at `bytes`, split (the model at no bytes is the latency part).
TierCost ring_tier(int nranks, double bytes, double chunk, const CostConstants &c) {
  TierCost t;
  t.latency = ring_allreduce_cost(nranks, 0, chunk, c);
  t.bandwidth = ring_allreduce_cost(nranks, bytes, chunk, c) - t.latency;
  t.messages = t.latency / c.alpha;
  return t;
}

// The arguments of one leaf() among the hosts, in the first host's coordinates: each rank's
// block of a piece of `piece_count` elements, allreduced with its peers of the other hosts
// over the network (no tiers left, the network's chunks).
CollectiveArgs among_hosts(const CollectiveArgs &args, size_t piece_count) {
  CollectiveArgs among = args;
  among.nranks = args.hosts;
  among.rank = 0;
  among.count =
      std::max<size_t>(1, piece_count / static_cast<size_t>(fastest_tier_groups(args).largest));
  among.chunk_elems = network_chunk_elems(args);
  among.tiers.clear();
  among.algorithm.clear();
  among.peer_memory = false;
  return among;
}

// The fastest tier's reduce-scatter and allgather of all `args.count` elements: the ring
// model with the local constants. By single copy a byte moves once inside the host, not
// twice (into a cell, out of it), no message is sent, and a rank's reads (writes) of its
// L-1 peers wait for nothing but the peers' arrival: one latency a phase, not L-1 in a chain
// (the address exchange is the reduce-scatter's wait, the closing barrier the allgather's;
// ddl_sim, dgx-h100 16 x 8 at 4 KB: both phases together 4 us, where the ring's model said
// 2 x 7 x 3 us).
TierCost local_tier(const CollectiveArgs &args) {
  const double chunk = static_cast<double>(args.chunk_elems) * static_cast<double>(args.elem_size);
  const int local = fastest_tier_groups(args).largest;
  CostConstants host = args.local;
  if (args.peer_memory) host.beta /= 2;
  TierCost t = ring_tier(local, count_bytes(args), chunk, host);
  if (args.peer_memory) {
    t.messages = 0;
    t.latency = 2 * host.alpha;
  }
  return t;
}

// The allreduces among hosts, in pieces of `piece_count` elements, as leaf() runs them with
// `algorithm`: priced by its own model for all the pieces' bytes (its latency: what one
// piece costs beyond its share of them), and the messages (sends and receives) one rank
// handles in one piece's schedule of it, on the busiest of a few hosts.
// Each message costs the rank its overhead one after the other, whatever the pieces overlap:
// among 512 hosts rhd's 36 per piece kept a GPU cluster's ranks 86 % busy in 16 pieces
// (ddl_sim), where the model's latency terms had counted 9. A host's rails carry its ranks'
// blocks side by side: each rank drives its own NIC (DDL_RAILS), so its L ranks share
// min(rails, L) links. (Priced as a ring whatever leaf() ran, the tier cost 4 ms of
// latencies among 512 hosts where rd takes 40 us, and the models chose flat rd for hier's
// calls at 4 KB-256 KB on dgx-h100, 1.2-2.5x slower in ddl_sim.)
TierCost network_tier(const CollectiveArgs &args, size_t piece_count,
                      const AlgorithmInfo &leaf_algorithm) {
  CollectiveArgs among = among_hosts(args, piece_count);
  TierCost t;
  // A tree's hosts differ (the roots, the inner hosts, the leaves): the busiest of a few.
  for (int rank : {0, 1, among.nranks / 3, among.nranks / 2}) {
    if (rank >= among.nranks) continue;
    Schedule piece;
    among.rank = rank;
    leaf_algorithm.build(among, &piece);
    double messages = 0;
    for (const Step &step : piece.steps) messages += is_message(step.kind) ? 1 : 0;
    t.messages = std::max(t.messages, messages);
  }
  among.rank = 0;
  const int local = fastest_tier_groups(args).largest;
  const int links = rails_for(args, local);
  among.net.beta *= static_cast<double>(local) / links;
  const size_t all_count = std::max<size_t>(1, args.count / static_cast<size_t>(local));
  const double pieces = static_cast<double>(args.count) / static_cast<double>(piece_count);
  if (pieces <= 1) {  // the model at no data is the latency
    t.bandwidth = leaf_algorithm.cost(among);
    among.count = 1;
    t.latency = leaf_algorithm.cost(among);
    t.bandwidth = std::max(0.0, t.bandwidth - t.latency);
    return t;
  }
  // Two points of the model, one piece and all of them, both at the chunk a piece's schedule
  // uses (a tree cuts each half of a piece's block into chunks no larger than that half):
  // what grows with the bytes is the bandwidth; the rest (latencies, a tree's pipeline fill)
  // each piece pays, side by side with the others. (The latency taken at one element and the
  // call's own chunk counted a tree's fill as bandwidth, once per piece: dbtree among 248
  // hosts priced 40 % above what ddl_sim finds at 64 MB in 32 pieces.)
  // The rank's work on its messages is priced apart (message_seconds), so the bandwidth
  // leaves out the models' per-message overheads (a tree's grow with its chunks).
  among.chunk_elems = std::min(among.chunk_elems, std::max<size_t>(1, among.count / 2));
  const double one_piece = leaf_algorithm.cost(among);
  CollectiveArgs bytes_only = among;
  bytes_only.net.overhead = bytes_only.local.overhead = 0;
  const double one_piece_bytes = leaf_algorithm.cost(bytes_only);
  bytes_only.count = all_count;
  const double all_bytes = leaf_algorithm.cost(bytes_only);
  t.bandwidth = std::max(0.0, (all_bytes - one_piece_bytes) * pieces / (pieces - 1));
  t.latency = std::max(0.0, one_piece - t.bandwidth / pieces);
  return t;
}

// The seconds one rank spends on its messages in `pieces` pieces, one after the other
// whatever the pieces overlap: each piece's messages of the host tier (none by single copy)
// and of the network tier, at their overheads.
double message_seconds(const CollectiveArgs &args, const TierCost &local, const TierCost &net,
                       int pieces) {
  return pieces * (local.messages * args.local.overhead + net.messages * args.net.overhead);
}

// In `pieces` pieces whose tiers overlap, the slower tier's bytes set the pace, the faster
// tier adds one piece's bytes (the pipeline's fill and drain) and both their latencies once
// (the pieces' messages are in flight together); unless the rank's own work on its messages
// takes longer than the slower tier's bytes: then that sets the pace. One piece: the tiers
// take turns.
// A rank whose own work on its messages fills more than two thirds of the slower tier's time
// falls behind it: its sends leave late while it posts and completes others (ddl_sim,
// dgx-h100 512 x 8, 64 MB: 8 pieces keep the rank 54 % busy and reach 63.3 % of the bound, 4
// pieces 36 % and 64.8 %; 256 MB: 16 pieces 49 % and 89.5 %, 32 pieces 71 % and 82.7 %). Half
// (the share 2) was too little among 64 hosts: 8 pieces reach 79.7 % at 64 MB against 4's
// 73.6 %, 32 pieces 90.8 % at 256 MB against 16's 89.4 %.
constexpr double kMessageWorkShare = 1.5;

double pipelined_cost(const CollectiveArgs &args, const TierCost &local, const TierCost &net,
                      int pieces) {
  if (pieces <= 1) return local.total() + net.total();
  return std::max(std::max(local.bandwidth, net.bandwidth),
                  kMessageWorkShare * message_seconds(args, local, net, pieces)) +
         std::min(local.bandwidth, net.bandwidth) / pieces + local.latency + net.latency;
}

// The models' choice leaves each rank's block of a piece at least 256 KB, as measured on 2
// emulated hosts x 2 ranks, where the chunk is 64 KB (1 MB in 8 pieces: 9.0 against 8.8 ms
// in 2; 16 MB in 64 pieces, 2 chunks each: 200 against 148 ms in 32). (A floor of 2 network
// chunks a block, 1 MB at 400 Gbit/s, kept the network tier off the rd that the models chose
// for one small piece alone; priced for all the pieces (plan_with_pieces), the network tier
// keeps rhd, and small blocks of a GPU cluster's larger chunks are as fast as the pieces
// priced: dgx-h100 2 x 8 at 16 MB 79.0 -> 82.0 % of the bound, 8 x 8 56.4 -> 62.3 %.)
constexpr size_t kFloorBlockBytes = 256 << 10;

// `pieces` pieces with the network tier's algorithm priced for them: the one whose pipelined
// cost is lowest, not the one the models choose for one piece alone. A piece's blocks are
// small, and alone a small allreduce is latency-bound, where the pieces together are not:
// among 16 hosts the models chose rd for 256 KB blocks, which sends each block 4 times, not
// twice (ddl_sim, dgx-h100 16 x 8, 64 MB in 32 pieces: 43 % of the bound with rd, 57 % with
// rhd). In one piece the tiers take turns and the network tier is one allreduce alone: the
// models' choice (as the flat algorithms are chosen; ddl_sim, ibm-2017-s822lc 64 x 4 at 64 KB:
// rd 49.9 us, what the pieces' pricing chose 72.7).
HierPlan plan_with_pieces(const CollectiveArgs &args, const TierCost &local, int pieces) {
  HierPlan best;
  best.pieces = pieces;
  best.seconds = std::numeric_limits<double>::infinity();
  const size_t piece_count = args.count / static_cast<size_t>(pieces);
  const CollectiveArgs among = among_hosts(args, piece_count);
  if (pieces == 1) {
    const TierCost net = network_tier(args, piece_count, choose_algorithm(among, nullptr));
    best.seconds = pipelined_cost(args, local, net, 1);
    return best;  // leaf: the models' choice for each segment, as for a flat call
  }
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != Collective::kAllreduce || info.build == build_hier_allreduce) continue;
    if (!(info.cost(among) < std::numeric_limits<double>::infinity())) continue;
    const TierCost net = network_tier(args, piece_count, info);
    const double seconds = pipelined_cost(args, local, net, pieces);
    if (seconds < best.seconds * (1 - 1e-9)) {
      best.seconds = seconds;
      best.leaf = info.name;
    }
  }
  return best;
}

HierPlan choose_plan(const CollectiveArgs &args) {
  // Every rank keeps at least one element of every piece.
  const size_t most = std::max<size_t>(1, args.count / std::max(1, args.nranks));
  const int limit = static_cast<int>(std::min<size_t>(kMaxHierPieces, most));
  const bool across = args.hosts > 1 && !args.tiers.empty();
  if (!across) return HierPlan{};
  const TierCost local = local_tier(args);
  if (args.pieces > 0) return plan_with_pieces(args, local, std::min(args.pieces, limit));
  HierPlan best = plan_with_pieces(args, local, 1);
  const size_t block_elems =
      std::max<size_t>(1, kFloorBlockBytes / std::max<size_t>(1, args.elem_size));
  const size_t block_floor = block_elems * static_cast<size_t>(fastest_tier_groups(args).largest);
  const int models_limit =
      static_cast<int>(std::min<size_t>(limit, std::max<size_t>(1, args.count / block_floor)));
  for (int p = 2; p <= models_limit; p *= 2) {
    const HierPlan plan = plan_with_pieces(args, local, p);
    if (plan.seconds < best.seconds) best = plan;
  }
  return best;
}

}  // namespace

namespace {

bool same_constants(const CostConstants &a, const CostConstants &b) {
  return a.alpha == b.alpha && a.overhead == b.overhead && a.beta == b.beta && a.gamma == b.gamma;
}

// Whether two calls get the same plan: every argument the models read but the rank.
bool same_plan_inputs(const CollectiveArgs &a, const CollectiveArgs &b) {
  return a.collective == b.collective && a.nranks == b.nranks && a.count == b.count &&
         a.root == b.root && a.in_place == b.in_place && a.chunk_elems == b.chunk_elems &&
         a.elem_size == b.elem_size && a.algorithm == b.algorithm && a.hosts == b.hosts &&
         a.peer_memory == b.peer_memory && a.layout == b.layout && a.rails == b.rails &&
         a.pieces == b.pieces && same_constants(a.local, b.local) && same_constants(a.net, b.net) &&
         a.tiers == b.tiers;
}

}  // namespace

HierPlan hier_plan(const CollectiveArgs &args) {
  // The last plan is kept per thread: every rank of a projection of thousands asks for the
  // same one, twice (the models' cost, the builder), and pricing it builds a schedule among
  // the hosts per algorithm and piece count (ddl_sim, 512 x 8 at 64 MB: 9.7 s without, 4 s).
  thread_local CollectiveArgs last_args;
  thread_local HierPlan last_plan;
  thread_local bool known = false;
  if (!known || !same_plan_inputs(args, last_args)) {
    last_plan = choose_plan(args);
    last_args = args;
    known = true;
  }
  return last_plan;
}

int hier_pieces(const CollectiveArgs &args) {
  return hier_plan(args).pieces;
}

double hier_allreduce_cost(const CollectiveArgs &args) {
  // With no host holding two ranks, hier is its network tier alone: the flat algorithms.
  if (args.hosts < 2 || args.tiers.empty() || fastest_tier_groups(args).largest < 2)
    return std::numeric_limits<double>::infinity();
  return hier_plan(args).seconds;
}

}  // namespace ddl

#include "lib/algorithms/registry.h"

#include <limits>
#include <set>

#include "lib/algorithms/chain.h"
#include "lib/algorithms/dbtree.h"
#include "lib/algorithms/dissemination.h"
#include "lib/algorithms/hier.h"
#include "lib/algorithms/hier_alltoall.h"
#include "lib/algorithms/hier_bruck_allreduce.h"
#include "lib/algorithms/hier_two_level.h"
#include "lib/algorithms/linear.h"
#include "lib/algorithms/pairwise.h"
#include "lib/algorithms/rail_alltoall.h"
#include "lib/algorithms/rail_broadcast.h"
#include "lib/algorithms/recursive_doubling.h"
#include "lib/algorithms/rhd.h"
#include "lib/algorithms/ring.h"
#include "lib/algorithms/tree.h"

namespace ddl {
namespace {

// The models' constants live in cost_model.h (how to measure them is noted there).
double bytes_of(const CollectiveArgs &a) {
  return static_cast<double>(a.count) * static_cast<double>(a.elem_size);
}

// A flat algorithm over ranks on several hosts waits on the network at every round.
const CostConstants &constants_of(const CollectiveArgs &a) {
  return a.hosts > 1 ? a.net : a.local;
}

double ring_cost(const CollectiveArgs &a) {
  const double chunk_bytes = static_cast<double>(a.chunk_elems) * static_cast<double>(a.elem_size);
  return ring_allreduce_cost(a.nranks, bytes_of(a), chunk_bytes, constants_of(a));
}

// Recursive doubling and halving and the tree exchange with partners far apart in rank
// order: in their rounds with the most bytes every rank of a host talks to another host at
// once, so the host's link carries its L ranks' bytes, not one's (the ring, in rank order,
// crosses each host boundary once). Without this the models chose flat rhd over hier at 16+
// hosts of 4 ranks, which ddl_sim projects 3x slower at 64 MB (tools/ddl_sim/README.md).
// Calls below 64 KB are left as they were: their messages do not fill a link together.
constexpr double kSharedLinkBytes = 64.0 * 1024;

CostConstants shared_link_constants(const CollectiveArgs &a) {
  CostConstants c = constants_of(a);
  if (a.hosts > 1 && !a.tiers.empty() && bytes_of(a) >= kSharedLinkBytes)
    c.beta *= fastest_tier_groups(a).largest;
  return c;
}

// Rounds between ranks of one host at the local constants (RoundCosts), the others at the
// network's, shared by the host's ranks from 64 KB.
RoundCosts round_costs(const CollectiveArgs &a) {
  RoundCosts costs{shared_link_constants(a), a.local};
  if (a.hosts > 1 && !a.tiers.empty()) costs.host_of = &a.tiers.front();
  return costs;
}

double rd_cost(const CollectiveArgs &a) {
  return recursive_doubling_allreduce_cost(a.nranks, bytes_of(a), round_costs(a));
}

double rhd_cost(const CollectiveArgs &a) {
  return rhd_allreduce_cost(a.nranks, bytes_of(a), round_costs(a));
}

double tree_cost(const CollectiveArgs &a) {
  return tree_allreduce_cost(a.nranks, bytes_of(a), round_costs(a));
}

double dbtree_cost(const CollectiveArgs &a) {
  const double chunk_bytes = static_cast<double>(a.chunk_elems) * static_cast<double>(a.elem_size);
  return dbtree_allreduce_cost(a.nranks, bytes_of(a), chunk_bytes, shared_link_constants(a));
}

// Collectives with one algorithm need no model.
double no_cost(const CollectiveArgs &) {
  return 0.0;
}

}  // namespace

const std::vector<AlgorithmInfo> &algorithm_table() {
  static const std::vector<AlgorithmInfo> table = {
      {"ring", Collective::kAllreduce,
       "reduce-scatter then allgather around a ring, pipelined in chunks", build_ring_allreduce,
       ring_cost},
      {"rd", Collective::kAllreduce, "recursive doubling: log2(n) exchanges of the whole vector",
       build_recursive_doubling_allreduce, rd_cost},
      {"rhd", Collective::kAllreduce,
       "Rabenseifner: recursive-halving reduce-scatter, recursive-doubling allgather",
       build_rhd_allreduce, rhd_cost},
      {"tree", Collective::kAllreduce,
       "k-nomial tree reduce to rank 0, then broadcast; radix from the models",
       build_tree_allreduce, tree_cost},
      {"dbtree", Collective::kAllreduce,
       "double binary tree: each half of the vector up and down its own tree, in chunks",
       build_dbtree_allreduce, dbtree_cost},
      {"hier", Collective::kAllreduce,
       "multi-tier: reduce-scatter in each host, allreduce each shard across hosts, allgather",
       build_hier_allreduce, hier_allreduce_cost},
      {"hier_bruck", Collective::kAllreduce,
       "per rail, its segment reduce-scattered and allgathered in Bruck rounds, tiers in one pass",
       build_hier_bruck_allreduce, hier_bruck_allreduce_cost},
      {"ring", Collective::kReduceScatter, "n-1 ring steps, each reducing one block",
       build_ring_reduce_scatter, ring_reduce_scatter_cost},
      {"hier", Collective::kReduceScatter,
       "two levels: operands reduced per host, one partial per host to each block's owner",
       build_hier_reduce_scatter, hier_reduce_scatter_cost},
      {"hier_bruck", Collective::kReduceScatter,
       "two levels; between hosts ceil(log2 H) rounds per rail, partial sums packed (Bruck)",
       build_hier_bruck_reduce_scatter, hier_bruck_reduce_scatter_cost},
      {"ring", Collective::kAllgather, "n-1 ring steps, each forwarding one block",
       build_ring_allgather, ring_allgather_cost},
      {"hier", Collective::kAllgather,
       "two levels: each block once to every other host, then around each host",
       build_hier_allgather, hier_allgather_cost},
      {"hier_bruck", Collective::kAllgather,
       "two levels; between hosts ceil(log2 H) rounds per rail, blocks packed (Bruck)",
       build_hier_bruck_allgather, hier_bruck_allgather_cost},
      {"chain", Collective::kBroadcast, "pipelined chain from the root", build_chain_broadcast,
       chain_broadcast_cost},
      {"hier", Collective::kBroadcast,
       "two levels: a binomial tree of hosts from the root, then each host's ranks",
       build_hier_broadcast, hier_broadcast_cost},
      {"rails", Collective::kBroadcast,
       "a part per local rank, each carried across the hosts on its own rail, then shared",
       build_rail_broadcast, rail_broadcast_cost},
      {"dissemination", Collective::kBarrier, "ceil(log2 n) rounds of signals at distance 2^k",
       build_dissemination_barrier, no_cost},
      {"pairwise", Collective::kAlltoall,
       "n-1 exchanges with rank r+k / r-k, in flight together (two hosts at a time)",
       build_pairwise_alltoall, pairwise_alltoall_cost},
      {"rails", Collective::kAlltoall,
       "the pairwise exchange, each block across on its receiver's rail (handed on inside "
       "the host)",
       build_rail_alltoall, rail_alltoall_cost},
      {"hier", Collective::kAlltoall,
       "two levels: each host's blocks for another host in one message between agents",
       build_hier_alltoall, hier_alltoall_cost},
      {"pairwise", Collective::kAlltoallv,
       "n-1 exchanges with rank r+k / r-k, in flight together (two hosts at a time)",
       build_pairwise_alltoall, no_cost},
      {"pairwise", Collective::kReduceScatterv,
       "its operand of rank r+k's block to it, rank r-k's of its own from it, added in turn",
       build_pairwise_reduce_scatterv, no_cost},
      {"pairwise", Collective::kAllgatherv,
       "its block to rank r+k, rank r-k's block from it, n-1 rounds all in flight",
       build_pairwise_allgatherv, no_cost},
      {"tree", Collective::kReduce, "k-nomial tree to the root; radix from the models",
       build_tree_reduce, tree_reduce_cost},
      {"ring", Collective::kReduce, "ring reduce-scatter, then every block to the root",
       build_ring_reduce, ring_reduce_cost},
      {"linear", Collective::kGather, "every rank's block straight to the root",
       build_linear_gather, no_cost},
      {"linear", Collective::kGatherv, "every rank's block straight to the root",
       build_linear_gather, no_cost},
      {"linear", Collective::kScatter, "the root sends every rank its block", build_linear_scatter,
       no_cost},
      {"linear", Collective::kScatterv, "the root sends every rank its block", build_linear_scatter,
       no_cost},
      {"rd", Collective::kScan, "recursive doubling: partials to rank r+2^k, ceil(log2 n) rounds",
       build_recursive_doubling_scan, no_cost},
      {"rd", Collective::kExscan, "recursive doubling: partials to rank r+2^k, ceil(log2 n) rounds",
       build_recursive_doubling_scan, no_cost},
  };
  return table;
}

bool known_algorithm(const std::string &name) {
  if (name.empty()) return true;
  for (const AlgorithmInfo &info : algorithm_table())
    if (name == info.name) return true;
  return false;
}

std::string algorithm_names() {
  // In table order, each name once (several collectives share "ring").
  std::string names;
  std::set<std::string> seen;
  for (const AlgorithmInfo &info : algorithm_table())
    if (seen.insert(info.name).second)
      names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

const AlgorithmInfo &choose_algorithm(const CollectiveArgs &args, std::string *why) {
  const AlgorithmInfo *best = nullptr;
  double best_cost = 0;
  std::string considered;
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != args.collective) continue;
    if (!args.algorithm.empty() && args.algorithm == info.name) {
      if (why) *why = std::string(info.name) + " (forced by DDL_ALGO)";
      return info;
    }
    const double cost = info.cost(args);
    if (!(cost < std::numeric_limits<double>::infinity())) continue;  // does not apply here
    considered += strprintf("%s%s %.1f us", considered.empty() ? "" : ", ", info.name, cost * 1e6);
    // The table lists algorithms in order of preference: a later one must be cheaper by
    // more than rounding (rhd's model equals the ring's at 2 ranks, by two formulas).
    if (!best || cost < best_cost * (1 - 1e-9)) {
      best = &info;
      best_cost = cost;
    }
  }
  if (why) *why = std::string(best->name) + " (models: " + considered + ")";
  return *best;
}

Status build_schedule(const CollectiveArgs &args, Schedule *schedule, std::string *why) {
  *schedule = Schedule();
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != args.collective) continue;
    choose_algorithm(args, why).build(args, schedule);
    return Status::Ok();
  }
  return unsupported("no algorithm for %s", collective_name(args.collective));
}

}  // namespace ddl

// k-nomial tree allreduce for the smallest messages: reduce up a k-nomial tree to rank 0,
// then broadcast down the same tree. Level l joins subtrees at distance k^l: a parent
// hears from up to k-1 children per level (UCC's knomial trees; radix 2 is the binomial
// tree of MPICH's small-message reduce + bcast).
//
// A round of recursive doubling is one exchange per rank, so rd needs log2(p) rounds, plus
// two for the fold when n is not a power of two. The tree needs 2·ceil(log_k n) rounds, but
// its rounds overlap: the k-1 messages a parent receives in one level cost one latency
// plus a small per-message overhead. With few ranks and a wide radix (k = n: everyone sends
// to rank 0, rank 0 sends back) that is 2 latencies, fewer than rd's fold for 3, 5, 6, 7
// ranks.
//
// Cost (n ranks, N bytes, radix k; c_l = children of rank 0 at level l, at most k-1):
//   sum over levels l < ceil(log_k n) of
//     2·alpha + 2·(c_l - 1)·overhead + c_l·N·(2·beta + gamma)
// The radix is the one that minimizes it (tree_radix), so every rank picks the same.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

// With the radix of tree_radix(nranks, count·elem_size, kCostConstants).
void build_tree_allreduce(const CollectiveArgs &args, Schedule *schedule);
// With a given radix >= 2 (tests sweep radices).
void build_tree_allreduce_radix(const CollectiveArgs &args, int radix, Schedule *schedule);

// Reduce to args.root: the up half of the same tree, numbered from the root. For small
// messages; cost: the sum over levels of alpha + (c_l - 1)·overhead + c_l·N·(beta + gamma).
void build_tree_reduce(const CollectiveArgs &args, Schedule *schedule);
double tree_reduce_cost(const CollectiveArgs &args);

// Each level at its own constants (the children (radix-1)·d ranks away at most).
double tree_allreduce_cost_radix(int nranks, double bytes, int radix, const RoundCosts &costs);
// The radix in [2, max(2, nranks)] with the lowest cost (the smallest radix on a tie).
int tree_radix(int nranks, double bytes, const CostConstants &c);
// The cost at the builder's radix.
double tree_allreduce_cost(int nranks, double bytes, const RoundCosts &costs);

}  // namespace ddl

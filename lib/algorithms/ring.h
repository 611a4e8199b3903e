// Ring algorithms (Baidu's ring allreduce; UCC's tl/ucp allreduce_ring composes it the same
// way): reduce-scatter then allgather around the ring r -> r+1, each block pipelined in
// chunks so that sending, receiving and reducing overlap.
//
// Cost (alpha-beta-gamma, n ranks, N bytes, B = N/n per block): allreduce
//   2(n-1)·alpha + 2(n-1)·B·beta + (n-1)·B·gamma
// when a block is one chunk; reduce_scatter and allgather about half of that each. When
// blocks are cut into chunks of K < B bytes, the reduction of chunk c overlaps the transfer
// of chunk c+1, so each reduce-scatter step costs B·max(beta, gamma) + K·min(beta, gamma)
// instead of B·(beta + gamma): only the pipeline's fill stays exposed. That overlap is what
// the unpipelined rhd lacks, and what makes the ring the choice for large messages.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_ring_allreduce(const CollectiveArgs &args, Schedule *schedule);
void build_ring_reduce_scatter(const CollectiveArgs &args, Schedule *schedule);
void build_ring_allgather(const CollectiveArgs &args, Schedule *schedule);
// Reduce to args.root for large messages: the allreduce's reduce-scatter, then each rank
// sends the block it completed to the root. Cost: the reduce-scatter's, plus alpha + (n-1)·B·beta
// at the root's link.
void build_ring_reduce(const CollectiveArgs &args, Schedule *schedule);
double ring_reduce_cost(const CollectiveArgs &args);

// Predicted seconds for a ring allreduce (used to compare with other algorithms);
// chunk_bytes = 0: blocks are not cut into chunks.
double ring_allreduce_cost(int nranks, double bytes, double chunk_bytes, const CostConstants &c);
// n-1 steps of one block each (network constants when the ranks span hosts).
double ring_allgather_cost(const CollectiveArgs &args);
double ring_reduce_scatter_cost(const CollectiveArgs &args);

}  // namespace ddl

// Ring algorithms (Baidu's ring allreduce; UCC's tl/ucp allreduce_ring composes it the same
// way): reduce-scatter then allgather around the ring r -> r+1, each block pipelined in
// chunks so that sending, receiving and reducing overlap.
//
// Cost (alpha-beta, n ranks, N bytes): allreduce 2(n-1)·alpha + 2(n-1)/n·N·beta
// + (n-1)/n·N·gamma (reduction); reduce_scatter and allgather half of that each.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_ring_allreduce(const CollectiveArgs &args, Schedule *schedule);
void build_ring_reduce_scatter(const CollectiveArgs &args, Schedule *schedule);
void build_ring_allgather(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds for a ring allreduce (used to compare with other algorithms).
double ring_allreduce_cost(int nranks, double bytes, double alpha_s, double beta_s_per_byte,
                           double gamma_s_per_byte);

}  // namespace ddl

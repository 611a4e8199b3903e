// Rabenseifner's allreduce (R. Rabenseifner, "Optimization of collective reduction
// operations", ICCS 2004; MPICH's allreduce for long messages): a reduce-scatter by
// recursive halving, then an allgather by recursive doubling, over the largest power of two
// p <= n ranks. In halving round k every rank exchanges half of the range it still reduces
// with rank ^ (p >> (k+1)), so after log2(p) rounds rank r holds block r complete; the
// allgather retraces the same pairs in reverse. Ranks past p fold their input into rank - p
// first and get the result back at the end, as in recursive doubling.
//
// Cost (n ranks, N bytes, p = 2^floor(log2 n)):
//   2·log2(p)·alpha + 2(p-1)/p·N·beta + (p-1)/p·N·gamma
//   + (n > p ? 2·alpha + 2·N·beta + N·gamma : 0)   (fold and unfold of the whole vector).
// The ring's bandwidth with recursive doubling's log2 rounds: the medium sizes, where rd
// moves too much and the ring waits too often. Not pipelined in chunks.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_rhd_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds for an rhd allreduce of `bytes` over `nranks`: each round's latency at
// its own constants, the bytes at the network's (most of them cross hosts).
double rhd_allreduce_cost(int nranks, double bytes, const RoundCosts &costs);

}  // namespace ddl

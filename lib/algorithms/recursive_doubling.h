// Recursive doubling allreduce: in round k every rank exchanges its whole partial result
// with rank ^ 2^k and reduces, so p = 2^m ranks finish in m rounds. For a rank count that is
// not a power of two, the ranks past the largest power of two p first fold their input into
// rank - p and get the result back at the end (two extra steps for them).
//
// Cost (n ranks, N bytes, p = 2^floor(log2 n)):
//   log2(p)·(alpha + N·beta + N·gamma) + (n > p ? 2·(alpha + N·beta) + N·gamma : 0).
// Latency-optimal: it wins for small messages, where the ring's 2(n-1) steps dominate.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_recursive_doubling_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds for recursive doubling of `bytes` over `nranks`, each round (partners at
// distance 2^k) at its own constants.
double recursive_doubling_allreduce_cost(int nranks, double bytes, const RoundCosts &costs);

}  // namespace ddl

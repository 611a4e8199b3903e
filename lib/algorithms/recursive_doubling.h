// Recursive doubling allreduce: in round k every rank exchanges its whole partial result
// with rank ^ 2^k and reduces, so p = 2^m ranks finish in m rounds. For a rank count that is
// not a power of two, the ranks past the largest power of two p first fold their input into
// rank - p and get the result back at the end (two extra steps for them).
//
// Cost (n ranks, N bytes, p = 2^floor(log2 n)):
//   log2(p)·(alpha + N·beta + N·gamma) + (n > p ? 2·(alpha + N·beta) + N·gamma : 0).
// Latency-optimal: it wins for small messages, where the ring's 2(n-1) steps dominate.
//
// Scan and exscan (MPI_Scan, MPI_Exscan) by recursive doubling (Hillis and Steele): in round
// k rank r sends its partial, the reduction of ranks max(0, r - 2^k + 1)..r, to rank r + 2^k
// and folds in rank r - 2^k's; after ceil(log2 n) rounds rank r holds ranks 0..r. An exscan
// keeps that partial apart from its result, which lacks the rank's own data. The op must be
// commutative (ddl's are): a rank's terms are combined in the order they arrive.
//   Cost: ceil(log2 n)·(alpha + N·beta + N·gamma), twice the gamma for an exscan.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_recursive_doubling_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds for recursive doubling of `bytes` over `nranks`, each round (partners at
// distance 2^k) at its own constants.
double recursive_doubling_allreduce_cost(int nranks, double bytes, const RoundCosts &costs);

void build_recursive_doubling_scan(const CollectiveArgs &args, Schedule *schedule);

}  // namespace ddl

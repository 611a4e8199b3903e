// Dissemination barrier (Hensgen, Finkel, Manber 1988): in round k every rank signals
// rank+2^k and waits for rank-2^k, so after ceil(log2 n) rounds each rank has heard,
// directly or not, from every other. Cost: ceil(log2 n)·alpha.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_dissemination_barrier(const CollectiveArgs &args, Schedule *schedule);

}  // namespace ddl

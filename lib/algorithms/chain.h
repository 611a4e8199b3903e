// Pipelined chain broadcast: root -> root+1 -> ... -> root-1, each rank forwarding chunk c
// as soon as it arrives. Cost: (n-1+C-1)·(alpha + N/C·beta) for C chunks, which tends to
// N·beta (bandwidth-optimal) for large messages.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_chain_broadcast(const CollectiveArgs &args, Schedule *schedule);
// Predicted seconds of one call alone (network constants for the hops between hosts).
double chain_broadcast_cost(const CollectiveArgs &args);

}  // namespace ddl

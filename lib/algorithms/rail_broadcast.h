// Broadcast over every rail: the vector cut into L parts on hosts of L ranks each, part j
// carried across the hosts by the ranks of local index j (one NIC each, DDL_RAILS), then
// shared inside each host. The chain (chain.h) crosses each host boundary once but through
// one rank, so one NIC of a host's eight carries the whole message (ddl_sim, dgx-h100 16 x 8
// at 256 MB: 9 % of the bound); here every NIC carries an eighth.
//
// For chunk c of each part, in order:
//   1. on the root's host, local rank j takes part j from the root (reads it out of the
//      root's buffer with peer memory, else the root sends it);
//   2. rail j passes part j host after host, from the root's host on (a chain per rail: each
//      rank forwards a chunk as soon as it has it);
//   3. each rank, once it has a chunk of its part, writes it into the other ranks of its host
//      (peer memory; else sends it to them), so that the host's network and its NVLink or
//      shared memory work at once.
// Every host must have the same number of ranks (else the models and DDL_ALGO fall back to
// the chain).
//
// Cost: the slower of the network (each rail's part through a chain of H hosts, the L rails
// sharing min(rails, L) NICs) and the host (each rank's part to L-1 peers), plus one chunk
// of the other and the hops' latencies.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_rail_broadcast(const CollectiveArgs &args, Schedule *schedule);
// Infinite unless the ranks span 2 or more hosts of 2 or more ranks each, all alike, with 2 or
// more NICs (CollectiveArgs::rails) and 64 KB or more (rails_for, schedule.h).
double rail_broadcast_cost(const CollectiveArgs &args);

}  // namespace ddl

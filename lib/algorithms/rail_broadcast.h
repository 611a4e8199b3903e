// Broadcast over every rail: the vector cut into L parts on hosts of L ranks each, part j
// carried across the hosts by the ranks of local index j (one NIC each, DDL_RAILS), then
// shared inside each host. The chain (chain.h) crosses each host boundary once but through
// one rank, so one NIC of a host's eight carries the whole message (ddl_sim, dgx-h100 16 x 8
// at 256 MB: 9 % of the bound); here every NIC carries an eighth.
//
// For chunk c of each part, in order:
//   1. on the root's host, local rank j takes part j from the root (reads it out of the
//      root's buffer with peer memory, else the root sends it);
//   2. rail j passes part j down two binary trees of the other hosts, the even chunks down
//      one and the odd chunks down the other (the double binary tree of dbtree.h over the
//      hosts but the root's, whose rail rank hands each chunk to its tree's root): each host
//      is inner in one tree and a leaf of the other, so that over two chunks every rail rank
//      sends its part once (a part of one chunk goes down one tree, whose inner hosts send it
//      twice), and a chunk crosses about log2 H hosts, not H - 1 as in the chain per rail this
//      replaced (ddl_sim, dgx-h100 64 x 8 at 256 MB: 45 % of the bound, now 76 %). Halves of
//      each chunk down both trees balance even one chunk; in ddl_sim they were faster at 16 MB
//      (4 to 512 hosts x 8: 94-162 us against 103-192) and at 512 hosts, slower at 256 MB on
//      4 to 64 hosts (1,010 us against 856-960): not kept. Each rank forwards a chunk as soon
//      as it has it;
//   3. each rank, once it has a chunk of its part, writes it into the other ranks of its host
//      (peer memory; else sends it to them), so that the host's network and its NVLink or
//      shared memory work at once.
// Every host must have the same number of ranks (else the models and DDL_ALGO fall back to
// the chain).
//
// Cost: the slower of the network (each rail's part down its trees, depth D = 1 + ceil(log2
// (H - 1)) hops of a chunk sent twice at the inner hosts, the L rails sharing min(rails, L)
// NICs) and the host (each rank's part to L-1 peers), plus one chunk of the other and the
// hops' latencies.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_rail_broadcast(const CollectiveArgs &args, Schedule *schedule);
// Infinite unless the ranks span 2 or more hosts of 2 or more ranks each, all alike, with 2 or
// more NICs (CollectiveArgs::rails) and 64 KB or more (rails_for, schedule.h).
double rail_broadcast_cost(const CollectiveArgs &args);

}  // namespace ddl

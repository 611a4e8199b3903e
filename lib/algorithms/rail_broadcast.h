// Broadcast over every rail: the vector cut into L parts on hosts of L ranks each, part j
// carried across the hosts by the ranks of local index j (one NIC each, DDL_RAILS), then
// shared inside each host. The chain (chain.h) crosses each host boundary once but through
// one rank, so one NIC of a host's eight carries the whole message (ddl_sim, dgx-h100 16 x 8
// at 256 MB: 9 % of the bound); here every NIC carries an eighth.
//
// For chunk c of each part, in order:
//   1. on the root's host, local rank j takes part j from the root (reads it out of the
//      root's buffer with peer memory, else the root sends it);
//   2. rail j passes part j on to the other hosts: from 7 hosts on, down two binary trees of
//      them, the even chunks down one and the odd chunks down the other (the double binary
//      tree of dbtree.h over the hosts but the root's, whose rail rank hands each chunk to its
//      tree's root): each host is inner in one tree and a leaf of the other, so that over two
//      chunks every rail rank sends its part once, and a chunk crosses 1 + floor(log2 (H - 1))
//      hosts, not H - 1 (ddl_sim, dgx-h100 64 x 8 at 256 MB: 45 % of the bound along a chain,
//      76 % down the trees); below 7 hosts along a chain from host to host (an inner host of a
//      tree sends a chunk twice: a chunk time a hop more; see rail_shape). Halves of each chunk
//      down both trees (balanced for one chunk too) were faster in ddl_sim at 16 MB, slower at
//      256 MB (1,010 us against 856-960 at 4-64 hosts): not kept. Each rank forwards a chunk as
//      soon as it has it;
//   3. each rank, once it has a chunk of its part, writes it into the other ranks of its host
//      (peer memory; else sends it to them), so that the host's network and its NVLink or
//      shared memory work at once.
// Every host must have the same number of ranks (else the models and DDL_ALGO fall back to
// the chain).
//
// Cost: the slower of the network (each rail's part down its trees or chain: the hops'
// latencies and chunk times, the L rails sharing min(rails, L) NICs) and the host (each rank's
// part to L-1 peers), plus one chunk of the other.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_rail_broadcast(const CollectiveArgs &args, Schedule *schedule);
// Infinite unless the ranks span 2 or more hosts of 2 or more ranks each, all alike, with 2 or
// more NICs (CollectiveArgs::rails) and 64 KB or more (rails_for, schedule.h).
double rail_broadcast_cost(const CollectiveArgs &args);

}  // namespace ddl

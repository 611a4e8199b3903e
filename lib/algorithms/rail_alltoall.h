// Alltoall over every rail (fixed count): the pairwise exchange, with each block crossing the
// network on its receiver's rail.
//
// With rails (lib/core/rails.h) each rank drives one NIC of its host, the one of its local
// index modulo the rails, and reaches the ranks of other hosts on the same rail through it;
// a message to a rank on another rail goes through the main transport, over one NIC. In the
// pairwise exchange most blocks are such (on 2 hosts x 2 ranks x 2 rails: 3 of a host's 4
// messages to the other host leave through one NIC, and the alltoall reached 62.5 % of the
// 2-rail bound). Here a block for a rank y on another host and another rail goes first to the
// rank of its own host with y's local index (over shared memory), which sends it to y on their
// common rail, as NCCL's PXN routes through the GPU on the destination's rail:
//   - to ranks of its own host, and to ranks of other hosts on its rail: straight;
//   - to a rank y of another host on another rail: handed to its host's rank z with y's local
//     index, which sends it on to y (tag: the block's sender);
//   - as z: receives its host's ranks' blocks for the ranks of other hosts with its local
//     index (tag: the block's receiver) and sends each on when it is in.
// Every host then sends each of its NICs an equal share, and each block crosses the network
// once; (R-1)/R of the blocks to other hosts (R rails) cross their host once more. Correct for
// any mapping of ranks to rails (only the speed assumes local index modulo rails: with GPUs,
// ddl may give a rank the rail closest to its GPU instead, which is the same on DGX-like hosts
// whose GPU i is closest to NIC i). Every host must have as many ranks; sends to other hosts
// go to two peers at a time (NetworkSendWindow).
//
// Cost (n ranks, H hosts of L, R = min(rails, L), b bytes a block; local constants inside a
// host, network ones across): the pairwise exchange's with the network bytes over R NICs,
// plus the hand-offs (a message for the hander and one for the sender-on): alpha + (R-1)/R
// (n-L)(2 o + b beta) + alpha_net + (n-1) o_net + L (n-L) b beta_net / R. The pairwise
// exchange's model sends everything through one NIC a host, as it did on the emulated hosts
// (UCX's choice for the main transport); ddl_sim routes a message between rails over the
// sender's NIC and the receiver's, as if the main transport used them all, and so finds this
// exchange slower than the pairwise one where messages, not bytes, set the pace (dgx-h100,
// 16 hosts x 8, 16 MB: 565 against 371 us; 256 MB: 5.35 against 5.58 ms).
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_rail_alltoall(const CollectiveArgs &args, Schedule *schedule);
// Infinite unless the ranks drive 2 or more rails (from 64 KB a block: rails_for), span 2 or
// more hosts of equally many ranks, 2 or more a host.
double rail_alltoall_cost(const CollectiveArgs &args);

}  // namespace ddl

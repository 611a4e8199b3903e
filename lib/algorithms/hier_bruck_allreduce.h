// hier_bruck (allreduce): a reduce-scatter then an allgather in Bruck's rounds (as hier_bruck's
// own, hier_two_level.h, at radix 4) along each rail's contiguous segment, every tier busy in
// one pass.
//
// hier (hier.h) cuts the vector into pieces and runs each piece's three phases (inside the
// hosts, between them, inside again) so that they overlap; but each piece's network allreduce
// pays its rounds' latencies, and the last piece's network phase and host allgather run
// alone. Here each rank l of every host owns segment l of the vector (its rail's), cut into
// one block per host; the rank reduces its host's operands of the segment, block by block,
// the blocks that cross the network first first; its rail (the ranks of local index l, one per
// host) reduce-scatters the segment in ceil(log4 H) levels of rounds (to 1, 2, 3 hosts on, then
// 4, 8, 12, ...), adding what arrives as it arrives (as hier_two_level.h's reduce-scatter),
// allgathers it back in as many, and the rank writes each block into its host's other outputs
// as it lands. Each host's NICs carry 2(H-1)/H of the
// vector, as hier's, and the tiers hand each other work run by run, not piece by piece.
//
// Unlike hier's reduce-scatter form (whose blocks belong to ranks in rank order, so that a
// rail's blocks are scattered through the vector), a rail's blocks here are one contiguous
// segment: inside the host a rank reads, reduces and writes runs of up to a network chunk,
// not one block at a time, and its steps grow with the rounds' messages, not with hosts x
// ranks.
//
// Every host must have as many ranks, and the count must be at least one element a rank (else
// hier is built); the last count % ranks elements (which do not divide among them) are
// allreduced beside, by the models' choice for so few. Positions are kept relative to the rank's
// host (position j: host h+j's block), so each round passes one run of positions; a position's
// block larger than a network chunk is cut into chunks (cells), and the rounds then pass one cell a
// message.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_hier_bruck_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds: its reduce-scatter's and allgather's rounds, each with its tiers
// overlapped (the slower tier's bytes plus both tiers' latencies); infinite below 4 MB, among
// fewer than 16 hosts, where it is not built (above) or a host has one rank.
double hier_bruck_allreduce_cost(const CollectiveArgs &args);
// How many pieces it cuts the vector into, each a whole hier_bruck of its own, each rank's host
// tier working piece after piece (as hier's): CollectiveArgs::pieces where the count divides
// among them, else one (hier_bruck_allreduce.cc says why the models keep one).
int hier_bruck_pieces(const CollectiveArgs &args);

}  // namespace ddl

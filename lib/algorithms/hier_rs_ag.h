// hier_rs_ag: an allreduce across hosts as hier's reduce-scatter followed by hier's
// allgather (each in its plain or Bruck form, whichever its model prices lower), one after
// the other on each rank.
//
// hier's allreduce (hier.h) cuts the vector into pieces and runs each piece's three phases
// (inside the hosts, between them, inside again) so that they overlap; among hundreds of
// hosts each piece's network allreduce (rhd, a double binary tree) pays its rounds' latencies
// once per piece and its last piece alone. The reduce-scatter and the allgather each keep
// every tier busy in one pass (the Bruck forms' rounds overlap, hier_two_level.h), and
// together they move the bytes of one allreduce: among 512 hosts x 8 they take less time than
// the pieces (ddl_sim: tools/ddl_sim/TIERS.md).
//
// Every rank's block is the same size (count a multiple of the ranks); on one rank the
// allgather waits for every step of the reduce-scatter, so that in place it never writes a
// block another step of this rank still reads, and the ranks of a host that write into each
// other's outputs (peer memory) have read their inputs first: the rank that reads a block of
// a peer's input in the reduce-scatter is the one that writes it into that peer's output in
// the allgather (both forms give a block the same agent on every host).
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_hier_rs_ag_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds: the cheaper reduce-scatter's and the cheaper allgather's models added;
// infinite unless the count divides evenly among the ranks and hier's forms apply.
double hier_rs_ag_allreduce_cost(const CollectiveArgs &args);

}  // namespace ddl

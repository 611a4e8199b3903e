// hier: the multi-tier allreduce of IBM's PowerAI DDL ("multi-ring"), composed the way UCC's
// cl/hier and Open MPI's coll/han compose per-level collectives, but kept as one schedule.
//
// Tiers (CollectiveArgs::tiers) group the ranks, fastest first: by host, then optionally by
// rack, ... For the ranks of one node of that tree:
//   1. every group of the fastest tier reduce-scatters the vector around a ring, so that each
//      member holds the group's sum of one block (groups may differ in size: blocks differ);
//   2. the vector is cut where any group's blocks start (segments); each segment has one
//      owner per group, and those owners allreduce it across the slower tiers, recursively
//      (the slowest tier with an algorithm the cost models choose: ring, rd, rhd, tree);
//   3. every group allgathers the blocks back around its ring.
// With L ranks on each of H hosts, each host sends 2(H-1)/H·N bytes instead of the flat
// ring's 2(HL-1)/(HL)·N, and its L ranks drive the host link at once, each its own shard.
//
// Phases are glued by memory, not by barriers: a step of a later phase waits only for the
// earlier steps that touch the same elements, so the chunks of one phase flow into the next.
//
// When the fastest tier's groups each lie on one host whose ranks may read and write each
// other's memory (CollectiveArgs::peer_memory), steps 1 and 3 go by single copy instead of
// around a ring: rank r reads block r straight out of its peers' inputs and later writes the
// finished block straight into their outputs (kPeerRead, kPeerWrite), as the one-host direct
// allreduce does (lib/core/direct_allreduce.h).
//
// Pipelined: the vector is cut into pieces, each a whole hier of its own, and each rank's
// reduce-scatters of the fastest tier run piece after piece; so while piece k crosses the
// network, piece k+1 is reduced inside the hosts and piece k-1 gathered back: every tier
// busy at once, where one piece makes them take turns (IBM's and Horovod's hierarchical
// allreduce do; NCCL's channels pipeline their rings across NVLink and NICs).
//
// Cost: the ring model of the fastest tier (CollectiveArgs::local) for steps 1 and 3, and the
// ring model over hosts (CollectiveArgs::net) for step 2, whose bytes a host's rails carry
// side by side; in P pieces, P times the slower tier's cost of one piece plus the faster
// tier's (the fill). The pieces: CollectiveArgs::pieces, else the count the model prices
// lowest among 1, 2, 4, ... 64.
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_hier_allreduce(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds; infinite when the ranks do not span several hosts (the flat paths of
// one host are better there).
double hier_allreduce_cost(const CollectiveArgs &args);

// How hier runs a call: how many pieces it cuts the vector into (see above; 1 below two
// hosts), the algorithm among hosts it runs for each piece's blocks, chosen with the pieces
// (nullptr: the models' choice for each), and what the models price the call at.
struct HierPlan {
  int pieces = 1;
  const char *leaf = nullptr;
  double seconds = 0;
};
HierPlan hier_plan(const CollectiveArgs &args);
int hier_pieces(const CollectiveArgs &args);  // hier_plan(args).pieces
constexpr int kMaxHierPieces = 64;

}  // namespace ddl

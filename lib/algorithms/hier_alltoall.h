// Hierarchical alltoall across hosts (fixed count): the blocks a host sends to another host
// travel as one message between two agents, instead of one message per pair of ranks.
//
// For each ordered pair of hosts (h, g) the rank of h whose local index is g mod |h| is the
// sending agent and the rank of g whose local index is h mod |g| the receiving one, so the
// agents' work spreads over the hosts' ranks:
//   1. every rank of h hands the agent its blocks for g's ranks (over shared memory);
//   2. the agent sends them, |h|·|g| blocks, to g's agent in one message;
//   3. g's agent hands each of its host's ranks the |h| blocks for it.
// Blocks between ranks of one host go straight, as in the pairwise exchange.
//
// Each host link carries the same bytes as the pairwise exchange (its ranks' blocks for the
// other hosts' ranks, which no algorithm can lower), with H-1 messages per host instead of
// L·(n-L): what it saves is per-message cost, for small blocks on many ranks; what it costs
// is two more copies inside each host, which large blocks feel. The models choose.
//
// Cost (n ranks, H hosts of at most L, b bytes per block; network constants across hosts):
//   pairwise: alpha_net + (n-1)·o_net + L·(n-L)·b·beta_net
//   hier:     2·(alpha + (n-L)·(o + b·beta)) + alpha_net + (H-1)·o_net + L·(n-L)·b·beta_net
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_hier_alltoall(const CollectiveArgs &args, Schedule *schedule);
// Infinite unless the ranks span several hosts and some host has more than one of them.
double hier_alltoall_cost(const CollectiveArgs &args);
// The pairwise exchange's model, to compare with (the builder is pairwise.h's).
double pairwise_alltoall_cost(const CollectiveArgs &args);

}  // namespace ddl

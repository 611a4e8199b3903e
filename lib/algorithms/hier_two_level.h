// hier's two-level forms of allgather, reduce-scatter and broadcast: hosts (the fastest tier,
// CollectiveArgs::tiers[0]) and the network between them.
//
// A flat ring over ranks on several hosts carries P-1 blocks over every host boundary it
// crosses; each host only needs (H-1)·L blocks to leave it (its L ranks' blocks, once to each
// other host). So each block crosses to every other host once, to one rank there, its agent
// (the rank whose local index is the block owner's local index modulo that host's size),
// and moves on inside the host over shared memory:
//   allgather:      each rank sends its block to its agent on every other host; every rank
//                   then forwards what it holds (its own block and those it was the agent
//                   for) to the other ranks of its host;
//   reduce-scatter: for a block owned on another host, every rank sends its operand to its
//                   host's agent for that block, which reduces them and sends one partial
//                   sum to the owner; for a block owned on this host, straight to the owner.
//                   The owner reduces its host's operands and the other hosts' partials.
// With L ranks on each of H hosts, each host link carries (H-1)/H·N instead of the ring's
// (HL-1)/(HL)·N: 1.5x less at 2 x 2, 1.75x at 2 x 4. Hosts may differ in size.
// Where the ranks of a host may read and write each other's buffers (CollectiveArgs::
// peer_memory), the moves inside a host go by single copy: an allgather's holder writes each
// block straight into its host's other outputs, a reduce-scatter's agent or owner reads its
// host's operands straight out of their inputs. Each byte then moves once, and no message is
// posted for it (on GPUs: no per-message host work for the NVLink moves).
//
// Broadcast: the chain (chain.h) already crosses each host boundary once and is
// bandwidth-optimal, but a small message waits for P-1 hops, H-1 of them over the network.
// Here the root's agents on the other hosts (their leaders) form a binomial tree of hosts
// rooted at the root (ceil(log2 H) network hops), and each leader sends to the ranks of its
// host. The models take it for small messages, the chain for large ones (a tree's root sends
// the message once per child). The models price one call alone: back to back, calls also
// overlap in the chain's hops, so there the chain wins from smaller sizes than they say.
//
// Chunks of at most 64 KB (network_chunk_elems) let a block move on inside its host while its
// later chunks are still on the wire. Reduce-scatter's agents hold one block of scratch per
// block they reduce, and every receive lands in one of a few staging chunks.
// Bruck forms (hier_bruck): among many hosts hier's blocks are small (a 256 MB allgather over
// 512 hosts x 8: 64 KB), so each rank's H-1 messages to other hosts cost as much host work as
// wire time. Here the ranks of one local index, one per host (a rail), pass blocks in
// ceil(log2 H) rounds at distances 1, 2, 4, ... hosts (Bruck et al., 1997): in round d a rank
// passes on the min(d, H-d) blocks it holds, packed into messages of up to a network chunk
// and half the round. A reduce-scatter runs the rounds backwards, adding what arrives (apart
// from the host's sums, in up to H/2 blocks of scratch beside the H of the rail's positions).
// Inside hosts as hier's.
// Every host must have as many ranks (else hier's forms are built); the models take them
// where packing saves more per-message work than the rounds add in latency.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_hier_allgather(const CollectiveArgs &args, Schedule *schedule);
void build_hier_reduce_scatter(const CollectiveArgs &args, Schedule *schedule);
void build_hier_broadcast(const CollectiveArgs &args, Schedule *schedule);
void build_hier_bruck_allgather(const CollectiveArgs &args, Schedule *schedule);
void build_hier_bruck_reduce_scatter(const CollectiveArgs &args, Schedule *schedule);

// Predicted seconds (network constants between hosts, local ones inside): infinite unless
// the ranks span several hosts and some host has more than one of them (with one rank per
// host the ring crosses each boundary as rarely).
double hier_allgather_cost(const CollectiveArgs &args);
double hier_reduce_scatter_cost(const CollectiveArgs &args);
// Infinite unless hosts are even, 3 or more, and a network chunk holds 2 or more blocks.
double hier_bruck_allgather_cost(const CollectiveArgs &args);
double hier_bruck_reduce_scatter_cost(const CollectiveArgs &args);
// Infinite unless the ranks span several hosts. (The ring's and the chain's models, which
// these are compared with, are beside their builders: ring.h, chain.h.)
double hier_broadcast_cost(const CollectiveArgs &args);

}  // namespace ddl

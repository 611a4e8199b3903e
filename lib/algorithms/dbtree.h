// Double binary tree allreduce (NCCL's trees, after Sanders, Speck and Träff's two-tree
// algorithm): two binary trees over the ranks, each carrying half of the vector, built so
// that every rank is an inner node of at most one of them and a leaf of the other; each half
// goes up its tree (children's partials reduced into the parent's) and back down, in chunks,
// so that a chunk climbs while the next one follows and the previous one descends.
//
// Tree A numbers the ranks in order (rank r at position r + 1) and links them as an in-order
// binary tree: position p = b(2k + 1), b its lowest set bit, hangs under whichever of p - b
// and p + b is an odd multiple of 2b, or, past n, under the nearest ancestor within 1..n; its
// leaves are the odd positions, the even ranks. Tree B is A over ranks mirrored (r -> n-1-r)
// when n is even, shifted (r -> r+1 mod n) when it is odd: A's inner nodes are B's leaves.
//
// Why: a ring among H hosts takes 2(H-1) steps of latency, rhd 2·log2 H rounds that each
// move a whole shard at once; the trees take 2·log2 H steps of one chunk each and then stream,
// each rank sending and receiving about 2N bytes in all (a ring's 2N(H-1)/H), so that among
// many hosts they keep the network busy from few chunks on (issue 37, item 2).
//
// Cost (n ranks, N bytes, chunks of S bytes, depth D = ceil(log2 n)):
//   2·D·(alpha + S·beta) + 2·N·beta + N·gamma + (per chunk of each half: ~3 messages)·overhead
#pragma once

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/schedule.h"

namespace ddl {

void build_dbtree_allreduce(const CollectiveArgs &args, Schedule *schedule);
double dbtree_allreduce_cost(int nranks, double bytes, double chunk_bytes, const CostConstants &c);

// Rank r's parent (-1 at the root) and children in tree 0 or 1 of n ranks (for tests).
struct DbtreePlace {
  int parent = -1;
  std::vector<int> children;
};
DbtreePlace dbtree_place(int n, int r, int tree);

}  // namespace ddl

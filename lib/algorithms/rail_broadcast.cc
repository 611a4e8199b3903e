#include "lib/algorithms/rail_broadcast.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/chain.h"
#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/dbtree.h"
#include "lib/algorithms/hosts.h"

namespace ddl {
namespace {

// Messages between two ranks are told apart by part and chunk (past the transport's range:
// the plan fails with advice, as elsewhere).
uint32_t tag_of(int part, int chunk, int chunks) {
  const uint64_t tag =
      static_cast<uint64_t>(part) * static_cast<uint64_t>(chunks) + static_cast<uint64_t>(chunk);
  return tag > kMaxStepTag ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(tag);
}

// What one rail's bytes cost on the network: the host's L rails share min(rails, L) NICs
// (each rank drives its own, DDL_RAILS).
CostConstants rail_constants(const CollectiveArgs &args, int L) {
  CostConstants net = args.net;
  net.beta *= static_cast<double>(L) / rails_for(args, L);
  return net;
}

// How a rail crosses H hosts: down two trees (a chunk crosses 1 + floor(log2 (H - 1)) hosts,
// dbtree.h's trees over H - 1 being floor(log2) deep, each inner host sending it twice) or
// along a chain (H - 1 hosts, once each), whichever passes a chunk in fewer chunk times (a tie to
// the trees: fewer hops). The trees take over from 7 hosts; below, the chain: on 4 emulated hosts x
// 2 ranks x 2 rails the trees (2 hops of 2 chunk times against 3 of 1) measured 8 % slower at 16 MB
// (82.3 against 76.1 ms, bench/across-hosts.md).
struct RailShape {
  bool trees;
  int hops;
  int chunk_times;  // per chunk along the deepest path
};
RailShape rail_shape(int H) {
  int depth = 0;
  while ((int64_t{2} << depth) <= H - 1) ++depth;  // floor(log2 (H - 1))
  const int tree_hops = 1 + depth;
  if (H > 2 && 2 * tree_hops <= H - 1) return RailShape{true, tree_hops, 2 * tree_hops};
  return RailShape{false, H - 1, H - 1};
}

// The chunk of the rails: D chunk times along the deepest path take (D + C)(alpha + part beta /
// C) for a part in C chunks, least at C = sqrt(D part beta / alpha) (ddl_sim, dgx-h100 64 x 8 at
// 16 MB: 512 KB chunks filled a 63-hop chain in ~950 us), never below an eighth of the
// network's chunk (the message work it is sized for, network_chunk_elems).
size_t rail_chunk_elems(const CollectiveArgs &args, int H, int L, size_t part_elems) {
  const size_t largest = std::max<size_t>(1, network_chunk_elems(args));
  const CostConstants net = rail_constants(args, L);
  const double part_seconds = static_cast<double>(part_elems * args.elem_size) * net.beta;
  const double best = std::sqrt(rail_shape(H).chunk_times * part_seconds /
                                std::max(net.alpha + net.overhead, 1e-9));
  const double chunks = std::max(1.0, std::round(best));
  const size_t elems = static_cast<size_t>(std::ceil(static_cast<double>(part_elems) / chunks));
  return std::clamp<size_t>(elems, std::max<size_t>(1, largest / 8), largest);
}

}  // namespace

void build_rail_broadcast(const CollectiveArgs &args, Schedule *schedule) {
  const Hosts hosts(args);
  if (!hosts.even() || hosts.ranks[0].size() < 2) return build_chain_broadcast(args, schedule);
  // Broadcast has one buffer, modelled as the output (as the chain's).
  schedule->algorithm = "rails";
  schedule->input_count = schedule->output_count = args.count;
  schedule->in_place = true;
  const int H = hosts.count(), L = static_cast<int>(hosts.ranks[0].size());
  const int me = args.rank, h = hosts.host_of[me], i = hosts.local_of[me];
  const int root_host = hosts.host_of[args.root], root_local = hosts.local_of[args.root];
  auto rank_at = [&](int host, int local) {
    return hosts.ranks[static_cast<size_t>((host % H + H) % H)][static_cast<size_t>(local)];
  };
  const bool single_copy = args.peer_memory;
  schedule->peer_memory = single_copy;
  const int position = (h - root_host + H) % H;  // on the rails, from the root's host
  const bool root_host_here = position == 0;
  // Regions of the vector and the local rank that shares each inside a host: part j, carried
  // by rail j, is shared by local rank j. On the root's host the root's own part is cut among
  // the other ranks instead, so that each byte leaves the root once (the root handing out its
  // part as well as the others' would send twice what any other rank sends).
  const BlockSplit parts(args.count, L);
  struct Region {
    Extent extent;
    int owner;  // local index
    bool rail;  // the owner's part, which its rail carries
  };
  std::vector<Region> regions;
  for (int j = 0; j < L; ++j)
    if (!(root_host_here && j == root_local)) regions.push_back(Region{parts.block(j), j, true});
  if (root_host_here) {
    const Extent own = parts.block(root_local);
    const BlockSplit cut(own.count, L - 1);
    for (int m = 0; m < L - 1; ++m) {
      const Extent piece = cut.block(m);
      regions.push_back(Region{Extent{own.offset + piece.offset, piece.count},
                               m < root_local ? m : m + 1, false});
    }
  }
  const ChunkSplit chunks(parts.max_block(), rail_chunk_elems(args, H, L, parts.max_block()));
  const int C = chunks.chunks();
  // Where this rank's chunks of each of rail i's two trees come from and go to: the trees over
  // the other hosts (positions 1..H-1 as dbtree ranks 0..H-2), fed by the root's host; or both
  // the chain from host to host.
  struct TreeLinks {
    int parent = -1;
    std::vector<int> children;
  };
  TreeLinks trees[2];
  auto rail_rank = [&](int tree_rank) { return rank_at(root_host + 1 + tree_rank, i); };
  const bool along_trees = rail_shape(H).trees;
  for (int t = 0; t < 2 && H > 1; ++t) {
    if (!along_trees) {
      if (position > 0) trees[t].parent = rank_at(h - 1, i);
      if (position < H - 1) trees[t].children = {rank_at(h + 1, i)};
      continue;
    }
    if (position == 0) {
      // Its root: climb from any position (the trees are shallow).
      int top = 0;
      for (int up = dbtree_place(H - 1, top, t).parent; up >= 0;
           up = dbtree_place(H - 1, top, t).parent)
        top = up;
      trees[t].children = {rail_rank(top)};
      continue;
    }
    const DbtreePlace place = dbtree_place(H - 1, position - 1, t);
    trees[t].parent = place.parent < 0 ? rank_at(root_host, i) : rail_rank(place.parent);
    for (int child : place.children) trees[t].children.push_back(rail_rank(child));
  }
  for (int c = 0; c < C; ++c) {
    // 1. Part i along rail i: chunk c from its tree's parent (or the root), to its children.
    const TreeLinks &tree = trees[c % 2];
    const Extent part = chunks.chunk(parts.block(i), c);
    std::vector<uint32_t> have_part;
    if (part.count > 0 && position > 0)
      have_part = {add_step(schedule, recv_step(tree.parent, tag_of(i, c, C),
                                                output_at(part.offset), part.count, {}))};
    // 2. The regions this rank shares, each from where it comes (the rail; the root's buffer
    //    on the root's host), into the host's other ranks but the root (which has it all).
    for (size_t k = 0; k < regions.size(); ++k) {
      const Extent x = chunks.chunk(regions[k].extent, c);
      const int owner = rank_at(h, regions[k].owner);
      const uint32_t tag = tag_of(static_cast<int>(k), c, C);
      if (x.count == 0) continue;
      if (me == args.root) {
        if (!single_copy)
          add_step(schedule, send_step(owner, tag, output_at(x.offset), x.count, {}));
        continue;
      }
      if (owner != me) continue;
      std::vector<uint32_t> have = have_part;
      if (root_host_here)
        have = {add_step(
            schedule, single_copy ? peer_read_step(args.root, input_at(x.offset),
                                                   output_at(x.offset), x.count, {})
                                  : recv_step(args.root, tag, output_at(x.offset), x.count, {}))};
      if (root_host_here && regions[k].rail) have_part = have;
      for (int j = 0; j < L; ++j) {
        const int peer = rank_at(h, j);
        if (peer == me || peer == args.root) continue;
        add_step(schedule, single_copy ? peer_write_step(peer, output_at(x.offset),
                                                         output_at(x.offset), x.count, have)
                                       : send_step(peer, tag, output_at(x.offset), x.count, have));
      }
    }
    for (int child : tree.children)
      if (part.count > 0)
        add_step(schedule,
                 send_step(child, tag_of(i, c, C), output_at(part.offset), part.count, have_part));
    // 3. Without peer memory: the regions the others share, from them.
    if (single_copy || me == args.root) continue;
    for (size_t k = 0; k < regions.size(); ++k) {
      const Extent x = chunks.chunk(regions[k].extent, c);
      const int owner = rank_at(h, regions[k].owner);
      if (x.count == 0 || owner == me) continue;
      add_step(schedule, recv_step(owner, tag_of(static_cast<int>(k), c, C), output_at(x.offset),
                                   x.count, {}));
    }
  }
}

double rail_broadcast_cost(const CollectiveArgs &args) {
  // One NIC a host: the chain's bytes and the rails' are the same, and the models (whose
  // sub-chunk terms then decide) took the rails on emulated hosts where nothing was measured;
  // the rails are for hosts with several NICs.
  const TierGroups tier = fastest_tier_groups(args);
  if (rails_for(args, tier.largest) < 2 || tier.groups < 2 || tier.largest < 2 ||
      tier.groups * tier.largest != args.nranks)
    return std::numeric_limits<double>::infinity();
  const int H = tier.groups, L = tier.largest;
  const double part = count_bytes(args) / L;
  const size_t part_elems = (args.count + static_cast<size_t>(L) - 1) / static_cast<size_t>(L);
  const double chunk = std::min(
      part, static_cast<double>(rail_chunk_elems(args, H, L, part_elems) * args.elem_size));
  const double chunks = std::max(1.0, std::ceil(part / std::max(chunk, 1.0)));
  const CostConstants net = rail_constants(args, L);
  CostConstants host = args.local;
  if (args.peer_memory) host.beta /= 2;  // a byte moves once, not into a cell and out of it
  const RailShape shape = rail_shape(H);
  const double network =
      shape.hops * net.alpha + shape.chunk_times * chunk * net.beta + part * net.beta;
  const double inside = host.alpha + (L - 1) * part * host.beta;
  const double messages =
      chunks * (2 * net.overhead + (args.peer_memory ? 0 : L - 1) * host.overhead);
  return std::max(std::max(network, inside), messages) +
         std::min(chunk * net.beta, (L - 1) * chunk * host.beta);
}

}  // namespace ddl

#include "lib/algorithms/dbtree.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lib/algorithms/blocks.h"

namespace ddl {
namespace {

// Receive staging chunks of a rank, reused round robin.
constexpr size_t kStagingSlots = 8;

int64_t lowest_bit(int64_t p) {
  return p & -p;
}

// The in-order tree over positions 1..n: p's parent, or 0 at the root.
int64_t parent_position(int64_t p, int64_t n) {
  for (;;) {
    const int64_t b = lowest_bit(p);
    const int64_t k = p / (2 * b);  // p = b(2k + 1)
    const int64_t up = k % 2 == 1 ? p - b : p + b;
    if (up == 0 || b > n) return 0;  // above the root
    if (up <= n) return up;
    p = up;  // past n: its nearest ancestor within 1..n
  }
}

// Tree 1's position of rank r, and back.
int to_tree(int n, int r, int tree) {
  if (tree == 0) return r;
  return n % 2 == 0 ? n - 1 - r : (r + 1) % n;
}
int from_tree(int n, int t, int tree) {
  if (tree == 0) return t;
  return n % 2 == 0 ? n - 1 - t : (t + n - 1) % n;
}

// Tag of a chunk's message between two ranks: tree, direction, chunk.
uint32_t tag_of(int tree, int down, size_t chunk, size_t chunks) {
  const uint64_t tag =
      (static_cast<uint64_t>(tree) * 2 + static_cast<uint64_t>(down)) * chunks + chunk;
  return tag > kMaxStepTag ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(tag);
}

}  // namespace

DbtreePlace dbtree_place(int n, int r, int tree) {
  DbtreePlace place;
  const int64_t me = to_tree(n, r, tree) + 1;
  const int64_t parent = parent_position(me, n);
  if (parent > 0) place.parent = from_tree(n, static_cast<int>(parent - 1), tree);
  // Children: the positions whose parent is this one (at most two: one below on each side).
  const int64_t b = lowest_bit(me);
  for (int64_t step = b / 2; step >= 1; step /= 2) {
    for (int64_t q : {me - step, me + step})
      if (q >= 1 && q <= n && parent_position(q, n) == me) {
        const int child = from_tree(n, static_cast<int>(q - 1), tree);
        if (std::find(place.children.begin(), place.children.end(), child) == place.children.end())
          place.children.push_back(child);
      }
  }
  return place;
}

void build_dbtree_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "dbtree", schedule)) return;
  const int n = args.nranks;
  const BlockSplit halves(args.count, 2);
  const size_t chunk_elems = args.chunk_elems > 0 ? args.chunk_elems : args.count;
  const ChunkSplit chunks(halves.block(0).count, chunk_elems);
  const size_t C = static_cast<size_t>(chunks.chunks());
  DbtreePlace place[2] = {dbtree_place(n, args.rank, 0), dbtree_place(n, args.rank, 1)};
  schedule->scratch_count = kStagingSlots * chunks.chunk_elems();
  size_t next_slot = 0;
  std::vector<uint32_t> slot_users;
  // Chunk by chunk, both trees: each climbs and then descends; a chunk's steps wait only for
  // their own data and for a free staging slot, so chunks and trees overlap.
  for (size_t c = 0; c < C; ++c) {
    for (int tree = 0; tree < 2; ++tree) {
      const Extent half = halves.block(tree);
      const Extent part = chunks.chunk(half, static_cast<int>(c));
      if (part.count == 0) continue;
      const DbtreePlace &p = place[tree];
      const bool root = p.parent < 0;
      const uint32_t up = tag_of(tree, 0, c, C), down = tag_of(tree, 1, c, C);
      // Up: the children's partials folded into the output, the first with the input.
      Range partial = input_at(part.offset);
      std::vector<uint32_t> ready;
      for (size_t j = 0; j < p.children.size(); ++j) {
        const Range slot = scratch_at((next_slot % kStagingSlots) * chunks.chunk_elems());
        std::vector<uint32_t> deps = ready;
        if (next_slot >= kStagingSlots) deps.push_back(slot_users[next_slot - kStagingSlots]);
        const bool complete = root && j + 1 == p.children.size();
        ready = {add_step(schedule,
                          recv_reduce_step(p.children[j], up, slot, partial, output_at(part.offset),
                                           part.count, complete, deps))};
        slot_users.push_back(ready[0]);
        ++next_slot;
        partial = output_at(part.offset);
      }
      if (!root) {
        const uint32_t sent =
            add_step(schedule, send_step(p.parent, up, partial, part.count, ready));
        // The result lands where the partial was read from (in place, or the output).
        ready = {add_step(schedule,
                          recv_step(p.parent, down, output_at(part.offset), part.count, {sent}))};
      }
      // Down: the result to the children.
      for (int child : p.children)
        add_step(schedule, send_step(child, down, output_at(part.offset), part.count, ready));
    }
  }
}

double dbtree_allreduce_cost(int nranks, double bytes, double chunk_bytes, const CostConstants &c) {
  if (nranks <= 1) return 0.0;
  const double depth = std::ceil(std::log2(static_cast<double>(nranks)));
  const double half = bytes / 2;
  const double chunk = chunk_bytes > 0 && chunk_bytes < half ? chunk_bytes : half;
  const double chunks = std::max(1.0, std::ceil(half / chunk));
  return 2 * depth * (c.alpha + chunk * c.beta) + 2 * bytes * c.beta + bytes * c.gamma +
         2 * 3 * chunks * c.overhead;
}

}  // namespace ddl

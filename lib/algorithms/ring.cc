#include "lib/algorithms/ring.h"

#include <algorithm>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/ring_order.h"

namespace ddl {
namespace {

// Receive staging slots for allreduce: enough to keep the pipeline full while bounding
// scratch memory to kStagingSlots chunks whatever the message size.
constexpr size_t kStagingSlots = 8;

// The ring's reduce-scatter over blocks numbered by ring position (shared by allreduce and
// reduce): at step s, send block p-s and reduce block p-s-1 from the left. The first step
// sends straight from the input, so out of place needs no initial copy; each block is reduced
// into `acc` (the output, or the reduce's scratch) exactly once, which also does the copy.
// After it, position p holds block p+1 complete. Staging slots come first in scratch.
struct RingPhase {
  std::vector<uint32_t> sends, reduces;  // by step s and chunk c: [s * C + c]
};
template <typename Acc>
RingPhase add_ring_reduce_scatter(const RingOrder &order, int rank, int n, const BlockSplit &blocks,
                                  const ChunkSplit &chunks, size_t slots, Acc acc,
                                  Schedule *schedule) {
  const int p = order.position_of(rank), C = chunks.chunks();
  const int right = order.next(rank), left = order.prev(rank);
  RingPhase phase;
  for (int s = 0; s < n - 1; ++s) {
    const Extent send_block = blocks.block(ring_index(p - s, n));
    const Extent recv_block = blocks.block(ring_index(p - s - 1, n));
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(s) * C + c;
      const Extent out = chunks.chunk(send_block, c);
      const Extent in = chunks.chunk(recv_block, c);
      std::vector<uint32_t> send_deps;
      if (s > 0) send_deps.push_back(phase.reduces[m - C]);  // sends what step s-1 reduced
      phase.sends.push_back(add_step(
          schedule,
          send_step(right, static_cast<uint32_t>(m),
                    s == 0 ? input_at(out.offset) : acc(out.offset), out.count, send_deps)));
      std::vector<uint32_t> reduce_deps;
      if (m >= slots) reduce_deps.push_back(phase.reduces[m - slots]);  // staging slot is free
      phase.reduces.push_back(add_step(
          schedule,
          recv_reduce_step(left, static_cast<uint32_t>(m),
                           scratch_at((m % slots) * chunks.chunk_elems()), input_at(in.offset),
                           acc(in.offset), in.count, s == n - 2, reduce_deps)));
    }
  }
  return phase;
}

}  // namespace

void build_ring_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "ring", schedule)) return;
  // Blocks are numbered by position along the ring (every rank ends with all of them).
  const RingOrder order(args);
  const int n = args.nranks, r = order.position_of(args.rank);
  const BlockSplit blocks(args.count, n);
  const ChunkSplit chunks(blocks.max_block(), args.chunk_elems);
  const int C = chunks.chunks();
  const size_t slots = std::min(kStagingSlots, static_cast<size_t>(2 * C));
  schedule->scratch_count = slots * chunks.chunk_elems();
  const int right = order.next(args.rank), left = order.prev(args.rank);

  const RingPhase rs =
      add_ring_reduce_scatter(order, args.rank, n, blocks, chunks, slots, output_at, schedule);
  const std::vector<uint32_t> &rs_send = rs.sends, &rs_reduce = rs.reduces;
  // Allgather: at step s, forward block r+1-s (complete) and receive block r-s in place.
  std::vector<uint32_t> ag_recv;
  for (int s = 0; s < n - 1; ++s) {
    const Extent send_block = blocks.block(ring_index(r + 1 - s, n));
    const Extent recv_block = blocks.block(ring_index(r - s, n));
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(n - 1 + s) * C + c;
      const size_t k = static_cast<size_t>(s) * C + c;
      const Extent out = chunks.chunk(send_block, c);
      const Extent in = chunks.chunk(recv_block, c);
      const uint32_t ready =
          s == 0 ? rs_reduce[static_cast<size_t>(n - 2) * C + c] : ag_recv[k - C];
      add_step(schedule, send_step(right, static_cast<uint32_t>(m), output_at(out.offset),
                                   out.count, {ready}));
      // Block r-s was read by the reduce-scatter send of step s: wait for it to finish.
      ag_recv.push_back(add_step(
          schedule,
          recv_step(left, static_cast<uint32_t>(m), output_at(in.offset), in.count, {rs_send[k]})));
    }
  }
}

void build_ring_reduce_scatter(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, r = args.rank;
  const size_t block = args.count;
  if (!start_blocks_schedule(args, Collective::kReduceScatter, "ring", schedule)) return;
  const ChunkSplit chunks(block, args.chunk_elems);
  const int C = chunks.chunks();
  // Two accumulation slots of one block: step s reduces into slot s%2, step s+1 sends it.
  schedule->scratch_count = 2 * block;
  // Blocks belong to ranks; the ring visits them in RingOrder, so the block of the rank at
  // position q moves at the steps that rank's position sets.
  const RingOrder order(args);
  const int p = order.position_of(r);
  const int right = order.next(r), left = order.prev(r);
  std::vector<uint32_t> sends, reduces;
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_base = static_cast<size_t>(order.rank_at(p - s - 1)) * block;
    const size_t recv_base = static_cast<size_t>(order.rank_at(p - s - 2)) * block;
    const bool last = s == n - 2;
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(s) * C + c;
      const Extent part = chunks.chunk(Extent{0, block}, c);
      const Range src = s == 0 ? input_at(send_base + part.offset)
                               : scratch_at(((s - 1) % 2) * block + part.offset);
      std::vector<uint32_t> send_deps;
      if (s > 0) send_deps.push_back(reduces[m - C]);
      sends.push_back(add_step(
          schedule, send_step(right, static_cast<uint32_t>(m), src, part.count, send_deps)));
      const Range slot = scratch_at((s % 2) * block + part.offset);
      std::vector<uint32_t> reduce_deps;
      if (s > 0) reduce_deps.push_back(sends[m - C]);  // slot s%2 was sent at step s-1
      reduces.push_back(add_step(
          schedule,
          recv_reduce_step(left, static_cast<uint32_t>(m), slot, input_at(recv_base + part.offset),
                           last ? output_at(part.offset) : slot, part.count, last, reduce_deps)));
    }
  }
}

void build_ring_allgather(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, r = args.rank;
  const size_t block = args.count;
  if (!start_blocks_schedule(args, Collective::kAllgather, "ring", schedule)) return;
  const ChunkSplit chunks(block, args.chunk_elems);
  const int C = chunks.chunks();
  const RingOrder order(args);
  const int p = order.position_of(r);
  const int right = order.next(r), left = order.prev(r);
  std::vector<uint32_t> recvs;
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_base = static_cast<size_t>(order.rank_at(p - s)) * block;
    const size_t recv_base = static_cast<size_t>(order.rank_at(p - s - 1)) * block;
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(s) * C + c;
      const Extent part = chunks.chunk(Extent{0, block}, c);
      std::vector<uint32_t> send_deps;
      if (s > 0) send_deps.push_back(recvs[m - C]);  // forward what arrived at step s-1
      const Range src = s == 0 ? input_at(part.offset) : output_at(send_base + part.offset);
      add_step(schedule, send_step(right, static_cast<uint32_t>(m), src, part.count, send_deps));
      recvs.push_back(
          add_step(schedule, recv_step(left, static_cast<uint32_t>(m),
                                       output_at(recv_base + part.offset), part.count, {})));
    }
  }
}

void build_ring_reduce(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks;
  const bool at_root = args.rank == args.root;
  schedule->algorithm = "ring";
  schedule->input_count = args.count;
  schedule->output_count = at_root ? args.count : 0;
  schedule->in_place = at_root && args.in_place;
  if (n == 1) {
    add_single_rank_copy(args, args.count, 0, schedule);
    return;
  }
  // The allreduce's reduce-scatter (above), then every rank sends the block it completed to
  // the root instead of around the ring: each block crosses the root's link once.
  const RingOrder order(args);
  const int p = order.position_of(args.rank);
  const BlockSplit blocks(args.count, n);
  const ChunkSplit chunks(blocks.max_block(), args.chunk_elems);
  const int C = chunks.chunks();
  const size_t slots = std::min(kStagingSlots, static_cast<size_t>(2 * C));
  const size_t staging = slots * chunks.chunk_elems();
  // Partial sums go to the root's output, or to scratch past the staging slots elsewhere.
  auto acc = [&](size_t offset) {
    return at_root ? output_at(offset) : scratch_at(staging + offset);
  };
  schedule->scratch_count = staging + (at_root ? 0 : args.count);
  const RingPhase rs =
      add_ring_reduce_scatter(order, args.rank, n, blocks, chunks, slots, acc, schedule);
  const std::vector<uint32_t> &rs_send = rs.sends, &rs_reduce = rs.reduces;
  // Position q completes block q+1 at the last step.
  const uint32_t gather_tag = static_cast<uint32_t>(n - 1) * C;
  if (!at_root) {
    const Extent mine = blocks.block(ring_index(p + 1, n));
    for (int c = 0; c < C; ++c) {
      const Extent part = chunks.chunk(mine, c);
      add_step(schedule, send_step(args.root, gather_tag + c, acc(part.offset), part.count,
                                   {rs_reduce[static_cast<size_t>(n - 2) * C + c]}));
    }
    return;
  }
  for (int q = 0; q < n; ++q) {
    if (q == p) continue;
    const int b = ring_index(q + 1, n);
    // The root's last step on block b: reduced at step s_b and sent on at s_b + 1; its own
    // block p is only read, by the first send (the output, in place).
    const int s_b = ring_index(p - b - 1, n);
    for (int c = 0; c < C; ++c) {
      const Extent part = chunks.chunk(blocks.block(b), c);
      const uint32_t last = b == p             ? rs_send[c]
                            : s_b + 1 <= n - 2 ? rs_send[static_cast<size_t>(s_b + 1) * C + c]
                                               : rs_reduce[static_cast<size_t>(s_b) * C + c];
      add_step(schedule, recv_step(order.rank_at(q), gather_tag + c, output_at(part.offset),
                                   part.count, {last}));
    }
  }
}

double ring_reduce_cost(const CollectiveArgs &args) {
  const CostConstants &c = args.hosts > 1 ? args.net : args.local;
  const int n = args.nranks;
  if (n <= 1) return 0.0;
  const double block = count_bytes(args) / n;
  const double chunk = static_cast<double>(args.chunk_elems) * static_cast<double>(args.elem_size);
  const double exposed = chunk > 0 && chunk < block ? chunk : block;
  const double reduce_scatter =
      (n - 1) * (c.alpha + block * std::max(c.beta, c.gamma) + exposed * std::min(c.beta, c.gamma));
  // The root's link takes the n-1 finished blocks.
  return reduce_scatter + c.alpha + (n - 1) * block * c.beta;
}

double ring_allreduce_cost(int nranks, double bytes, double chunk_bytes, const CostConstants &c) {
  if (nranks <= 1) return 0.0;
  const double steps = nranks - 1, block = bytes / nranks;
  const double exposed = chunk_bytes > 0 && chunk_bytes < block ? chunk_bytes : block;
  const double reduce_scatter =
      steps * (c.alpha + block * std::max(c.beta, c.gamma) + exposed * std::min(c.beta, c.gamma));
  const double allgather = steps * (c.alpha + block * c.beta);
  return reduce_scatter + allgather;
}

namespace {

double ring_blocks_cost(const CollectiveArgs &args, bool reducing) {
  const CostConstants &c = args.hosts > 1 ? args.net : args.local;
  const double per_byte = reducing ? std::max(c.beta, c.gamma) : c.beta;
  return (args.nranks - 1) * (c.alpha + count_bytes(args) * per_byte);
}

}  // namespace

double ring_allgather_cost(const CollectiveArgs &args) {
  return ring_blocks_cost(args, false);
}

double ring_reduce_scatter_cost(const CollectiveArgs &args) {
  return ring_blocks_cost(args, true);
}

}  // namespace ddl

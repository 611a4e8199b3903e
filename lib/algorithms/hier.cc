#include "lib/algorithms/hier.h"

#include <algorithm>
#include <map>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/ring.h"

namespace ddl {
namespace {

// Receive staging slots of a group's reduce-scatter (as in ring.cc).
constexpr size_t kStagingSlots = 8;

// Ring reduce-scatter over n ranks of `count` elements cut into BlockSplit blocks, in the
// group's own coordinates: rank r ends with block r reduced in its output (the other blocks
// of its output hold partial sums, which the allgather overwrites). Never final: the slower
// tiers still have contributions to add.
Schedule group_reduce_scatter(int n, int r, size_t count, size_t chunk_elems) {
  Schedule s;
  s.input_count = s.output_count = count;
  const BlockSplit blocks(count, n);
  const ChunkSplit chunks(blocks.max_block(), chunk_elems);
  const int C = chunks.chunks();
  const size_t slots = std::min(kStagingSlots, static_cast<size_t>(n - 1) * C);
  s.scratch_count = slots * chunks.chunk_elems();
  const int right = ring_index(r + 1, n), left = ring_index(r - 1, n);
  std::vector<uint32_t> reduces;
  // Step k sends block r-1-k (step k-1 reduced it) and reduces block r-2-k arriving from
  // the left; the last step reduces block r.
  for (int k = 0; k < n - 1; ++k) {
    const Extent send_block = blocks.block(ring_index(r - 1 - k, n));
    const Extent recv_block = blocks.block(ring_index(r - 2 - k, n));
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(k) * C + c;
      const Extent out = chunks.chunk(send_block, c), in = chunks.chunk(recv_block, c);
      std::vector<uint32_t> send_deps;
      if (k > 0) send_deps.push_back(reduces[m - C]);
      add_step(&s, send_step(right, static_cast<uint32_t>(m),
                             k == 0 ? input_at(out.offset) : output_at(out.offset), out.count,
                             send_deps));
      std::vector<uint32_t> reduce_deps;
      if (m >= slots) reduce_deps.push_back(reduces[m - slots]);  // its staging slot is free
      reduces.push_back(add_step(
          &s, recv_reduce_step(left, static_cast<uint32_t>(m),
                               scratch_at((m % slots) * chunks.chunk_elems()), input_at(in.offset),
                               output_at(in.offset), in.count, false, reduce_deps)));
    }
  }
  return s;
}

// Ring allgather of the BlockSplit blocks of `count` elements in the output: rank r starts
// with block r and ends with all of them.
Schedule group_allgather(int n, int r, size_t count, size_t chunk_elems) {
  Schedule s;
  s.input_count = s.output_count = count;
  const BlockSplit blocks(count, n);
  const ChunkSplit chunks(blocks.max_block(), chunk_elems);
  const int C = chunks.chunks();
  const int right = ring_index(r + 1, n), left = ring_index(r - 1, n);
  std::vector<uint32_t> recvs;
  for (int k = 0; k < n - 1; ++k) {
    const Extent send_block = blocks.block(ring_index(r - k, n));
    const Extent recv_block = blocks.block(ring_index(r - k - 1, n));
    for (int c = 0; c < C; ++c) {
      const size_t m = static_cast<size_t>(k) * C + c;
      const Extent out = chunks.chunk(send_block, c), in = chunks.chunk(recv_block, c);
      std::vector<uint32_t> send_deps;
      if (k > 0) send_deps.push_back(recvs[m - C]);  // forwards what arrived at step k-1
      add_step(&s, send_step(right, static_cast<uint32_t>(m), output_at(out.offset), out.count,
                             send_deps));
      recvs.push_back(add_step(
          &s, recv_step(left, static_cast<uint32_t>(m), output_at(in.offset), in.count, {})));
    }
  }
  return s;
}

// The same two phases by single copy, for a group on one host whose ranks publish their
// buffers (CollectiveArgs::peer_memory): rank r reads block r of every peer's input, chunk
// by chunk, into a staging slot and reduces it into its output; later it writes its final
// block into every peer's output. Each byte moves once instead of twice (into a shared-memory
// cell, out of it), and no rank waits for another: the inputs are there from the start, and
// the peers' blocks r are left alone by their owners (the verifier checks both).
Schedule group_peer_reduce_scatter(int n, int r, size_t count, size_t chunk_elems) {
  Schedule s;
  s.input_count = s.output_count = count;
  const Extent block = BlockSplit(count, n).block(r);
  const ChunkSplit chunks(block.count, chunk_elems);
  const size_t slots = std::min(kStagingSlots, static_cast<size_t>(n - 1) * chunks.chunks());
  s.scratch_count = slots * chunks.chunk_elems();
  std::vector<uint32_t> reduces;
  for (int c = 0; c < chunks.chunks(); ++c) {
    const Extent chunk = chunks.chunk(block, c);
    // Starting with the next rank, so that the ranks do not all read one peer at once.
    for (int k = 1; k < n; ++k) {
      const size_t m = reduces.size();
      const Range slot = scratch_at((m % slots) * chunks.chunk_elems());
      std::vector<uint32_t> read_deps;
      if (m >= slots) read_deps.push_back(reduces[m - slots]);  // its staging slot is free
      const uint32_t read =
          add_step(&s, peer_read_step(ring_index(r + k, n), input_at(chunk.offset), slot,
                                      chunk.count, read_deps));
      std::vector<uint32_t> reduce_deps = {read};
      if (k > 1) reduce_deps.push_back(reduces.back());  // the output holds its partial sum
      reduces.push_back(
          add_step(&s, reduce_step(slot, k == 1 ? input_at(chunk.offset) : output_at(chunk.offset),
                                   output_at(chunk.offset), chunk.count, false, reduce_deps)));
    }
  }
  return s;
}

// Rank r's block of the output, complete, into every peer's output.
Schedule group_peer_allgather(int n, int r, size_t count, size_t chunk_elems) {
  Schedule s;
  s.input_count = s.output_count = count;
  const Extent block = BlockSplit(count, n).block(r);
  const ChunkSplit chunks(block.count, chunk_elems);
  for (int c = 0; c < chunks.chunks(); ++c) {
    const Extent chunk = chunks.chunk(block, c);
    for (int k = 1; k < n; ++k)
      add_step(&s, peer_write_step(ring_index(r + k, n), output_at(chunk.offset),
                                   output_at(chunk.offset), chunk.count, {}));
  }
  return s;
}

// The memory a step touches, with input and output one space when in place.
struct Access {
  int space;
  size_t begin, end;
  bool write;
};

void accesses_of(const Step &step, bool in_place, std::vector<Access> *out) {
  out->clear();
  auto add = [&](Range r, bool write) {
    int space = r.buffer == BufferId::kScratch ? 2 : r.buffer == BufferId::kInput ? 0 : 1;
    if (in_place && space == 1) space = 0;
    out->push_back(Access{space, r.offset, r.offset + step.count, write});
  };
  switch (step.kind) {
    case StepKind::kSend:
      add(step.src, false);
      break;
    case StepKind::kRecv:
      add(step.dst, true);
      break;
    case StepKind::kRecvReduce:
      add(step.tmp, true);
      add(step.src, false);
      add(step.dst, true);
      break;
    case StepKind::kCopy:
      add(step.src, false);
      add(step.dst, true);
      break;
    case StepKind::kReduce:
      add(step.tmp, false);
      add(step.src, false);
      add(step.dst, true);
      break;
    case StepKind::kPeerRead:  // here it only writes its landing area
      add(step.dst, true);
      break;
    case StepKind::kPeerWrite:
      add(step.src, false);
      break;
  }
}

// What the steps appended so far touch in the input and output (scratch is never shared
// between appended schedules: each gets a fresh region), so that a new step finds the earlier
// ones it conflicts with without walking them all (a 4096-rank schedule has thousands of steps
// per rank). Accesses are kept by where they begin, in classes of similar length (powers of
// two): in a class, one that begins more than the class's longest length before a range
// cannot reach it, so a lookup visits little more than what overlaps.
class TouchIndex {
 public:
  void add(const std::vector<Access> &accesses, uint32_t step) {
    for (const Access &a : accesses) {
      if (a.space == 2) continue;
      Class &c = classes_[a.space][length_class(a.end - a.begin)];
      c.by_begin.emplace(a.begin, Touch{a.end, step, a.write});
      c.longest = std::max(c.longest, a.end - a.begin);
    }
  }

  // Appends the earlier steps that overlap one of `mine`, one of the two writing, ascending.
  void conflicts(const std::vector<Access> &mine, std::vector<uint32_t> *out) const {
    const size_t first = out->size();
    for (const Access &x : mine) {
      if (x.space == 2 || x.begin >= x.end) continue;
      for (const auto &entry : classes_[x.space]) {
        const Class &c = entry.second;
        const size_t from = x.begin > c.longest ? x.begin - c.longest : 0;
        for (auto it = c.by_begin.lower_bound(from); it != c.by_begin.end() && it->first < x.end;
             ++it)
          if ((x.write || it->second.write) && x.begin < it->second.end)
            out->push_back(it->second.step);
      }
    }
    std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
    out->erase(std::unique(out->begin() + static_cast<std::ptrdiff_t>(first), out->end()),
               out->end());
  }

 private:
  struct Touch {
    size_t end;
    uint32_t step;
    bool write;
  };
  struct Class {
    std::multimap<size_t, Touch> by_begin;
    size_t longest = 0;
  };
  static int length_class(size_t length) {
    int c = 0;
    while (length > 1) length >>= 1, ++c;
    return c;
  }
  std::map<int, Class> classes_[2];
};

// Walks the whole tree of groups and segments (every rank walks the same one, so that tag
// slots are numbered alike everywhere) and appends the phases this rank takes part in.
class HierBuilder {
 public:
  HierBuilder(const CollectiveArgs &args, Schedule *out, bool emit, const char *leaf_algorithm)
      : args_(args),
        out_(out),
        emit_(emit),
        chunk_elems_(network_chunk_elems(args)),
        leaf_algorithm_(leaf_algorithm) {}

  uint32_t slots_used() const { return next_slot_; }

  // Allreduces `range` of the output among `members` (ascending ranks), grouped by the tiers
  // from `level` on; `src` holds this rank's operand for the range (its input, or its output
  // once a reduce-scatter has put the partial sums there).
  void node(const std::vector<int> &members, size_t level, Extent range, BufferId src) {
    std::vector<std::vector<int>> groups;
    // A tier that puts all these ranks in one group adds nothing here.
    for (; level < args_.tiers.size(); ++level) {
      groups = group_by(members, args_.tiers[level]);
      if (groups.size() > 1) break;
    }
    if (level >= args_.tiers.size()) return leaf(members, range, src);
    const uint32_t rs_slot = next_slot_++, ag_slot = next_slot_++;
    int mine = -1, index = -1;
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].size(); ++i)
        if (groups[g][i] == args_.rank) mine = static_cast<int>(g), index = static_cast<int>(i);
    const bool shared_work = mine >= 0 && groups[mine].size() > 1 && range.count > 0;
    // Only the groups of tiers[0] lie on one host each. Every rank publishes its buffers
    // when any group copies (a rank alone on its host too, or the others would wait for it).
    const bool single_copy = args_.peer_memory && level == 0;
    for (const auto &group : groups)
      if (single_copy && group.size() > 1 && range.count > 0) out_->peer_memory = true;
    if (shared_work) {
      const int n = static_cast<int>(groups[mine].size());
      // The fastest tier's reduce-scatter of a piece waits for the previous piece's.
      const bool gated = level == 0 && emit_;
      const size_t first = out_->steps.size();
      append(single_copy ? group_peer_reduce_scatter(n, index, range.count, chunk_elems_)
                         : group_reduce_scatter(n, index, range.count, chunk_elems_),
             groups[mine], range, src, rs_slot, gated ? piece_gate_ : -1);
      if (gated && out_->steps.size() > first)
        piece_gate_ = static_cast<int64_t>(out_->steps.size()) - 1;
    } else if (mine >= 0) {
      own_copy(range, src);
    }
    // Segments: where any group's block starts, the owners change. Groups of one size cut
    // alike, so each size is split once (thousands of hosts have a few sizes at most).
    std::vector<size_t> sizes;
    for (const auto &group : groups) sizes.push_back(group.size());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::vector<size_t> cuts = {0, range.count};
    for (size_t size : sizes) {
      const BlockSplit blocks(range.count, static_cast<int>(size));
      for (size_t b = 0; b < size; ++b) cuts.push_back(blocks.block(static_cast<int>(b)).offset);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<size_t> owner_index(sizes.size());  // by size: the block holding the cut
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      for (size_t k = 0; k < sizes.size(); ++k)
        owner_index[k] = owner_of(sizes[k], range.count, cuts[i]);
      std::vector<int> owners;
      owners.reserve(groups.size());
      for (const auto &group : groups) {
        const size_t k = static_cast<size_t>(
            std::lower_bound(sizes.begin(), sizes.end(), group.size()) - sizes.begin());
        owners.push_back(group[owner_index[k]]);
      }
      if (!std::is_sorted(owners.begin(), owners.end())) std::sort(owners.begin(), owners.end());
      node(owners, level + 1, Extent{range.offset + cuts[i], cuts[i + 1] - cuts[i]},
           BufferId::kOutput);
    }
    if (shared_work) {
      const int n = static_cast<int>(groups[mine].size());
      append(single_copy ? group_peer_allgather(n, index, range.count, chunk_elems_)
                         : group_allgather(n, index, range.count, chunk_elems_),
             groups[mine], range, BufferId::kOutput, ag_slot);
    }
  }

  // Turns (sub-schedule tag, slot) into the final tags once every slot is numbered.
  void finish_tags(uint32_t slots) {
    for (size_t i = 0; i < out_->steps.size(); ++i)
      out_->steps[i].tag = out_->steps[i].tag * slots + step_slot_[i];
  }

 private:
  // The members by group of `group_of`, groups in order of their first member.
  static std::vector<std::vector<int>> group_by(const std::vector<int> &members,
                                                const std::vector<int> &group_of) {
    // Group ids are small (a host's or rack's index): a table, not a map, when they are.
    int lowest = 0, highest = 0;
    for (int m : members) {
      lowest = std::min(lowest, group_of[m]);
      highest = std::max(highest, group_of[m]);
    }
    std::vector<std::vector<int>> groups;
    if (lowest >= 0 && static_cast<size_t>(highest) <= 4 * group_of.size()) {
      std::vector<int> index(static_cast<size_t>(highest) + 1, -1);
      for (int m : members) {
        int &at = index[static_cast<size_t>(group_of[m])];
        if (at < 0) {
          at = static_cast<int>(groups.size());
          groups.emplace_back();
        }
        groups[static_cast<size_t>(at)].push_back(m);
      }
      return groups;
    }
    std::map<int, size_t> index;  // group id -> position
    for (int m : members) {
      auto it = index.emplace(group_of[m], groups.size()).first;
      if (it->second == groups.size()) groups.emplace_back();
      groups[it->second].push_back(m);
    }
    return groups;
  }

  // Which block of a group of `size` ranks splitting `count` holds element `at`.
  static size_t owner_of(size_t size, size_t count, size_t at) {
    const BlockSplit blocks(count, static_cast<int>(size));
    for (size_t b = size; b-- > 0;)
      if (blocks.block(static_cast<int>(b)).offset <= at) return b;
    return 0;
  }

  // The slowest tier: an allreduce among the owners of one segment, by the algorithm the
  // pieces were priced with when the owners are one per host (HierPlan), else the models'.
  void leaf(const std::vector<int> &members, Extent range, BufferId src) {
    const uint32_t slot = next_slot_++;
    const auto it = std::find(members.begin(), members.end(), args_.rank);
    if (it == members.end()) return;
    if (members.size() < 2 || range.count == 0) return own_copy(range, src);
    CollectiveArgs sub = args_;
    sub.nranks = static_cast<int>(members.size());
    sub.rank = static_cast<int>(it - members.begin());
    sub.count = range.count;
    sub.chunk_elems = chunk_elems_;
    sub.in_place = args_.in_place || src == BufferId::kOutput;
    sub.tiers.clear();
    sub.algorithm.clear();
    if (leaf_algorithm_ && sub.nranks == args_.hosts) sub.algorithm = leaf_algorithm_;
    Schedule schedule;
    build_schedule(sub, &schedule);
    append(schedule, members, range, src, slot);
  }

  // A rank alone in its group carries its operand over to its output itself.
  void own_copy(Extent range, BufferId src) {
    if (!emit_ || src == BufferId::kOutput || args_.in_place || range.count == 0) return;
    Schedule copy;
    copy.input_count = copy.output_count = range.count;
    add_step(&copy, copy_step(input_at(0), output_at(0), range.count, {}));
    append(copy, {args_.rank}, range, src, 0);
  }

  // Appends a schedule written in a group's coordinates: its ranks become `members`, its
  // input `src` and its output the output, both at `range`, its scratch a fresh region. Each
  // step also waits for every earlier step that touches the same memory.
  void append(const Schedule &sub, const std::vector<int> &members, Extent range, BufferId src,
              uint32_t slot, int64_t gate = -1) {
    if (!emit_) return;
    const uint32_t base = static_cast<uint32_t>(out_->steps.size());
    const size_t scratch_base = out_->scratch_count;
    std::vector<Access> mine;
    for (Step step : sub.steps) {
      if (step.peer >= 0) step.peer = members[step.peer];
      for (Range *r : {&step.src, &step.dst, &step.tmp}) {
        if (r->buffer == BufferId::kScratch) {
          r->offset += scratch_base;
        } else {
          r->buffer = r->buffer == BufferId::kInput ? src : BufferId::kOutput;
          r->offset += range.offset;
        }
      }
      for (uint32_t &d : step.deps) d += base;
      if (gate >= 0) step.deps.push_back(static_cast<uint32_t>(gate));
      accesses_of(step, args_.in_place, &mine);
      touched_.conflicts(mine, &step.deps);
      add_step(out_, std::move(step));
      step_slot_.push_back(slot);
    }
    // Indexed once all are in: a schedule's steps are ordered among themselves already.
    for (uint32_t e = base; e < out_->steps.size(); ++e) {
      accesses_of(out_->steps[e], args_.in_place, &mine);
      touched_.add(mine, e);
    }
    out_->scratch_count += sub.scratch_count;
  }

  const CollectiveArgs &args_;
  Schedule *out_;
  const bool emit_;
  const size_t chunk_elems_;
  const char *const leaf_algorithm_;
  uint32_t next_slot_ = 0;
  // The last step of this rank's reduce-scatter of the previous piece in the fastest tier:
  // the next piece's waits for it (an order for the pipeline, not for the data), or the
  // pieces would all share the host's links at once and reach the network together.
  int64_t piece_gate_ = -1;
  std::vector<uint32_t> step_slot_;
  TouchIndex touched_;
};

}  // namespace

void build_hier_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "hier", schedule)) return;
  std::vector<int> everyone(static_cast<size_t>(args.nranks));
  for (int r = 0; r < args.nranks; ++r) everyone[static_cast<size_t>(r)] = r;
  // Pieces: each a whole hier of its own elements (its own tags), the fastest tier's
  // reduce-scatters one after the other (HierBuilder::piece_gate_), so that piece k crosses
  // the network while piece k+1 is reduced inside the hosts and piece k-1 gathered back.
  // Messages of different phases between the same two ranks need different tags: a phase's
  // own tags are interleaved with its slot (tag * slots + slot), slots numbered alike on
  // every rank by a first walk.
  const HierPlan plan = hier_plan(args);
  const int piece_count = plan.pieces;
  const BlockSplit pieces(args.count, piece_count);
  HierBuilder count_slots(args, schedule, false, plan.leaf);
  for (int p = 0; p < piece_count; ++p)
    count_slots.node(everyone, 0, pieces.block(p), BufferId::kInput);
  HierBuilder builder(args, schedule, true, plan.leaf);
  for (int p = 0; p < piece_count; ++p)
    builder.node(everyone, 0, pieces.block(p), BufferId::kInput);
  builder.finish_tags(count_slots.slots_used());
}

}  // namespace ddl

#include "lib/algorithms/hier.h"

#include <algorithm>
#include <limits>
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

namespace {

// One tier's cost model split in two: what does not depend on the bytes (its messages'
// latencies) and what does; and how many messages one rank handles in it.
struct TierCost {
  double latency = 0, bandwidth = 0, messages = 0;
  double total() const { return latency + bandwidth; }
};

// A ring allreduce's model at `bytes`, split (the model at no bytes is the latency part).
TierCost ring_tier(int nranks, double bytes, double chunk, const CostConstants &c) {
  TierCost t;
  t.latency = ring_allreduce_cost(nranks, 0, chunk, c);
  t.bandwidth = ring_allreduce_cost(nranks, bytes, chunk, c) - t.latency;
  t.messages = t.latency / c.alpha;
  return t;
}

// The arguments of one leaf() among the hosts, in the first host's coordinates: each rank's
// block of a piece of `piece_count` elements, allreduced with its peers of the other hosts
// over the network (no tiers left, the network's chunks).
CollectiveArgs among_hosts(const CollectiveArgs &args, size_t piece_count) {
  CollectiveArgs among = args;
  among.nranks = args.hosts;
  among.rank = 0;
  among.count =
      std::max<size_t>(1, piece_count / static_cast<size_t>(fastest_tier_groups(args).largest));
  among.chunk_elems = network_chunk_elems(args);
  among.tiers.clear();
  among.algorithm.clear();
  among.peer_memory = false;
  return among;
}

// The fastest tier's reduce-scatter and allgather of all `args.count` elements: the ring
// model with the local constants. By single copy a byte moves once inside the host, not
// twice (into a cell, out of it), no message is sent, and a rank's reads (writes) of its
// L-1 peers wait for nothing but the peers' arrival: one latency a phase, not L-1 in a chain
// (the address exchange is the reduce-scatter's wait, the closing barrier the allgather's;
// ddl_sim, dgx-h100 16 x 8 at 4 KB: both phases together 4 us, where the ring's model said
// 2 x 7 x 3 us).
TierCost local_tier(const CollectiveArgs &args) {
  const double chunk = static_cast<double>(args.chunk_elems) * static_cast<double>(args.elem_size);
  const int local = fastest_tier_groups(args).largest;
  CostConstants host = args.local;
  if (args.peer_memory) host.beta /= 2;
  TierCost t = ring_tier(local, count_bytes(args), chunk, host);
  if (args.peer_memory) {
    t.messages = 0;
    t.latency = 2 * host.alpha;
  }
  return t;
}

// The allreduces among hosts, in pieces of `piece_count` elements, as leaf() runs them with
// `algorithm`: priced by its own model for all the pieces' bytes (its latency: what one
// piece costs beyond its share of them), and the messages (sends and receives) one rank
// handles in one piece's schedule of it, on the busiest of a few hosts.
// Each message costs the rank its overhead one after the other, whatever the pieces overlap:
// among 512 hosts rhd's 36 per piece kept a GPU cluster's ranks 86 % busy in 16 pieces
// (ddl_sim), where the model's latency terms had counted 9. A host's rails carry its ranks'
// blocks side by side: each rank drives its own NIC (DDL_RAILS), so its L ranks share
// min(rails, L) links. (Priced as a ring whatever leaf() ran, the tier cost 4 ms of
// latencies among 512 hosts where rd takes 40 us, and the models chose flat rd for hier's
// calls at 4 KB-256 KB on dgx-h100, 1.2-2.5x slower in ddl_sim.)
TierCost network_tier(const CollectiveArgs &args, size_t piece_count,
                      const AlgorithmInfo &leaf_algorithm) {
  CollectiveArgs among = among_hosts(args, piece_count);
  TierCost t;
  // A tree's hosts differ (the roots, the inner hosts, the leaves): the busiest of a few.
  for (int rank : {0, 1, among.nranks / 3, among.nranks / 2}) {
    if (rank >= among.nranks) continue;
    Schedule piece;
    among.rank = rank;
    leaf_algorithm.build(among, &piece);
    double messages = 0;
    for (const Step &step : piece.steps) messages += is_message(step.kind) ? 1 : 0;
    t.messages = std::max(t.messages, messages);
  }
  among.rank = 0;
  const int local = fastest_tier_groups(args).largest;
  const int links = rails_for(args, local);
  among.net.beta *= static_cast<double>(local) / links;
  const size_t all_count = std::max<size_t>(1, args.count / static_cast<size_t>(local));
  const double pieces = static_cast<double>(args.count) / static_cast<double>(piece_count);
  if (pieces <= 1) {  // the model at no data is the latency
    t.bandwidth = leaf_algorithm.cost(among);
    among.count = 1;
    t.latency = leaf_algorithm.cost(among);
    t.bandwidth = std::max(0.0, t.bandwidth - t.latency);
    return t;
  }
  // Two points of the model, one piece and all of them, both at the chunk a piece's schedule
  // uses (a tree cuts each half of a piece's block into chunks no larger than that half):
  // what grows with the bytes is the bandwidth; the rest (latencies, a tree's pipeline fill)
  // each piece pays, side by side with the others. (The latency taken at one element and the
  // call's own chunk counted a tree's fill as bandwidth, once per piece: dbtree among 248
  // hosts priced 40 % above what ddl_sim finds at 64 MB in 32 pieces.)
  // The rank's work on its messages is priced apart (message_seconds), so the bandwidth
  // leaves out the models' per-message overheads (a tree's grow with its chunks).
  among.chunk_elems = std::min(among.chunk_elems, std::max<size_t>(1, among.count / 2));
  const double one_piece = leaf_algorithm.cost(among);
  CollectiveArgs bytes_only = among;
  bytes_only.net.overhead = bytes_only.local.overhead = 0;
  const double one_piece_bytes = leaf_algorithm.cost(bytes_only);
  bytes_only.count = all_count;
  const double all_bytes = leaf_algorithm.cost(bytes_only);
  t.bandwidth = std::max(0.0, (all_bytes - one_piece_bytes) * pieces / (pieces - 1));
  t.latency = std::max(0.0, one_piece - t.bandwidth / pieces);
  return t;
}

// The seconds one rank spends on its messages in `pieces` pieces, one after the other
// whatever the pieces overlap: each piece's messages of the host tier (none by single copy)
// and of the network tier, at their overheads.
double message_seconds(const CollectiveArgs &args, const TierCost &local, const TierCost &net,
                       int pieces) {
  return pieces * (local.messages * args.local.overhead + net.messages * args.net.overhead);
}

// In `pieces` pieces whose tiers overlap, the slower tier's bytes set the pace, the faster
// tier adds one piece's bytes (the pipeline's fill and drain) and both their latencies once
// (the pieces' messages are in flight together); unless the rank's own work on its messages
// takes longer than the slower tier's bytes: then that sets the pace. One piece: the tiers
// take turns.
// A rank whose own work on its messages fills more than two thirds of the slower tier's time
// falls behind it: its sends leave late while it posts and completes others (ddl_sim,
// dgx-h100 512 x 8, 64 MB: 8 pieces keep the rank 54 % busy and reach 63.3 % of the bound, 4
// pieces 36 % and 64.8 %; 256 MB: 16 pieces 49 % and 89.5 %, 32 pieces 71 % and 82.7 %). Half
// (the share 2) was too little among 64 hosts: 8 pieces reach 79.7 % at 64 MB against 4's
// 73.6 %, 32 pieces 90.8 % at 256 MB against 16's 89.4 %.
constexpr double kMessageWorkShare = 1.5;

double pipelined_cost(const CollectiveArgs &args, const TierCost &local, const TierCost &net,
                      int pieces) {
  if (pieces <= 1) return local.total() + net.total();
  return std::max(std::max(local.bandwidth, net.bandwidth),
                  kMessageWorkShare * message_seconds(args, local, net, pieces)) +
         std::min(local.bandwidth, net.bandwidth) / pieces + local.latency + net.latency;
}

// The models' choice leaves each rank's block of a piece at least 256 KB, as measured on 2
// emulated hosts x 2 ranks, where the chunk is 64 KB (1 MB in 8 pieces: 9.0 against 8.8 ms
// in 2; 16 MB in 64 pieces, 2 chunks each: 200 against 148 ms in 32). (A floor of 2 network
// chunks a block, 1 MB at 400 Gbit/s, kept the network tier off the rd that the models chose
// for one small piece alone; priced for all the pieces (plan_with_pieces), the network tier
// keeps rhd, and small blocks of a GPU cluster's larger chunks are as fast as the pieces
// priced: dgx-h100 2 x 8 at 16 MB 79.0 -> 82.0 % of the bound, 8 x 8 56.4 -> 62.3 %.)
constexpr size_t kFloorBlockBytes = 256 << 10;

// `pieces` pieces with the network tier's algorithm priced for them: the one whose pipelined
// cost is lowest, not the one the models choose for one piece alone. A piece's blocks are
// small, and alone a small allreduce is latency-bound, where the pieces together are not:
// among 16 hosts the models chose rd for 256 KB blocks, which sends each block 4 times, not
// twice (ddl_sim, dgx-h100 16 x 8, 64 MB in 32 pieces: 43 % of the bound with rd, 57 % with
// rhd). In one piece the tiers take turns and the network tier is one allreduce alone: the
// models' choice (as the flat algorithms are chosen; ddl_sim, ibm-2017-s822lc 64 x 4 at 64 KB:
// rd 49.9 us, what the pieces' pricing chose 72.7).
HierPlan plan_with_pieces(const CollectiveArgs &args, const TierCost &local, int pieces) {
  HierPlan best;
  best.pieces = pieces;
  best.seconds = std::numeric_limits<double>::infinity();
  const size_t piece_count = args.count / static_cast<size_t>(pieces);
  const CollectiveArgs among = among_hosts(args, piece_count);
  if (pieces == 1) {
    const TierCost net = network_tier(args, piece_count, choose_algorithm(among, nullptr));
    best.seconds = pipelined_cost(args, local, net, 1);
    return best;  // leaf: the models' choice for each segment, as for a flat call
  }
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != Collective::kAllreduce || info.build == build_hier_allreduce) continue;
    if (!(info.cost(among) < std::numeric_limits<double>::infinity())) continue;
    const TierCost net = network_tier(args, piece_count, info);
    const double seconds = pipelined_cost(args, local, net, pieces);
    if (seconds < best.seconds * (1 - 1e-9)) {
      best.seconds = seconds;
      best.leaf = info.name;
    }
  }
  return best;
}

HierPlan choose_plan(const CollectiveArgs &args) {
  // Every rank keeps at least one element of every piece.
  const size_t most = std::max<size_t>(1, args.count / std::max(1, args.nranks));
  const int limit = static_cast<int>(std::min<size_t>(kMaxHierPieces, most));
  const bool across = args.hosts > 1 && !args.tiers.empty();
  if (!across) return HierPlan{};
  const TierCost local = local_tier(args);
  if (args.pieces > 0) return plan_with_pieces(args, local, std::min(args.pieces, limit));
  HierPlan best = plan_with_pieces(args, local, 1);
  const size_t block_elems =
      std::max<size_t>(1, kFloorBlockBytes / std::max<size_t>(1, args.elem_size));
  const size_t block_floor = block_elems * static_cast<size_t>(fastest_tier_groups(args).largest);
  const int models_limit =
      static_cast<int>(std::min<size_t>(limit, std::max<size_t>(1, args.count / block_floor)));
  for (int p = 2; p <= models_limit; p *= 2) {
    const HierPlan plan = plan_with_pieces(args, local, p);
    if (plan.seconds < best.seconds) best = plan;
  }
  return best;
}

}  // namespace

namespace {

bool same_constants(const CostConstants &a, const CostConstants &b) {
  return a.alpha == b.alpha && a.overhead == b.overhead && a.beta == b.beta && a.gamma == b.gamma;
}

// Whether two calls get the same plan: every argument the models read but the rank.
bool same_plan_inputs(const CollectiveArgs &a, const CollectiveArgs &b) {
  return a.collective == b.collective && a.nranks == b.nranks && a.count == b.count &&
         a.root == b.root && a.in_place == b.in_place && a.chunk_elems == b.chunk_elems &&
         a.elem_size == b.elem_size && a.algorithm == b.algorithm && a.hosts == b.hosts &&
         a.peer_memory == b.peer_memory && a.layout == b.layout && a.rails == b.rails &&
         a.pieces == b.pieces && same_constants(a.local, b.local) && same_constants(a.net, b.net) &&
         a.tiers == b.tiers;
}

}  // namespace

HierPlan hier_plan(const CollectiveArgs &args) {
  // The last plan is kept per thread: every rank of a projection of thousands asks for the
  // same one, twice (the models' cost, the builder), and pricing it builds a schedule among
  // the hosts per algorithm and piece count (ddl_sim, 512 x 8 at 64 MB: 9.7 s without, 4 s).
  thread_local CollectiveArgs last_args;
  thread_local HierPlan last_plan;
  thread_local bool known = false;
  if (!known || !same_plan_inputs(args, last_args)) {
    last_plan = choose_plan(args);
    last_args = args;
    known = true;
  }
  return last_plan;
}

int hier_pieces(const CollectiveArgs &args) {
  return hier_plan(args).pieces;
}

double hier_allreduce_cost(const CollectiveArgs &args) {
  // With no host holding two ranks, hier is its network tier alone: the flat algorithms.
  if (args.hosts < 2 || args.tiers.empty() || fastest_tier_groups(args).largest < 2)
    return std::numeric_limits<double>::infinity();
  return hier_plan(args).seconds;
}

}  // namespace ddl

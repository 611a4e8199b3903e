#include "lib/algorithms/verifier.h"

#include <algorithm>
#include <bitset>
#include <memory>

#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/walk.h"

namespace ddl {
namespace {

// What an element holds: the contributions of the ranks in `mask`, to element `index` of
// the (global) input.
// Sets of ranks: contributions an element holds, ranks a step has heard from.
using RankSet = std::bitset<kMaxVerifiedRanks>;

RankSet single(int rank) {
  RankSet set;
  set.set(static_cast<size_t>(rank));
  return set;
}

RankSet first_ranks(int n) {
  RankSet set;
  for (int r = 0; r < n; ++r) set.set(static_cast<size_t>(r));
  return set;
}

// "{0, 3, 5}" for messages.
std::string rank_set_string(const RankSet &set) {
  std::string text;
  for (size_t r = 0; r < set.size(); ++r)
    if (set.test(r)) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return "{" + text + "}";
}

struct Sym {
  RankSet mask;
  uint64_t index = 0;
  bool defined = false;
};

bool operator==(const Sym &a, const Sym &b) {
  return a.defined == b.defined && a.mask == b.mask && a.index == b.index;
}

std::string where(int rank, size_t index, const Step &step) {
  return strprintf("rank %d step %zu (%s rank %d, tag %u, count %zu)", rank, index,
                   step_kind_text(step.kind), step.peer, step.tag, step.count);
}

// One rank's memory. In place, input and output are windows of one array.
struct RankMemory {
  std::vector<Sym> input, output, scratch;
  const Schedule *schedule = nullptr;

  // Resolves (buffer, offset) to the element, following in-place aliasing.
  Sym *at(BufferId buffer, size_t offset) {
    const Schedule &s = *schedule;
    if (buffer == BufferId::kScratch) return &scratch[offset];
    if (s.in_place) {
      const bool input_inside = s.input_count <= s.output_count;
      if (buffer == BufferId::kInput)
        return input_inside ? &output[s.in_place_offset + offset] : &input[offset];
      return input_inside ? &output[offset] : &input[s.in_place_offset + offset];
    }
    return buffer == BufferId::kInput ? &input[offset] : &output[offset];
  }
};

size_t buffer_size(const Schedule &s, BufferId buffer) {
  switch (buffer) {
    case BufferId::kInput:
      return s.input_count;
    case BufferId::kOutput:
      return s.output_count;
    case BufferId::kScratch:
      return s.scratch_count;
  }
  return 0;
}

// A memory access of one step, in the in-place-resolved address space.
struct Footprint {
  int space;  // 0 = input/shared array, 1 = output, 2 = scratch
  size_t begin, end;
  bool write;
  uint32_t step;
  int rank;  // whose step: the memory's owner, or a peer reading or writing it
};

// `s` is the schedule of the memory's owner (it says what is in place).
Footprint footprint(const Schedule &s, uint32_t step, Range range, size_t count, bool write,
                    int rank) {
  int space = range.buffer == BufferId::kScratch ? 2 : range.buffer == BufferId::kInput ? 0 : 1;
  size_t begin = range.offset;
  if (s.in_place && space != 2) {
    const bool input_inside = s.input_count <= s.output_count;
    if (range.buffer == BufferId::kInput && input_inside) begin += s.in_place_offset;
    if (range.buffer == BufferId::kOutput && !input_inside) begin += s.in_place_offset;
    space = 0;
  }
  return Footprint{space, begin, begin + count, write, step, rank};
}

// ancestors[i]: a bitset of every step of one schedule that completes before step i starts.
class Ancestors {
 public:
  explicit Ancestors(const Schedule &s) : words_((s.steps.size() + 63) / 64) {
    bits_.assign(s.steps.size() * words_, 0);
    for (size_t i = 0; i < s.steps.size(); ++i)
      for (uint32_t d : s.steps[i].deps) {
        bits_[i * words_ + d / 64] |= 1ull << (d % 64);
        for (size_t w = 0; w < words_; ++w) bits_[i * words_ + w] |= bits_[d * words_ + w];
      }
  }
  bool before(size_t step, size_t of) const {
    return (bits_[of * words_ + step / 64] >> (step % 64)) & 1;
  }

 private:
  size_t words_;
  std::vector<uint64_t> bits_;
};

// Sorts the footprints on one memory and calls found(x, y) for each overlapping pair of
// which one writes, until it returns an error.
template <typename Found>
Status for_each_conflict(std::vector<Footprint> *prints, Found found) {
  std::sort(prints->begin(), prints->end(), [](const Footprint &a, const Footprint &b) {
    return std::tie(a.space, a.begin) < std::tie(b.space, b.begin);
  });
  for (size_t a = 0; a < prints->size(); ++a) {
    for (size_t b = a + 1; b < prints->size(); ++b) {
      const Footprint &x = (*prints)[a], &y = (*prints)[b];
      if (y.space != x.space || y.begin >= x.end) break;
      if ((x.step == y.step && x.rank == y.rank) || !(x.write || y.write)) continue;
      DDL_RETURN_IF_ERROR(found(x, y));
    }
  }
  return Status::Ok();
}

// Structural checks of one rank's schedule, then the race check: conflicting accesses must
// be ordered by (transitive) dependencies.
Status check_structure(int rank, const Schedule &s, std::vector<Footprint> *own) {
  const size_t n = s.steps.size();
  std::vector<Footprint> prints;
  for (size_t i = 0; i < n; ++i) {
    const Step &step = s.steps[i];
    if (is_peer_memory(step.kind) && !s.peer_memory)
      return internal_error("%s: peer memory in a schedule that does not say so",
                            where(rank, i, step).c_str());
    auto use = [&](Range r, bool write) -> Status {
      if (r.offset + step.count > buffer_size(s, r.buffer))
        return internal_error("%s: range [%zu, %zu) outside its buffer of %zu",
                              where(rank, i, step).c_str(), r.offset, r.offset + step.count,
                              buffer_size(s, r.buffer));
      if (write && r.buffer == BufferId::kInput && !s.in_place)
        return internal_error("%s: writes the input of an out-of-place collective",
                              where(rank, i, step).c_str());
      if (step.count > 0)
        prints.push_back(footprint(s, static_cast<uint32_t>(i), r, step.count, write, rank));
      return Status::Ok();
    };
    switch (step.kind) {
      case StepKind::kSend:
        DDL_RETURN_IF_ERROR(use(step.src, false));
        break;
      case StepKind::kRecv:
        DDL_RETURN_IF_ERROR(use(step.dst, true));
        break;
      case StepKind::kCopy:
        DDL_RETURN_IF_ERROR(use(step.src, false));
        DDL_RETURN_IF_ERROR(use(step.dst, true));
        break;
      case StepKind::kReduce:
        DDL_RETURN_IF_ERROR(use(step.tmp, false));
        DDL_RETURN_IF_ERROR(use(step.src, false));
        DDL_RETURN_IF_ERROR(use(step.dst, true));
        break;
      case StepKind::kRecvReduce:
        DDL_RETURN_IF_ERROR(use(step.tmp, true));
        DDL_RETURN_IF_ERROR(use(step.src, false));
        DDL_RETURN_IF_ERROR(use(step.dst, true));
        break;
      case StepKind::kPeerRead:  // the peer's side: check_peer_memory
        DDL_RETURN_IF_ERROR(use(step.dst, true));
        break;
      case StepKind::kPeerWrite:
        DDL_RETURN_IF_ERROR(use(step.src, false));
        break;
    }
  }
  if (s.peer_memory) *own = prints;  // for check_peer_memory
  const Ancestors ancestors(s);
  return for_each_conflict(&prints, [&](const Footprint &x, const Footprint &y) {
    const uint32_t early = std::min(x.step, y.step), late = std::max(x.step, y.step);
    if (ancestors.before(early, late)) return Status::Ok();
    return internal_error("%s and step %u touch overlapping memory without an order",
                          where(rank, late, s.steps[late]).c_str(), early);
  });
}

// Peers' reads and writes of a rank's memory: nothing but the call's end orders them with
// what that rank or other peers do there, so each range a peer touches must be left alone
// by everyone else (its owner included) while the call runs, and the peer's own accesses to
// it must be ordered by its dependencies. `own[r]`: rank r's footprints on its own memory
// (check_structure keeps them for schedules with peer memory).
Status check_peer_memory(const std::vector<Schedule> &by_rank,
                         const std::vector<std::vector<Footprint>> &own) {
  const int n = static_cast<int>(by_rank.size());
  // Ranks publish their buffers around the plan, or not, all alike.
  for (int r = 0; r < n; ++r)
    if (by_rank[r].peer_memory != by_rank[0].peer_memory)
      return internal_error("rank %d's schedule %s peer memory, rank 0's %s", r,
                            by_rank[r].peer_memory ? "uses" : "does not use",
                            by_rank[0].peer_memory ? "does" : "does not");
  if (n == 0 || !by_rank[0].peer_memory) return Status::Ok();
  std::vector<std::vector<Footprint>> on(own);  // footprints on rank r's memory
  for (int r = 0; r < n; ++r) {
    const Schedule &s = by_rank[r];
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step &step = s.steps[i];
      if (!is_peer_memory(step.kind)) continue;
      const bool write = step.kind == StepKind::kPeerWrite;
      const Range theirs = write ? step.dst : step.src;
      const BufferId expected = write ? BufferId::kOutput : BufferId::kInput;
      const Schedule &peer = by_rank[step.peer];
      if (theirs.buffer != expected || theirs.offset + step.count > buffer_size(peer, expected))
        return internal_error("%s: reaches outside rank %d's %s", where(r, i, step).c_str(),
                              step.peer, write ? "output" : "input");
      if (step.count > 0)
        on[step.peer].push_back(
            footprint(peer, static_cast<uint32_t>(i), theirs, step.count, write, r));
    }
  }
  std::vector<std::unique_ptr<Ancestors>> orders(n);  // built when first needed
  for (int owner = 0; owner < n; ++owner) {
    DDL_RETURN_IF_ERROR(
        for_each_conflict(&on[owner], [&](const Footprint &x, const Footprint &y) -> Status {
          if (x.rank == owner && y.rank == owner) return Status::Ok();  // check_structure's
          if (x.rank == y.rank) {
            auto &order = orders[x.rank];
            if (!order) order.reset(new Ancestors(by_rank[x.rank]));
            const uint32_t early = std::min(x.step, y.step), late = std::max(x.step, y.step);
            if (order->before(early, late)) return Status::Ok();
          }
          return internal_error(
              "%s and rank %d step %u touch rank %d's memory [%zu, %zu) without an order",
              where(x.rank, x.step, by_rank[x.rank].steps[x.step]).c_str(), y.rank, y.step, owner,
              std::max(x.begin, y.begin), std::min(x.end, y.end));
        }));
  }
  return Status::Ok();
}

// The ranks whose terms complete rank `rank`'s reduction: all, but for the prefix reductions.
RankSet complete_set(const CollectiveArgs &args, int rank) {
  if (args.collective == Collective::kScan) return first_ranks(rank + 1);
  if (args.collective == Collective::kExscan) return first_ranks(rank);
  return first_ranks(args.nranks);
}

// Sets each rank's initial memory and returns what its output must hold at the end.
// `all_args[r]` is rank r's view of the call (the v forms' counts differ by rank).
// `layouts[r]`: layout_of(all_args[r]) where the collective has blocks, else null.
void initial_state(const std::vector<CollectiveArgs> &all_args,
                   const std::vector<std::shared_ptr<const BlockLayout>> &layouts, int rank,
                   RankMemory *mem, std::vector<Sym> *expected) {
  const CollectiveArgs &args = all_args[rank];
  const Schedule &s = *mem->schedule;
  const RankSet all = first_ranks(args.nranks);
  const RankSet me = single(rank);
  mem->input.assign(s.input_count, Sym());
  mem->output.assign(s.output_count, Sym());
  mem->scratch.assign(s.scratch_count, Sym());
  expected->assign(s.output_count, Sym());
  if (args.collective == Collective::kBroadcast) {
    for (size_t i = 0; i < s.output_count; ++i) {
      if (rank == args.root) *mem->at(BufferId::kOutput, i) = Sym{me, i, true};
      (*expected)[i] = Sym{single(args.root), i, true};
    }
    return;
  }
  const size_t input_base = args.collective == Collective::kAllgather ? rank * args.count : 0;
  for (size_t i = 0; i < s.input_count; ++i)
    *mem->at(BufferId::kInput, i) = Sym{me, input_base + i, true};
  // Element k of the block `from` sends to this rank lands at `at`: it is input element
  // `index` + k of rank `from`.
  auto expect_block = [&](int from, size_t at, size_t index, size_t count) {
    for (size_t k = 0; k < count; ++k) (*expected)[at + k] = Sym{single(from), index + k, true};
  };
  const BlockLayout *layout = layouts[rank].get();
  // What no block covers (gaps between displacements) must be left as it was.
  if (layout)
    for (size_t i = 0; i < s.output_count; ++i) (*expected)[i] = *mem->at(BufferId::kOutput, i);
  switch (args.collective) {
    case Collective::kAlltoall:
    case Collective::kAlltoallv:
      for (int from = 0; from < args.nranks; ++from)
        // In place (MPI_IN_PLACE) a rank sends from where it receives.
        expect_block(from, layout->recv_displs[from],
                     (all_args[from].in_place ? layouts[from]->recv_displs
                                              : layouts[from]->send_displs)[rank],
                     layout->recv_counts[from]);
      return;
    case Collective::kGather:
    case Collective::kGatherv:
    case Collective::kAllgatherv:
      if (rank != args.root && args.collective != Collective::kAllgatherv) return;
      for (int from = 0; from < args.nranks; ++from)
        expect_block(from, layout->recv_displs[from], 0, layout->recv_counts[from]);
      return;
    case Collective::kScatter:
    case Collective::kScatterv:
      expect_block(args.root, 0, layouts[args.root]->send_displs[rank], args.count);
      return;
    case Collective::kReduce:
      if (rank != args.root) return;
      for (size_t i = 0; i < s.output_count; ++i) (*expected)[i] = Sym{all, i, true};
      return;
    case Collective::kReduceScatterv: {
      const size_t from = BlockLayout::at(layout->send_counts, layout->send_displs, rank);
      for (size_t i = 0; i < s.output_count; ++i) (*expected)[i] = Sym{all, from + i, true};
      return;
    }
    case Collective::kScan:
    case Collective::kExscan:
      // An exscan leaves rank 0's output as it was (MPI: undefined).
      for (size_t i = 0; i < s.output_count; ++i)
        (*expected)[i] = rank == 0 && args.collective == Collective::kExscan
                             ? *mem->at(BufferId::kOutput, i)
                             : Sym{complete_set(args, rank), i, true};
      return;
    default:
      break;
  }
  for (size_t i = 0; i < s.output_count; ++i) {
    switch (args.collective) {
      case Collective::kAllreduce:
        (*expected)[i] = Sym{all, i, true};
        break;
      case Collective::kReduceScatter:
        (*expected)[i] = Sym{all, rank * args.count + i, true};
        break;
      case Collective::kAllgather:
        (*expected)[i] = Sym{single(static_cast<int>(i / args.count)), i, true};
        break;
      default:
        break;
    }
  }
}

// Applies dst = tmp (op) src for one element, checking that the contributions line up.
Status combine(const Sym &a, const Sym &b, bool final_reduce, const RankSet &complete, Sym *out,
               const std::string &context, size_t element) {
  if (!a.defined || !b.defined)
    return internal_error("%s: element %zu reduces an undefined value", context.c_str(), element);
  if (a.index != b.index)
    return internal_error("%s: element %zu combines input elements %llu and %llu", context.c_str(),
                          element, static_cast<unsigned long long>(a.index),
                          static_cast<unsigned long long>(b.index));
  if ((a.mask & b.mask).any())
    return internal_error("%s: element %zu counts ranks %s twice", context.c_str(), element,
                          rank_set_string(a.mask & b.mask).c_str());
  *out = Sym{a.mask | b.mask, a.index, true};
  if (final_reduce != (out->mask == complete))
    return internal_error("%s: element %zu: final_reduce is %s but the element %s complete",
                          context.c_str(), element, final_reduce ? "set" : "not set",
                          out->mask == complete ? "is" : "is not");
  return Status::Ok();
}

}  // namespace

Status verify_schedules(const CollectiveArgs &args, const std::vector<Schedule> &by_rank) {
  std::vector<CollectiveArgs> all_args(by_rank.size(), args);
  for (size_t r = 0; r < all_args.size(); ++r) all_args[r].rank = static_cast<int>(r);
  return verify_schedules(all_args, by_rank);
}

Status verify_schedules(const std::vector<CollectiveArgs> &all_args,
                        const std::vector<Schedule> &by_rank) {
  if (all_args.empty()) return invalid_argument("the verifier needs at least one rank");
  const CollectiveArgs &args = all_args[0];
  const int n = args.nranks;
  if (n < 1 || n > kMaxVerifiedRanks || static_cast<int>(by_rank.size()) != n)
    return invalid_argument("the verifier handles 1..%d ranks, one schedule each",
                            kMaxVerifiedRanks);
  const RankSet all = first_ranks(n);
  std::vector<RankMemory> mem(n);
  std::vector<std::vector<Sym>> expected(n);
  std::vector<std::vector<RankSet>> knows(n);  // per step: ranks heard from when it finished
  std::vector<std::vector<Footprint>> own(n);
  std::vector<std::shared_ptr<const BlockLayout>> layouts(n);
  const Collective c = args.collective;
  const bool blocks = c == Collective::kAlltoall || c == Collective::kAlltoallv ||
                      c == Collective::kGather || c == Collective::kGatherv ||
                      c == Collective::kScatter || c == Collective::kScatterv ||
                      c == Collective::kAllgatherv || c == Collective::kReduceScatterv;
  const StepName name = [&](int r, uint32_t i) { return where(r, i, by_rank[r].steps[i]); };
  ScheduleGraph graph;
  DDL_RETURN_IF_ERROR(graph.build(by_rank, name));
  for (int r = 0; r < n && blocks; ++r) layouts[r] = layout_of(all_args[r]);
  for (int r = 0; r < n; ++r) {
    DDL_RETURN_IF_ERROR(check_structure(r, by_rank[r], &own[r]));
    mem[r].schedule = &by_rank[r];
    initial_state(all_args, layouts, r, &mem[r], &expected[r]);
    knows[r].assign(by_rank[r].steps.size(), RankSet());
  }
  DDL_RETURN_IF_ERROR(check_peer_memory(by_rank, own));
  const bool reducing = reduces(args.collective);
  std::vector<RankSet> complete(n);
  for (int r = 0; r < n; ++r) complete[r] = complete_set(args, r);
  // What a step has heard of when it runs: its own rank and what its dependencies heard.
  auto heard = [&](int r, uint32_t i) {
    RankSet know = single(r);
    for (uint32_t d : by_rank[r].steps[i].deps) know |= knows[r][d];
    return know;
  };
  auto finish = [&](int r, uint32_t i, const RankSet &know) -> Status {
    if (!reducing && by_rank[r].steps[i].final_reduce)
      return internal_error("%s: final_reduce in a collective that does not reduce",
                            name(r, i).c_str());
    knows[r][i] = know;
    return Status::Ok();
  };
  StepVisitor visit;
  visit.local = [&](int r, uint32_t i) -> Status {
    const Step &step = by_rank[r].steps[i];
    const std::string context = name(r, i);
    if (step.kind == StepKind::kReduce) {
      for (size_t e = 0; e < step.count; ++e) {
        Sym out;
        DDL_RETURN_IF_ERROR(combine(*mem[r].at(step.tmp.buffer, step.tmp.offset + e),
                                    *mem[r].at(step.src.buffer, step.src.offset + e),
                                    step.final_reduce, complete[r], &out, context, e));
        *mem[r].at(step.dst.buffer, step.dst.offset + e) = out;
      }
    } else {  // a copy: here, from a peer, or into a peer
      RankMemory &from = step.kind == StepKind::kPeerRead ? mem[step.peer] : mem[r];
      RankMemory &into = step.kind == StepKind::kPeerWrite ? mem[step.peer] : mem[r];
      for (size_t e = 0; e < step.count; ++e) {
        const Sym v = *from.at(step.src.buffer, step.src.offset + e);
        if (!v.defined)
          return internal_error("%s: copies undefined element %zu", context.c_str(), e);
        *into.at(step.dst.buffer, step.dst.offset + e) = v;
      }
    }
    return finish(r, i, heard(r, i));
  };
  visit.message = [&](int from, uint32_t send, int to, uint32_t receive) -> Status {
    const Step &out = by_rank[from].steps[send], &in = by_rank[to].steps[receive];
    const RankSet sender_knows = heard(from, send);
    DDL_RETURN_IF_ERROR(finish(from, send, sender_knows));
    const std::string context = name(to, receive);
    for (size_t e = 0; e < in.count; ++e) {
      const Sym v = *mem[from].at(out.src.buffer, out.src.offset + e);
      if (in.kind == StepKind::kRecv) {
        *mem[to].at(in.dst.buffer, in.dst.offset + e) = v;
        continue;
      }
      *mem[to].at(in.tmp.buffer, in.tmp.offset + e) = v;
      Sym sum;
      DDL_RETURN_IF_ERROR(combine(v, *mem[to].at(in.src.buffer, in.src.offset + e), in.final_reduce,
                                  complete[to], &sum, context, e));
      *mem[to].at(in.dst.buffer, in.dst.offset + e) = sum;
    }
    return finish(to, receive, heard(to, receive) | sender_knows);
  };
  DDL_RETURN_IF_ERROR(walk_schedules(by_rank, graph, name, visit));
  for (int r = 0; r < n; ++r) {
    RankSet know = single(r);
    for (const RankSet &step_knows : knows[r]) know |= step_knows;
    if (args.collective == Collective::kBarrier && know != all)
      return internal_error("rank %d leaves the barrier without hearing from ranks %s", r,
                            rank_set_string(all & ~know).c_str());
    for (size_t e = 0; e < expected[r].size(); ++e) {
      const Sym got = *mem[r].at(BufferId::kOutput, e);
      if (!(got == expected[r][e]))
        return internal_error(
            "rank %d: output element %zu holds ranks %s of index %llu%s; expected ranks "
            "%s of index %llu",
            r, e, rank_set_string(got.mask).c_str(), static_cast<unsigned long long>(got.index),
            got.defined ? "" : " (undefined)", rank_set_string(expected[r][e].mask).c_str(),
            static_cast<unsigned long long>(expected[r][e].index));
    }
  }
  return Status::Ok();
}

Status verify_collective(const CollectiveArgs &args) {
  std::vector<CollectiveArgs> all_args(args.nranks, args);
  for (int r = 0; r < args.nranks; ++r) all_args[r].rank = r;
  std::vector<Schedule> by_rank;
  DDL_RETURN_IF_ERROR(build_every_schedule(args, &by_rank));
  return verify_schedules(all_args, by_rank);
}

Status verify_collective(const std::vector<CollectiveArgs> &all_args) {
  std::vector<Schedule> by_rank(all_args.size());
  for (size_t r = 0; r < all_args.size(); ++r)
    DDL_RETURN_IF_ERROR(build_schedule(all_args[r], &by_rank[r]));
  return verify_schedules(all_args, by_rank);
}

}  // namespace ddl

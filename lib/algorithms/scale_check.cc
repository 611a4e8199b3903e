#include "lib/algorithms/scale_check.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/walk.h"

namespace ddl {
namespace {

// An element that holds nothing yet. Contributions are odd, sums of them almost never 0.
constexpr uint64_t kUndefined = 0;

uint64_t contribution(int rank, uint64_t index) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ index ^ 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (x ^ (x >> 31)) | 1;
}

struct Memory {
  std::vector<uint64_t> input, output, scratch;
  std::vector<uint64_t> &of(BufferId id) {
    return id == BufferId::kInput ? input : id == BufferId::kOutput ? output : scratch;
  }
};

const char *buffer_name(BufferId id) {
  return id == BufferId::kInput ? "input" : id == BufferId::kOutput ? "output" : "scratch";
}

class ScaleCheck {
 public:
  ScaleCheck(const CollectiveArgs &args, std::vector<Schedule> by_rank)
      : args_(args), n_(args.nranks), schedules_(std::move(by_rank)), memory_(schedules_.size()) {}

  Status run() {
    const StepName name = [this](int r, uint32_t i) { return where(r, i); };
    ScheduleGraph graph;
    DDL_RETURN_IF_ERROR(graph.build(schedules_, name));
    for (int r = 0; r < n_; ++r) initial_memory(r);
    StepVisitor visit;
    visit.local = [this](int r, uint32_t i) { return local(r, i); };
    visit.message = [this](int from, uint32_t send, int to, uint32_t receive) {
      return transfer(from, send, to, receive);
    };
    DDL_RETURN_IF_ERROR(walk_schedules(schedules_, graph, name, visit));
    return check_outputs();
  }

 private:
  std::string where(int r, uint32_t i) const {
    const Step &s = schedules_[r].steps[i];
    return strprintf("%s %s, %d ranks: rank %d step %u (peer %d tag %u count %zu)",
                     collective_name(args_.collective), schedules_[r].algorithm.c_str(), n_, r, i,
                     s.peer, s.tag, s.count);
  }

  void initial_memory(int r) {
    const Schedule &s = schedules_[r];
    Memory &m = memory_[r];
    m.input.assign(s.input_count, kUndefined);
    m.output.assign(s.output_count, kUndefined);
    m.scratch.assign(s.scratch_count, kUndefined);
    if (args_.collective == Collective::kBroadcast) {
      if (r == args_.root)
        for (size_t i = 0; i < s.output_count; ++i) m.output[i] = contribution(r, i);
      return;
    }
    const size_t base = args_.collective == Collective::kAllgather ? r * args_.count : 0;
    for (size_t i = 0; i < s.input_count; ++i) m.input[i] = contribution(r, base + i);
  }

  // The elements a range names, checked against its buffer (`owner`'s, for peer memory).
  Status span(int owner, Range range, size_t count, int r, uint32_t i, uint64_t **out) {
    std::vector<uint64_t> &buffer = memory_[owner].of(range.buffer);
    if (range.offset > buffer.size() || count > buffer.size() - range.offset)
      return internal_error("%s: %s range %zu..%zu of rank %d outside its %zu elements",
                            where(r, i).c_str(), buffer_name(range.buffer), range.offset,
                            range.offset + count, owner, buffer.size());
    *out = buffer.data() + range.offset;
    return Status::Ok();
  }

  // dst = a + b, elementwise; both operands must hold something.
  Status add(uint64_t *dst, const uint64_t *a, const uint64_t *b, size_t count, int r, uint32_t i) {
    for (size_t k = 0; k < count; ++k) {
      if (a[k] == kUndefined || b[k] == kUndefined)
        return internal_error("%s reduces undefined element %zu", where(r, i).c_str(), k);
      dst[k] = a[k] + b[k];
    }
    return Status::Ok();
  }

  // A step that is not a message: a copy, a reduction, a peer copy.
  Status local(int r, uint32_t i) {
    const Step &s = schedules_[r].steps[i];
    uint64_t *src = nullptr, *dst = nullptr, *tmp = nullptr;
    switch (s.kind) {
      case StepKind::kSend:
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        return internal_error("%s: a message walked as a local step", where(r, i).c_str());
      case StepKind::kCopy:
        DDL_RETURN_IF_ERROR(span(r, s.src, s.count, r, i, &src));
        DDL_RETURN_IF_ERROR(span(r, s.dst, s.count, r, i, &dst));
        std::copy(src, src + s.count, dst);
        break;
      case StepKind::kReduce:
        DDL_RETURN_IF_ERROR(span(r, s.src, s.count, r, i, &src));
        DDL_RETURN_IF_ERROR(span(r, s.tmp, s.count, r, i, &tmp));
        DDL_RETURN_IF_ERROR(span(r, s.dst, s.count, r, i, &dst));
        DDL_RETURN_IF_ERROR(add(dst, tmp, src, s.count, r, i));
        break;
      case StepKind::kPeerRead:
        DDL_RETURN_IF_ERROR(
            span(s.peer, Range{BufferId::kInput, s.src.offset}, s.count, r, i, &src));
        DDL_RETURN_IF_ERROR(span(r, s.dst, s.count, r, i, &dst));
        std::copy(src, src + s.count, dst);
        break;
      case StepKind::kPeerWrite:
        DDL_RETURN_IF_ERROR(span(r, s.src, s.count, r, i, &src));
        DDL_RETURN_IF_ERROR(
            span(s.peer, Range{BufferId::kOutput, s.dst.offset}, s.count, r, i, &dst));
        std::copy(src, src + s.count, dst);
        break;
    }
    return Status::Ok();
  }

  // A message, once its send and its receive are both ready (the graph matched their sizes).
  Status transfer(int from, uint32_t send, int to, uint32_t receive) {
    const Step &s = schedules_[from].steps[send], &t = schedules_[to].steps[receive];
    uint64_t *src = nullptr, *dst = nullptr;
    DDL_RETURN_IF_ERROR(span(from, s.src, s.count, from, send, &src));
    if (t.kind == StepKind::kRecv) {
      DDL_RETURN_IF_ERROR(span(to, t.dst, t.count, to, receive, &dst));
      std::copy(src, src + s.count, dst);
    } else {
      uint64_t *tmp = nullptr, *operand = nullptr;
      DDL_RETURN_IF_ERROR(span(to, t.tmp, t.count, to, receive, &tmp));
      DDL_RETURN_IF_ERROR(span(to, t.src, t.count, to, receive, &operand));
      DDL_RETURN_IF_ERROR(span(to, t.dst, t.count, to, receive, &dst));
      std::copy(src, src + s.count, tmp);
      DDL_RETURN_IF_ERROR(add(dst, tmp, operand, t.count, to, receive));
    }
    return Status::Ok();
  }

  Status check_outputs() {
    const size_t count = args_.count;
    const Collective c = args_.collective;
    // Sums of every rank's contribution per input index, for the reducing collectives.
    std::vector<uint64_t> sums;
    if (reduces(c)) {
      sums.assign(c == Collective::kReduceScatter ? count * n_ : count, 0);
      for (int r = 0; r < n_; ++r)
        for (size_t k = 0; k < sums.size(); ++k) sums[k] += contribution(r, k);
    }
    // The prefix sums of ranks 0..r-1 as r goes up (scan, exscan).
    std::vector<uint64_t> before(is_scan(c) ? count : 0, 0);
    for (int r = 0; r < n_; ++r) {
      const std::vector<uint64_t> &out = memory_[r].output;
      auto expect = [&](size_t at, uint64_t want, const char *what) -> Status {
        if (at < out.size() && out[at] == want) return Status::Ok();
        return internal_error("%s %s, %d ranks: rank %d's output element %zu is not %s",
                              collective_name(c), schedules_[r].algorithm.c_str(), n_, r, at, what);
      };
      for (size_t k = 0; k < out.size(); ++k) {
        Status s = Status::Ok();
        switch (c) {
          case Collective::kAllreduce:
            s = expect(k, sums[k], "every rank's sum");
            break;
          case Collective::kReduce:
            if (r == args_.root) s = expect(k, sums[k], "every rank's sum");
            break;
          case Collective::kReduceScatter:
            s = expect(k, sums[r * count + k], "every rank's sum of its block");
            break;
          case Collective::kAllgather:
            s = expect(k, contribution(static_cast<int>(k / count), k), "its owner's element");
            break;
          case Collective::kBroadcast:
            s = expect(k, contribution(args_.root, k), "the root's element");
            break;
          case Collective::kAlltoall:  // block j from rank j: its element r * count + k % count
            s = expect(k, contribution(static_cast<int>(k / count), r * count + k % count),
                       "the sender's element for this rank");
            break;
          case Collective::kGather:
            if (r == args_.root)
              s = expect(k, contribution(static_cast<int>(k / count), k % count),
                         "the sender's element");
            break;
          case Collective::kScatter:
            s = expect(k, contribution(args_.root, r * count + k), "the root's element for it");
            break;
          case Collective::kScan:
            s = expect(k, before[k] + contribution(r, k), "the sum of ranks 0..r");
            break;
          case Collective::kExscan:
            s = r == 0 ? expect(k, kUndefined, "left as it was (rank 0 of an exscan)")
                       : expect(k, before[k], "the sum of ranks 0..r-1");
            break;
          default:
            break;
        }
        if (!s.ok()) return s;
      }
      for (size_t k = 0; k < before.size(); ++k) before[k] += contribution(r, k);
    }
    return Status::Ok();
  }

  const CollectiveArgs &args_;
  const int n_;
  std::vector<Schedule> schedules_;
  std::vector<Memory> memory_;
};

}  // namespace

Status check_schedules_at_scale(const CollectiveArgs &args, std::vector<Schedule> by_rank) {
  if (args.in_place || per_peer_counts(args.collective) || is_point_to_point(args.collective))
    return invalid_argument("the scale check takes out-of-place calls with one count");
  if (by_rank.size() != static_cast<size_t>(args.nranks))
    return invalid_argument("%zu schedules for %d ranks", by_rank.size(), args.nranks);
  return ScaleCheck(args, std::move(by_rank)).run();
}

Status check_schedules_at_scale(const CollectiveArgs &args) {
  std::vector<Schedule> by_rank;
  DDL_RETURN_IF_ERROR(build_every_schedule(args, &by_rank));
  return check_schedules_at_scale(args, std::move(by_rank));
}

}  // namespace ddl

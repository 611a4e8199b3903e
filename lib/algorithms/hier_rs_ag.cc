#include "lib/algorithms/hier_rs_ag.h"

#include <algorithm>
#include <limits>

#include "lib/algorithms/hier.h"
#include "lib/algorithms/hier_two_level.h"

namespace ddl {
namespace {

// The same call as one of its two halves: `collective` over blocks of count / nranks.
CollectiveArgs half_args(const CollectiveArgs &args, Collective collective) {
  CollectiveArgs half = args;
  half.collective = collective;
  half.count = args.count / static_cast<size_t>(args.nranks);
  half.algorithm.clear();
  half.pieces = 0;
  // The allgather's input is this rank's block of the output, where the reduce-scatter left
  // it: an allgather in place.
  if (collective == Collective::kAllgather) half.in_place = true;
  return half;
}

// Where the models consider it: from 16 hosts (hier's pieces pay their network rounds
// piece by piece there; among fewer hosts they overlap well and the halves' model, one
// latency per tier, is too hopeful: ddl_sim --check-models, dgx-h100 2 x 8 at 64 MB-1 GB
// 7 % slower than hier, emulated-1g 4 x 2 at 8-32 MB 8-10 %, 8 x 2 50 % slower than the
// ring), and from 4 MB (below, the two halves' rounds cost more latencies than hier's one
// allreduce: dgx-h100 16 x 8 at 4-256 KB 70 us against hier's 30-34).
constexpr int kMinHosts = 16;
constexpr double kMinBytes = 4.0 * 1024 * 1024;

bool applies(const CollectiveArgs &args) {
  return args.nranks > 1 && args.hosts > 1 && !args.tiers.empty() &&
         args.count % static_cast<size_t>(args.nranks) == 0 && args.count > 0;
}

// The form of a half its model prices lower, built.
void build_half(const CollectiveArgs &half, Schedule *schedule) {
  bool bruck = false;
  hier_overlapped_cost(half, &bruck);
  if (half.collective == Collective::kAllgather)
    (bruck ? build_hier_bruck_allgather : build_hier_allgather)(half, schedule);
  else
    (bruck ? build_hier_bruck_reduce_scatter : build_hier_reduce_scatter)(half, schedule);
}

// Message tags of the allgather start here, above any the reduce-scatter uses.
constexpr uint32_t kGatherTagBase = (kMaxStepTag + 1) / 2;

// Appends `half`'s steps to `out`: its input and output moved to `input` and `output`, its
// scratch after out's, its tags past `tag_base`, and its steps without dependencies made to
// wait for `after`.
void append_half(const Schedule &half, Range input, Range output, uint32_t tag_base,
                 const std::vector<uint32_t> &after, Schedule *out) {
  const uint32_t base = static_cast<uint32_t>(out->steps.size());
  const size_t scratch = out->scratch_count;
  for (Step step : half.steps) {
    for (Range *r : {&step.src, &step.dst, &step.tmp}) {
      if (r->buffer == BufferId::kScratch) {
        r->offset += scratch;
        continue;
      }
      // A peer's buffers (the source of a peer read, the target of a peer write) are the
      // whole call's on every rank: only this rank's own ranges move.
      const bool peers = (step.kind == StepKind::kPeerRead && r == &step.src) ||
                         (step.kind == StepKind::kPeerWrite && r == &step.dst);
      if (peers) continue;
      const Range to = r->buffer == BufferId::kInput ? input : output;
      r->buffer = to.buffer;
      r->offset += to.offset;
    }
    if (is_message(step.kind)) {
      const uint64_t tag = static_cast<uint64_t>(step.tag) + tag_base;
      // Past the transport's range: the plan fails with advice (make_comm_plan).
      step.tag =
          tag > kMaxStepTag ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(tag);
    }
    for (uint32_t &d : step.deps) d += base;
    if (step.deps.empty()) step.deps = after;
    add_step(out, std::move(step));
  }
  out->scratch_count += half.scratch_count;
  out->peer_memory = out->peer_memory || half.peer_memory;
}

}  // namespace

void build_hier_rs_ag_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!applies(args)) return build_hier_allreduce(args, schedule);  // forced where it cannot
  if (!start_allreduce_schedule(args, "hier_rs_ag", schedule)) return;
  Schedule reduce_scatter, allgather;
  build_half(half_args(args, Collective::kReduceScatter), &reduce_scatter);
  build_half(half_args(args, Collective::kAllgather), &allgather);
  // The reduce-scatter's tags must stay below the allgather's.
  for (const Step &step : reduce_scatter.steps)
    if (is_message(step.kind) && step.tag >= kGatherTagBase) {
      schedule->steps.clear();
      return build_hier_allreduce(args, schedule);
    }
  const size_t mine =
      args.count / static_cast<size_t>(args.nranks) * static_cast<size_t>(args.rank);
  append_half(reduce_scatter, input_at(0), output_at(mine), 0, {}, schedule);
  // The reduce-scatter's last steps (those no other waits for), joined in one empty step
  // that the allgather's first steps wait for (each waiting for them all made 512 hosts x 8
  // a simulation of 3 GB).
  std::vector<bool> waited_for(schedule->steps.size(), false);
  for (const Step &step : schedule->steps)
    for (uint32_t d : step.deps) waited_for[d] = true;
  std::vector<uint32_t> last;
  for (uint32_t s = 0; s < schedule->steps.size(); ++s)
    if (!waited_for[s]) last.push_back(s);
  const uint32_t joined = add_step(schedule, copy_step(output_at(mine), output_at(mine), 0, last));
  append_half(allgather, output_at(mine), output_at(0), kGatherTagBase, {joined}, schedule);
}

double hier_rs_ag_allreduce_cost(const CollectiveArgs &args) {
  const double bytes = static_cast<double>(args.count) * static_cast<double>(args.elem_size);
  if (!applies(args) || args.hosts < kMinHosts || bytes < kMinBytes)
    return std::numeric_limits<double>::infinity();
  return hier_overlapped_cost(half_args(args, Collective::kReduceScatter)) +
         hier_overlapped_cost(half_args(args, Collective::kAllgather));
}

}  // namespace ddl

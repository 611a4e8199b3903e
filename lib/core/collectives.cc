#include "lib/core/collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "lib/algorithms/registry.h"
#include "lib/common/clock.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/process_liveness.h"
#include "lib/core/call_checks.h"
#include "lib/core/peer_buffers.h"
#include "lib/core/progress.h"
#include "lib/device/staging.h"
#include "lib/device/stream_ipc.h"

namespace ddl {
namespace {

// Plans kept per communicator; past this the cache starts over (training loops reuse a
// handful of shapes).
constexpr size_t kMaxCachedPlans = 256;

// The collectives lib/device stages through host memory (and runs over CUDA IPC).
bool staged_on_device(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kBarrier:
    case Collective::kAlltoall:
    case Collective::kReduce:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kScan:
    case Collective::kExscan:
    case Collective::kAlltoallv:
    case Collective::kAllgatherv:
    case Collective::kReduceScatterv:
    case Collective::kGatherv:
    case Collective::kScatterv:
      return true;
    default:  // send and receive
      return false;
  }
}

Status find_plan(ddl_comm *comm, const CollectiveCall &call, bool in_place, const Plan **plan) {
  const size_t elem = datatype_size(call.dtype);
  std::string why;
  const ddl_comm::PlanKey key{static_cast<int>(call.collective), call.count, call.root, in_place,
                              elem};
  if (per_peer_counts(call.collective)) {
    // Counts may change from call to call (MoE's token routing): the last plan only.
    const BlockLayout &blocks = *call.layout;
    const BlockLayout *last = comm->counts_plan_layout.get();
    if (!comm->counts_plan || comm->counts_plan_key != key || !last ||
        last->send_counts != blocks.send_counts || last->send_displs != blocks.send_displs ||
        last->recv_counts != blocks.recv_counts || last->recv_displs != blocks.recv_displs) {
      comm->counts_plan_layout.reset();  // until the plan is built
      DDL_RETURN_IF_ERROR(
          make_comm_plan(comm, args_of(comm, call, in_place), 0, &comm->counts_plan, &why));
      comm->counts_plan_key = key;
      comm->counts_plan_layout = call.layout;
    }
    *plan = comm->counts_plan.get();
    return Status::Ok();
  }
  // Training loops repeat one call: the last plan is checked before the map.
  if (comm->last_plan && comm->last_plan_key == key) {
    *plan = comm->last_plan;
    return Status::Ok();
  }
  auto it = comm->plans.find(key);
  if (it != comm->plans.end()) {
    *plan = comm->last_plan = it->second.get();
    comm->last_plan_key = key;
    return Status::Ok();
  }
  std::unique_ptr<Plan> made;
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args_of(comm, call, in_place), 0, &made, &why));
  if (comm->plans.size() >= kMaxCachedPlans) comm->plans.clear();
  *plan = comm->last_plan = made.get();
  comm->last_plan_key = key;
  comm->plans[key] = std::move(made);
  return Status::Ok();
}

// The plan of a call that moves no data: no steps, so the executor only exchanges the call
// signature around the ring. A count-0 call on one rank against count 5 on another is then a
// mismatch error on both, not a timeout on one and a silent success on the other.
const Plan &empty_plan() {
  static const Plan plan = [] {
    Plan p;
    make_plan(Schedule(), &p);
    return p;
  }();
  return plan;
}

}  // namespace

CollectiveArgs args_of(const ddl_comm *comm, const CollectiveCall &call, bool in_place) {
  const size_t elem = datatype_size(call.dtype);
  CollectiveArgs args;
  args.collective = call.collective;
  args.nranks = comm->nranks;
  args.rank = comm->rank;
  args.count = call.count;
  args.root = call.root;
  args.in_place = in_place;
  args.chunk_elems = comm->config.chunk_bytes / elem;
  args.elem_size = elem;
  args.algorithm = forced_schedule(comm, call.collective);
  args.tiers = comm->algorithm_tiers;
  args.hosts = comm->hosts;
  args.peer_memory = comm->single_copy_tier;
  args.pieces = comm->config.hier_pieces;
  args.rails = comm->rails_in_use;
  args.layout = call.layout;
  return args;
}

Status make_comm_plan(const ddl_comm *comm, const CollectiveArgs &args, uint32_t tag_offset,
                      std::unique_ptr<Plan> *out, std::string *why) {
  Schedule schedule;
  DDL_RETURN_IF_ERROR(build_schedule(args, &schedule, why));
  for (Step &step : schedule.steps) {
    if (step.tag > kMaxStepTag - tag_offset)
      return unsupported(
          "%zu elements need more messages than the transport's tags allow (%s); split the "
          "call, or raise DDL_CHUNK_BYTES where the chunks follow it (across hosts hier's and "
          "the chain's stay at 64 KB)",
          args.count, schedule.algorithm.c_str());
    step.tag += tag_offset;
  }
  out->reset(new Plan());
  Plan *made = out->get();
  make_plan(std::move(schedule), made);
  if (why) made->why = *why;
  // A signature shares a message with the data the previous rank sends at once, which this
  // rank knows by building that rank's schedule; with per-peer counts it cannot.
  if (comm->nranks > 1 && !per_peer_counts(args.collective)) {
    made->to_right_at_once =
        sent_at_once_to(made->schedule, ring_index(comm->rank + 1, comm->nranks));
    // The previous rank's schedule for the same call (schedules are deterministic): what
    // does it send us at once? Its signature shares a message with one of those (see the
    // executor).
    const int left_rank = ring_index(comm->rank - 1, comm->nranks);
    CollectiveArgs left_args = args;
    left_args.rank = left_rank;
    Schedule left;
    if (build_schedule(left_args, &left, nullptr).ok()) {
      made->from_left_at_once = sent_at_once_to(left, comm->rank);
      for (AtOnceMessage &m : made->from_left_at_once) {
        m.tag += tag_offset;
        m.step = receiving_step(made->schedule, left_rank, m.tag);
      }
    }
  }
  return Status::Ok();
}

Status explain_peer_failure(ddl_comm *comm, const ExecArgs &exec, int peer, const Status &error,
                            bool *found_failure) {
  const bool died = !process_is_alive(comm->pids[peer]);
  return prefer_notice(comm->routes.get(), exec, error, std::chrono::milliseconds(died ? 0 : 200),
                       found_failure);
}

CallSignature signature_of(const CollectiveCall &call, uint32_t seq) {
  CallSignature signature;
  signature.seq = seq;
  signature.collective = static_cast<uint8_t>(call.collective);
  // Out-of-range values (refused before anything is sent) become 0xff, which no valid value
  // uses, so that error messages do not show a truncated value as a valid one.
  signature.dtype = static_cast<uint8_t>(valid_datatype(call.dtype) ? call.dtype : 0xff);
  signature.op = static_cast<uint8_t>(valid_op(call.op) ? call.op : 0xff);
  signature.root = has_root(call.collective) ? call.root : 0;
  // The v forms' counts differ by rank: their sizes are checked by each message's size.
  signature.count = per_peer_counts(call.collective) ? 0 : call.count;
  return signature;
}

// Sends and receives take device memory through a bounce buffer of their own
// (point_to_point.h); every other call through lib/device's staging.
Status locate_buffers(const CollectiveCall &call, device::PointerInfo *where) {
  DDL_RETURN_IF_ERROR(device::classify_call(call, where));
  if (where->kind == device::MemoryKind::kDevice && !staged_on_device(call.collective) &&
      !is_point_to_point(call.collective))
    return unsupported("device buffers are not supported by %s yet: pass host memory",
                       collective_name(call.collective));
  return Status::Ok();
}

Status check_collective(const ddl_comm *comm, const CollectiveCall &call) {
  bool in_place = false;
  Status s = check_call(comm, call, &in_place);
  device::PointerInfo where;
  if (s.ok()) s = locate_buffers(call, &where);
  if (!s.ok()) s.prefix(call_words(comm, call));
  return s;
}

std::string call_words(const ddl_comm *comm, const CollectiveCall &call) {
  return strprintf("rank %d: %s: ", comm->rank, collective_name(call.collective));
}

std::string describe_call(const ddl_comm *comm, const CollectiveCall &call, uint32_t seq) {
  return strprintf("rank %d: ", comm->rank) + describe_signature(signature_of(call, seq));
}

namespace {

// The call's plan. A call that moves no data compares its signature only (empty_plan); a v
// form's own count says nothing of its peers'. A barrier's schedule is its signals.
Status plan_of(ddl_comm *comm, const CollectiveCall &call, const Plan **plan) {
  if (call.count == 0 && call.collective != Collective::kBarrier &&
      !per_peer_counts(call.collective)) {
    *plan = &empty_plan();
    return Status::Ok();
  }
  return find_plan(comm, call, call_in_place(comm, call), plan);
}

}  // namespace

Status ScheduleRunner::run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                           uint64_t call_number, bool *found_failure) {
  const Plan *plan = nullptr;
  DDL_RETURN_IF_ERROR(plan_of(comm, call, &plan));
  const size_t scratch_bytes = plan->schedule.scratch_count * datatype_size(call.dtype);
  if (comm->scratch.size() < scratch_bytes) comm->scratch.resize(scratch_bytes);
  ExecArgs with_scratch = exec;
  with_scratch.scratch = comm->scratch.data();
  if (plan->schedule.peer_memory)
    return run_with_peer_buffers(comm, *plan, with_scratch, call_number, found_failure);
  Status s = comm->executor.run(*plan, with_scratch, comm->routes.get());
  *found_failure = comm->executor.found_failure();
  return s;
}

std::string why_schedule(ddl_comm *comm, const CollectiveCall &call) {
  const Plan *plan = nullptr;
  Status s = plan_of(comm, call, &plan);
  if (!s.ok()) return s.message();
  if (plan->schedule.steps.empty()) return "no data: only the call is compared";
  return strprintf("%s; %zu steps%s", plan->why.c_str(), plan->schedule.steps.size(),
                   plan->schedule.peer_memory ? ", single copy between the ranks of a host" : "");
}

std::string forced_schedule(const ddl_comm *comm, Collective collective) {
  const std::string &forced = comm->config.algorithm;
  if (forced.empty()) return forced;
  for (const AlgorithmInfo &info : algorithm_table())
    if (info.collective == collective && forced == info.name) return forced;
  return std::string();
}

Status check_usable(ddl_comm *comm, const std::string &context) {
  if (comm->device && comm->failure.ok()) comm->failure = device::stream_ipc_failure(comm);
  if (!comm->failure.ok())
    return Status(comm->failure.code(), context +
                                            "the communicator failed earlier and must be "
                                            "destroyed: " +
                                            comm->failure.message());
  if (comm->aborted.load())
    return invalid_usage("%sthe communicator was aborted; destroy it", context.c_str());
  return Status::Ok();
}

Status run_host_collective(ddl_comm *comm, const CollectiveCall &call, CallRunner &runner) {
  const uint32_t seq = static_cast<uint32_t>(comm->calls);
  // Built only on failure: the success path stays free of string formatting.
  auto context = [&] { return describe_call(comm, call, seq) + ": "; };
  if (!comm->failure.ok() || comm->aborted.load() || comm->device)
    DDL_RETURN_IF_ERROR(check_usable(comm, context()));
  // Every rank counts every call, including empty ones, to stay in step.
  const uint64_t call_number = ++comm->calls;
  // A v form's count is this rank's own (or none): its peers may still have data for it.
  const bool empty = call.count == 0 && call.collective != Collective::kBarrier &&
                     !per_peer_counts(call.collective);
  if (empty && comm->nranks == 1) return Status::Ok();

  ExecArgs exec;
  exec.input = call.collective == Collective::kBroadcast ? call.recvbuf : call.sendbuf;
  exec.output = call.recvbuf;
  exec.dtype = static_cast<ddl_datatype_t>(call.dtype);  // checked by check_call
  exec.op = static_cast<ddl_op_t>(call.op);
  exec.rank = comm->rank;
  exec.nranks = comm->nranks;
  exec.seq = seq;
  const CallSignature signature = signature_of(call, seq);
  exec.signature = &signature;
  if (comm->nranks > 1) {
    exec.notice = &comm->notice_recv;
    exec.notice_message = &comm->notice_in;
  }
  exec.deadline = coarse_now() + std::chrono::milliseconds(comm->config.timeout_ms);
  exec.abort_flag = &comm->aborted;
  exec.carriers = &comm->carriers;
  // On the progress thread the caller is computing beside it, on the same cores: poll
  // briefly, then yield (bench/one-host.md: overlap of a link-bound allreduce with compute went
  // from 51% to 84% hidden with 20 polls instead of 2000).
  exec.spins_before_yield = on_progress_thread()
                                ? std::min(comm->spins_before_yield, kProgressThreadSpins)
                                : comm->spins_before_yield;
  exec.yields_before_sleep = comm->yields_before_sleep;
  bool found_failure = false;
  Status s = runner.run(comm, call, exec, call_number, &found_failure);
  if (!s.ok() && found_failure) send_failure_notice(comm, s);
  if (!s.ok()) {
    s.prefix(context());
    comm->failure = s;  // messages of this call may still be in flight: no safe reuse
  }
  return s;
}

}  // namespace ddl

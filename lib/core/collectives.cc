#include "lib/core/collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "lib/algorithms/registry.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/process_liveness.h"
#include "lib/core/direct_allreduce.h"
#include "lib/core/flat_collectives.h"
#include "lib/core/peer_buffers.h"
#include "lib/core/progress.h"
#include "lib/device/staging.h"

namespace ddl {
namespace {

// Plans kept per communicator; past this the cache starts over (training loops reuse a
// handful of shapes).
constexpr size_t kMaxCachedPlans = 256;

bool overlaps(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

// Checks pointers, enums and sizes; decides in-place. Nothing is touched on failure.
Status check_call(const ddl_comm *comm, const CollectiveCall &call, bool *in_place) {
  const bool reducing =
      call.collective == Collective::kAllreduce || call.collective == Collective::kReduceScatter;
  if (!valid_datatype(call.dtype))
    return invalid_argument("datatype %d is not a ddl_datatype_t (0..%d)", call.dtype,
                            DDL_DATATYPE_COUNT - 1);
  if (reducing && !valid_op(call.op))
    return invalid_argument("op %d is not a ddl_op_t (0..%d)", call.op, DDL_OP_COUNT - 1);
  if (call.collective == Collective::kBroadcast && (call.root < 0 || call.root >= comm->nranks))
    return invalid_argument("root %d is not a rank of this communicator (0..%d)", call.root,
                            comm->nranks - 1);
  const size_t elem = datatype_size(call.dtype);
  const size_t n = static_cast<size_t>(comm->nranks);
  const bool per_rank =
      call.collective == Collective::kAllgather || call.collective == Collective::kReduceScatter;
  if (call.count > SIZE_MAX / elem / (per_rank ? n : 1))
    return invalid_argument("count %zu of %s overflows the address space", call.count,
                            datatype_name(call.dtype));
  const size_t bytes = call.count * elem;
  size_t send_bytes = bytes, recv_bytes = bytes;
  if (call.collective == Collective::kAllgather) recv_bytes = bytes * n;
  if (call.collective == Collective::kReduceScatter) send_bytes = bytes * n;
  *in_place = true;
  if (call.collective == Collective::kBroadcast || call.collective == Collective::kBarrier)
    return call.count > 0 && !call.recvbuf
               ? invalid_argument("buffer is NULL with count %zu", call.count)
               : Status::Ok();
  if (call.count == 0) return Status::Ok();
  if (!call.sendbuf) return invalid_argument("sendbuf is NULL with count %zu", call.count);
  if (!call.recvbuf) return invalid_argument("recvbuf is NULL with count %zu", call.count);
  const char *send = static_cast<const char *>(call.sendbuf);
  const char *recv = static_cast<const char *>(call.recvbuf);
  const size_t mine = bytes * static_cast<size_t>(comm->rank);
  switch (call.collective) {
    case Collective::kAllgather:
      *in_place = send == recv + mine;
      break;
    case Collective::kReduceScatter:
      *in_place = recv == send + mine;
      break;
    default:
      *in_place = send == recv;
      break;
  }
  if (!*in_place && overlaps(send, send_bytes, recv, recv_bytes))
    return invalid_argument(
        "sendbuf and recvbuf overlap without being the in-place layout (sendbuf %p, %zu B; "
        "recvbuf %p, %zu B)",
        call.sendbuf, send_bytes, call.recvbuf, recv_bytes);
  return Status::Ok();
}

Status find_plan(ddl_comm *comm, const CollectiveCall &call, bool in_place, const Plan **plan) {
  const size_t elem = datatype_size(call.dtype);
  const ddl_comm::PlanKey key{static_cast<int>(call.collective), call.count, call.root, in_place,
                              elem};
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
  CollectiveArgs args;
  args.collective = call.collective;
  args.nranks = comm->nranks;
  args.rank = comm->rank;
  args.count = call.count;
  args.root = call.root;
  args.in_place = in_place;
  args.chunk_elems = comm->config.chunk_bytes / elem;
  args.elem_size = elem;
  args.algorithm = comm->config.algorithm;
  args.tiers = comm->algorithm_tiers;
  args.hosts = comm->hosts;
  args.peer_memory = comm->single_copy_tier;
  std::unique_ptr<Plan> made;
  std::string why;
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args, 0, &made, &why));
  // Once per shape (plans are cached), so info level costs nothing in a training loop.
  DDL_INFO("%s of %zu B: %s; %zu steps%s", collective_name(call.collective), call.count * elem,
           why.c_str(), made->schedule.steps.size(),
           made->schedule.peer_memory ? ", single copy between the ranks of a host" : "");
  if (comm->plans.size() >= kMaxCachedPlans) comm->plans.clear();
  *plan = comm->last_plan = made.get();
  comm->last_plan_key = key;
  comm->plans[key] = std::move(made);
  return Status::Ok();
}

// Whether no call of this collective and count went the single-copy or slots way before (at
// most kMaxCachedPlans remembered, as plans are).
bool first_of_its_shape(ddl_comm *comm, const CollectiveCall &call) {
  if (comm->logged_shapes.size() >= kMaxCachedPlans) comm->logged_shapes.clear();
  return comm->logged_shapes.insert({call.collective, call.count}).second;
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
  if (comm->nranks > 1) {
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

size_t call_bytes(const CollectiveCall &call) {
  return call.count * datatype_size(call.dtype);
}

CallSignature signature_of(const CollectiveCall &call, uint32_t seq) {
  CallSignature signature;
  signature.seq = seq;
  signature.collective = static_cast<uint8_t>(call.collective);
  // Out-of-range values (refused before anything is sent) become 0xff, which no valid value
  // uses, so that error messages do not show a truncated value as a valid one.
  signature.dtype = static_cast<uint8_t>(valid_datatype(call.dtype) ? call.dtype : 0xff);
  signature.op = static_cast<uint8_t>(valid_op(call.op) ? call.op : 0xff);
  signature.root = call.root;
  signature.count = call.count;
  return signature;
}

Status check_collective(const ddl_comm *comm, const CollectiveCall &call) {
  bool in_place = false;
  Status s = check_call(comm, call, &in_place);
  device::PointerInfo where;
  if (s.ok()) s = device::classify_call(call, &where);  // host and device mixed
  if (!s.ok()) s.prefix(strprintf("rank %d: %s: ", comm->rank, collective_name(call.collective)));
  return s;
}

std::string describe_call(const ddl_comm *comm, const CollectiveCall &call, uint32_t seq) {
  return strprintf("rank %d: ", comm->rank) + describe_signature(signature_of(call, seq));
}

Status run_collective(ddl_comm *comm, const CollectiveCall &call) {
  if (call.stream) return device::run_stream_call(comm, call);
  // Without a CUDA driver (a cached answer) every buffer is host memory.
  if (device::cuda_driver()) {
    device::PointerInfo where;
    Status s = device::classify_call(call, &where);
    if (!s.ok())
      return s.prefix(describe_call(comm, call, static_cast<uint32_t>(comm->calls)) + ": ");
    if (where.kind == device::MemoryKind::kDevice)
      return device::run_device_collective(comm, call, where, /*from_stream=*/false);
  }
  return run_host_collective(comm, call);
}

Status run_host_collective(ddl_comm *comm, const CollectiveCall &call, CallRunner *runner) {
  const uint32_t seq = static_cast<uint32_t>(comm->calls);
  // Built only on failure: the success path stays free of string formatting.
  auto context = [&] { return describe_call(comm, call, seq) + ": "; };
  bool in_place = false;
  Status s = check_call(comm, call, &in_place);
  if (!s.ok()) return s.prefix(context());
  if (!comm->failure.ok())
    return Status(comm->failure.code(),
                  context() + "the communicator failed earlier and must be destroyed: " +
                      comm->failure.message());
  if (comm->aborted.load())
    return invalid_usage("%sthe communicator was aborted; destroy it", context().c_str());
  // Every rank counts every call, including empty ones, to stay in step.
  const uint64_t call_number = ++comm->calls;
  const bool empty = call.count == 0 && call.collective != Collective::kBarrier;
  if (empty && comm->nranks == 1) return Status::Ok();

  const bool direct = !runner && direct_collective_applies(comm, call);
  const bool flat = !runner && !direct && flat_collective_applies(comm, call);
  const Plan *plan = &empty_plan();
  if (!empty && !direct && !flat && !runner) {
    s = find_plan(comm, call, in_place, &plan);
    if (!s.ok()) return s.prefix(context());
  }
  const size_t elem = datatype_size(call.dtype);
  const size_t scratch_bytes = plan->schedule.scratch_count * elem;
  if (comm->scratch.size() < scratch_bytes) comm->scratch.resize(scratch_bytes);

  ExecArgs exec;
  exec.input = call.collective == Collective::kBroadcast ? call.recvbuf : call.sendbuf;
  exec.output = call.recvbuf;
  exec.scratch = comm->scratch.data();
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
  exec.deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->config.timeout_ms);
  exec.abort_flag = &comm->aborted;
  // On the progress thread the caller is computing beside it, on the same cores: poll
  // briefly, then yield (bench/README.md: overlap of a link-bound allreduce with compute went
  // from 51% to 84% hidden with 20 polls instead of 2000).
  exec.spins_before_yield = on_progress_thread()
                                ? std::min(comm->spins_before_yield, kProgressThreadSpins)
                                : comm->spins_before_yield;
  exec.yields_before_sleep = comm->yields_before_sleep;
  bool found_failure = false;
  // The level first: a training loop at the default level pays no lookup.
  if ((direct || flat) && log_level() >= LogLevel::kInfo && first_of_its_shape(comm, call)) {
    DDL_INFO("%s of %zu B: %s", collective_name(call.collective), call.count * elem,
             (direct ? why_direct(comm, call) : why_flat_collective(comm, call)).c_str());
  }
  if (runner) {
    s = runner->run(comm, call, exec, call_number, &found_failure);
  } else if (direct) {
    s = run_direct_collective(comm, call, exec, call_number, &found_failure);
  } else if (flat) {
    s = run_flat_collective(comm, call, exec, call_number, &found_failure);
  } else if (plan->schedule.peer_memory) {
    s = run_with_peer_buffers(comm, *plan, exec, call_number, &found_failure);
  } else {
    s = comm->executor.run(*plan, exec, comm->routes.get());
    found_failure = comm->executor.found_failure();
  }
  if (!s.ok() && found_failure) send_failure_notice(comm, s);
  if (!s.ok()) {
    s.prefix(context());
    comm->failure = s;  // messages of this call may still be in flight: no safe reuse
  }
  return s;
}

}  // namespace ddl

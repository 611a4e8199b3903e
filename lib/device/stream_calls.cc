// Stream-ordered collectives, in two modes.
//
// Host-synchronous (the default): the caller's thread records an event on the stream, waits
// for it (with the deadline, and abort), runs the collective as a blocking call and returns
// when it has ended. Nothing on the stream ever waits for ddl; the host waits instead, as
// PyTorch's gloo backend does for CUDA tensors.
//
// Asynchronous (DDL_CUDA_STREAM_ASYNC=1, experimental: it still hangs on a real GPU, below):
// the caller's thread makes what the call will need (below), records an event on the stream
// and queues behind it, on the same stream, a wait until the communicator's pinned flag
// reaches this call's number (ddl's wait kernel, else cuStreamWaitValue32), then hands the
// call to the progress thread and returns. The progress thread waits for the event, runs the
// collective and writes the flag, also when the collective failed, timed out or was aborted, so
// that the stream is never left waiting. Work queued on the stream after the call runs after the
// collective; the host goes on at once, as with NCCL.
//
// What makes it safe: while a stream waits on the flag, a driver call that synchronizes the
// device (allocating or freeing pinned memory, opening or closing a peer's allocation,
// loading a module) waits for that stream, which waits for the progress thread: if that
// thread makes such a call, both hang, past every deadline (seen on an H200, issue 25, when
// this mode made its resources on first use). So the progress thread makes none
// (may_sync_device): the caller's thread makes everything a queued call needs before its wait
// is queued (prepare_queued_call: the flag, the staging slots, the CUDA-IPC state and
// kernels, the peers' allocations that earlier calls found unopened), and a CUDA-IPC call
// that meets an allocation not yet open is staged instead (ipc_allreduce.cc's vote). A
// communicator with two ranks in one process (ranks as threads, one context) runs its stream
// calls host-synchronously on every rank: one rank's caller thread making such a call would
// wait for another rank's stream, which waits for a collective that needs the first rank.
//
// Not enough yet: on an H100 (2026-11-26, bench/gpu/h100-run7-async.log) the mode with these
// rules still hung inside the driver, past every deadline, at the first calls of one rank as
// of two, with MPS and without. So something beyond the progress thread's own calls blocks:
// the suspects are a device-synchronizing call of the application's (torch's allocations, a
// synchronous copy) holding the driver's lock that the progress thread's event queries and
// copies need; the stream memory wait holding a hardware queue that ddl's own copies were
// queued behind (the driver's documentation warns of this); or the flag's write not being
// seen by the wait. The wait is now a kernel (kernels/wait_flag.h), which rules out the
// second; tests/gpu/stream_wait_probe.cc tells the others apart on the next GPU.
//
// Why a wait on a flag and not cuLaunchHostFunc: a host function that blocks until the
// collective ends holds one of the driver's callback threads, which runs every stream's host
// functions of the process in turn; a wait on the device holds nothing on the host. The host
// function is the last fallback (no kernels, no stream memory operations).
#include <memory>
#include <thread>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"
#include "lib/core/dispatch.h"
#include "lib/core/progress.h"
#include "lib/device/device_reduce.h"
#include "lib/device/device_state.h"
#include "lib/device/staging.h"

namespace ddl {
namespace device {

// One queued stream-ordered call (owned by its CollectiveCall until it has run).
struct StreamCall {
  CUcontext context = nullptr;
  CUevent ready = nullptr;  // recorded on the caller's stream at the call
  uint32_t number = 0;      // the flag value that releases the stream
  PointerInfo where;
  DeviceState *state = nullptr;
};

namespace {

Status cuda_failed(const CudaDriver &cu, const char *what, CUresult r) {
  return Status(DDL_ERR_SYSTEM, strprintf("CUDA %s: %s", what, cuda_error_text(cu, r).c_str()));
}

// Makes the flag on first use, in pinned memory mapped for every context's device.
Status ensure_flag(DeviceState *st) {
  std::lock_guard<std::mutex> lock(st->flag_mu);
  if (st->flag) return Status::Ok();
  const CudaDriver &cu = *st->cu;
  void *p = nullptr;
  CUresult r = cu.mem_host_alloc(&p, 64, kMemHostAllocPortable | kMemHostAllocDeviceMap);
  if (r != kCudaSuccess) return cuda_failed(cu, "cuMemHostAlloc (the stream flag)", r);
  CUdeviceptr device = 0;
  r = cu.mem_host_get_device_pointer(&device, p, 0);
  if (r != kCudaSuccess) {
    cu.mem_free_host(p);
    return cuda_failed(cu, "cuMemHostGetDevicePointer (the stream flag)", r);
  }
  st->flag = static_cast<uint32_t *>(p);
  __atomic_store_n(st->flag, 0u, __ATOMIC_RELEASE);
  st->flag_device = device;
  cu.ctx_get_current(&st->flag_context);
  return Status::Ok();
}

// The fallback release: blocks the driver's callback thread until the flag has passed.
struct HostWait {
  const uint32_t *flag;
  uint32_t number;
};

void host_wait(void *arg) {
  std::unique_ptr<HostWait> wait(static_cast<HostWait *>(arg));
  while (static_cast<int32_t>(__atomic_load_n(wait->flag, __ATOMIC_ACQUIRE) - wait->number) < 0)
    std::this_thread::yield();
}

// Holds `stream` until the flag reaches `number`: ddl's wait kernel where the kernels load
// (kernels/wait_flag.h says why), else a stream memory wait, else a host function.
// DDL_CUDA_STREAM_WAIT=value picks the stream memory wait (to compare the two on a GPU).
Status queue_flag_wait(const CudaDriver &cu, CUstream stream, CUcontext ctx, DeviceState *st,
                       uint32_t number) {
  static const bool value_wait = env_string("DDL_CUDA_STREAM_WAIT") == "value";
  if (!value_wait && cuda_kernels_built() && load_device_kernels(cu, ctx).ok())
    return launch_wait_flag(cu, stream, ctx, st->flag_device, number);
  CUresult r = kCudaSuccess;
  if (cu.stream_wait_value32) {
    r = cu.stream_wait_value32(stream, st->flag_device, number, kStreamWaitValueGeq);
  } else if (cu.launch_host_func) {
    auto *wait = new HostWait{st->flag, number};
    r = cu.launch_host_func(stream, host_wait, wait);
    if (r != kCudaSuccess) delete wait;
  } else {
    return unsupported(
        "%s has neither cuStreamWaitValue32 nor cuLaunchHostFunc: later work on the stream "
        "could not wait for the collective",
        cu.library.c_str());
  }
  if (r != kCudaSuccess) return cuda_failed(cu, "cuStreamWaitValue32 on the stream", r);
  return Status::Ok();
}

// What both modes need first: the call checked, the driver, where the buffers are, the
// communicator's device state and the stream's context.
struct StreamTarget {
  const CudaDriver *cu = nullptr;
  PointerInfo where;
  DeviceState *state = nullptr;
  CUcontext context = nullptr;
};

Status stream_target(ddl_comm *comm, const CollectiveCall &call, void *stream_handle,
                     StreamTarget *t) {
  DDL_RETURN_IF_ERROR(check_collective(comm, call));
  auto context = [&] {
    return strprintf("rank %d: %s: ", comm->rank, collective_name(call.collective));
  };
  t->cu = cuda_driver();
  if (!t->cu)
    return unsupported("%sstream-ordered calls need the CUDA driver, and there is none (%s)",
                       context().c_str(), cuda_absent_reason().c_str());
  DDL_RETURN_IF_ERROR(classify_call(call, &t->where));  // checked above; for the context
  Status s = device_state(comm, &t->state);
  if (!s.ok()) return s.prefix(context());
  auto stream = static_cast<CUstream>(stream_handle);
  // The stream's context (the default stream: the current one) is where events live.
  if (t->cu->stream_get_ctx) t->cu->stream_get_ctx(stream, &t->context);
  if (!t->context) t->context = t->where.context;
  if (!t->context) t->cu->ctx_get_current(&t->context);
  if (!t->context)
    return invalid_usage("%sno CUDA context is current and the stream names none",
                         context().c_str());
  return Status::Ok();
}

}  // namespace

bool stream_calls_async(ddl_comm *comm) {
  static const bool async = env_string("DDL_CUDA_STREAM_ASYNC") == "1";
  if (!async) return false;
  // The same answer on every rank (every rank has the same pids): the CUDA-IPC path votes
  // when it is true. Without a driver there is nothing to run asynchronously.
  DeviceState *st = nullptr;
  return device_state(comm, &st).ok() && st->one_process_per_rank;
}

bool may_sync_device(ddl_comm *comm) {
  return !on_progress_thread() || !stream_calls_async(comm);
}

Status prepare_queued_call(ddl_comm *comm, const CollectiveCall &call) {
  if (!stream_calls_async(comm)) return Status::Ok();
  PointerInfo where;
  Status s = classify_call(call, &where);
  if (!s.ok() || where.kind != MemoryKind::kDevice) return Status::Ok();  // checked when run
  DeviceState *st = nullptr;
  DDL_RETURN_IF_ERROR(device_state(comm, &st));
  // Every device call may be staged (the CUDA-IPC path's vote): the slots first.
  DDL_RETURN_IF_ERROR(reserve_staging(comm, call, where));
  return prepare_ipc_call(comm, call, where);
}

Status wait_for_stream(ddl_comm *comm, const CollectiveCall &call, void *stream_handle) {
  StreamTarget t;
  DDL_RETURN_IF_ERROR(stream_target(comm, call, stream_handle, &t));
  const CudaDriver &cu = *t.cu;
  ScopedContext scope(cu, t.context);
  CUevent ready = nullptr;
  CUresult r = cu.event_create(&ready, kEventDisableTiming);
  if (r == kCudaSuccess) r = cu.event_record(ready, static_cast<CUstream>(stream_handle));
  Status s;
  if (r != kCudaSuccess) {
    s = cuda_failed(cu, "cuEventCreate/cuEventRecord on the stream", r);
  } else {
    s = wait_event(
        cu, ready,
        std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->config.timeout_ms),
        &comm->aborted, "waiting for the work queued on the stream before the call");
  }
  if (ready) cu.event_destroy(ready);
  if (s.ok()) return s;
  return s.prefix(strprintf("rank %d: %s: ", comm->rank, collective_name(call.collective)));
}

Status start_stream_call(ddl_comm *comm, CollectiveCall *call, void *stream_handle) {
  auto context = [&] {
    return strprintf("rank %d: %s: ", comm->rank, collective_name(call->collective));
  };
  StreamTarget t;
  DDL_RETURN_IF_ERROR(stream_target(comm, *call, stream_handle, &t));
  const CudaDriver *cu = t.cu;
  DeviceState *st = t.state;
  CUcontext ctx = t.context;
  auto stream = static_cast<CUstream>(stream_handle);
  Status s;
  ScopedContext scope(*cu, ctx);
  s = ensure_flag(st);
  if (s.ok()) s = prepare_queued_call(comm, *call);
  if (!s.ok()) return s.prefix(context());
  auto op = std::make_unique<StreamCall>();
  op->context = ctx;
  op->where = t.where;
  op->state = st;
  CUresult r = cu->event_create(&op->ready, kEventDisableTiming);
  if (r != kCudaSuccess) return cuda_failed(*cu, "cuEventCreate", r).prefix(context());
  r = cu->event_record(op->ready, stream);
  if (r != kCudaSuccess) {
    cu->event_destroy(op->ready);
    return cuda_failed(*cu, "cuEventRecord on the stream", r).prefix(context());
  }
  // A number skipped by a failure below is harmless: the flag only grows, and a stream
  // waits until it has reached (or passed) its own number.
  op->number = ++st->issued;
  s = queue_flag_wait(*cu, stream, ctx, st, op->number);
  if (!s.ok()) {
    cu->event_destroy(op->ready);
    return s.prefix(context());
  }
  call->stream = op.release();
  return Status::Ok();
}

Status run_stream_call(ddl_comm *comm, const CollectiveCall &call) {
  std::unique_ptr<StreamCall> op(call.stream);
  CollectiveCall plain = call;
  plain.stream = nullptr;
  DeviceState *st = op->state;
  const CudaDriver &cu = *st->cu;
  Status s;
  {
    ScopedContext scope(cu, op->context);
    s = wait_event(
        cu, op->ready,
        std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->config.timeout_ms),
        &comm->aborted, "waiting for the work queued on the stream before the call");
    cu.event_destroy(op->ready);
  }
  if (!s.ok()) {
    // This rank never joined the collective: the peers inside it hear why.
    s.prefix(describe_call(comm, plain, static_cast<uint32_t>(comm->calls)) + ": ");
    if (comm->failure.ok() && !comm->aborted.load()) {
      send_failure_notice(comm, s);
      comm->failure = s;
    }
  } else {
    s = dispatch(comm, plain, CallPlace{op->where, /*from_stream=*/true});
    // No request carries a stream call's failure: the communicator's next call reports it.
    if (!s.ok() && comm->failure.ok() && !comm->aborted.load()) comm->failure = s;
  }
  __atomic_store_n(st->flag, op->number, __ATOMIC_RELEASE);
  return s;
}

}  // namespace device
}  // namespace ddl

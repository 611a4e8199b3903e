#include "lib/device/staging.h"

#include <algorithm>
#include <thread>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"
#include "lib/core/dispatch.h"
#include "lib/device/device_state.h"
#include "lib/device/staged_chunks.h"
#include "lib/device/stream_ipc.h"

namespace ddl {
namespace device {
namespace {

constexpr uint64_t kDefaultStageBytes = 4ull << 20;
constexpr uint64_t kMaxStageBytes = 1ull << 30;

std::mutex g_state_mu;  // making a communicator's state (caller and progress threads)

// The copy stream and events belong to a context: made again when a call's buffers are in
// another one (a process driving two GPUs through one communicator, rare). The slots grow to
// slot_bytes; outgrown ones are retired, not freed, as a call may still be using them.
// Without may_sync the slots must already be large enough (prepare_queued_call made them).
Status prepare_staging(ddl_comm *comm, DeviceState *st, CUcontext context, size_t slot_bytes) {
  const CudaDriver &cu = *st->cu;
  {
    std::lock_guard<std::mutex> lock(st->staging_mu);
    if (st->context != context || !st->copy_stream) {
      if (st->copy_stream) {
        ScopedContext old(cu, st->context);
        for (CUevent &e : st->staged) {
          cu.event_destroy(e);
          e = nullptr;
        }
        cu.event_destroy(st->drained);
        cu.stream_destroy(st->copy_stream);
        st->copy_stream = nullptr;
      }
      DDL_CU_TRY(cu, stream_create(&st->copy_stream, kStreamNonBlocking), "cuStreamCreate");
      st->context = context;
      for (CUevent &e : st->staged)
        DDL_CU_TRY(cu, event_create(&e, kEventDisableTiming), "cuEventCreate");
      DDL_CU_TRY(cu, event_create(&st->drained, kEventDisableTiming), "cuEventCreate");
    }
    if (st->slot_bytes >= slot_bytes) return Status::Ok();
  }
  if (!may_sync_device(comm))
    return Status(DDL_ERR_INTERNAL,
                  strprintf("the pinned staging slots are smaller than the call needs (%zu B) and "
                            "cannot grow on the progress thread while streams wait for it (they "
                            "were not made before the call was queued)",
                            slot_bytes));
  // Not under the lock: the allocation may wait for streams that wait for the progress
  // thread, which takes the lock to start a staged call.
  void *p = nullptr;
  DDL_CU_TRY(cu, mem_host_alloc(&p, 2 * slot_bytes, kMemHostAllocPortable),
             "cuMemHostAlloc (staging slots)");
  {
    std::lock_guard<std::mutex> lock(st->staging_mu);
    if (st->slot_bytes < slot_bytes) {
      if (st->slots) st->retired_slots.push_back(st->slots);
      st->slots = static_cast<unsigned char *>(p);
      st->slot_bytes = slot_bytes;
      p = nullptr;
    }
  }
  if (p) cu.mem_free_host(p);  // another thread made them meanwhile
  return Status::Ok();
}

// Chunk i's host collective runs while chunk i+1 comes in and chunk i-1 goes out. *current
// is the chunk in its host collective (for the error's words).
Status run_pipeline(ddl_comm *comm, DeviceState *st, const StagedChunks &p, bool from_stream,
                    size_t *current, bool *local_failure) {
  const CudaDriver &cu = *st->cu;
  *local_failure = true;
  if (!from_stream) {
    // A blocking call's inputs may still be in flight on the legacy default stream, which the
    // copy stream (non-blocking) does not wait for: PyTorch queues its kernels there, and a
    // cuMemcpyHtoD from pageable memory returns before its DMA has ended (seen on an H200:
    // wrong elements at 8 B .. 32 KB without this wait).
    DDL_CU_TRY(cu, event_record(st->drained, legacy_stream()), "cuEventRecord");
    DDL_RETURN_IF_ERROR(wait_event(cu, st->drained, deadline_of(comm), &comm->aborted,
                                   "waiting for the default stream's work before the call"));
  }
  // A slot's event marks its chunk's input in, and (one stream, in order) the previous
  // chunk's output out of it.
  auto stage_in = [&](size_t i) {
    DDL_RETURN_IF_ERROR(p.copy_in(cu, st->copy_stream, i));
    DDL_CU_TRY(cu, event_record(st->staged[i % 2], st->copy_stream), "cuEventRecord");
    return Status::Ok();
  };
  DDL_RETURN_IF_ERROR(stage_in(0));
  for (size_t i = 0; i < p.chunks(); ++i) {
    if (i + 1 < p.chunks()) DDL_RETURN_IF_ERROR(stage_in(i + 1));
    DDL_RETURN_IF_ERROR(wait_event(cu, st->staged[i % 2], deadline_of(comm), &comm->aborted,
                                   "copying a chunk of the device buffers to pinned memory"));
    *current = i;
    *local_failure = false;
    DDL_RETURN_IF_ERROR(dispatch(comm, p.host_call(i), CallPlace{}));
    *local_failure = true;
    DDL_RETURN_IF_ERROR(p.copy_out(cu, st->copy_stream, i));
  }
  DDL_CU_TRY(cu, event_record(st->drained, st->copy_stream), "cuEventRecord");
  return wait_event(cu, st->drained, deadline_of(comm), &comm->aborted,
                    "copying the results back to the device buffers");
}

}  // namespace

Status device_state(ddl_comm *comm, DeviceState **out) {
  std::lock_guard<std::mutex> lock(g_state_mu);
  if (!comm->device) {
    const CudaDriver *cu = cuda_driver();
    if (!cu) return unsupported("no CUDA driver: %s", cuda_absent_reason().c_str());
    uint64_t stage = kDefaultStageBytes;
    const std::string text = env_string("DDL_CUDA_STAGE_BYTES");
    if (!text.empty() && (!parse_bytes(text, &stage) || stage == 0 || stage > kMaxStageBytes))
      return invalid_argument("DDL_CUDA_STAGE_BYTES=%s: expected bytes in 1..1G (e.g. 4M)",
                              text.c_str());
    // cuInit is cheap once the application has initialised CUDA, which it has: it holds
    // device memory or a stream.
    const CUresult r = cu->init(0);
    if (r != kCudaSuccess) return cuda_failed(*cu, "cuInit", r);
    auto *st = new DeviceState();
    st->cu = cu;
    st->stage_bytes = stage;
    std::vector<pid_t> known;  // 0: in another PID namespace, a process of its own
    for (pid_t pid : comm->pids)
      if (pid != 0) known.push_back(pid);
    std::sort(known.begin(), known.end());
    st->one_process_per_rank = std::adjacent_find(known.begin(), known.end()) == known.end();
    comm->device = st;
  }
  *out = comm->device;
  return Status::Ok();
}

std::chrono::steady_clock::time_point deadline_of(const ddl_comm *comm) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->config.timeout_ms);
}

DeviceState *existing_device_state(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_state_mu);
  return comm->device;
}

Status wait_event(const CudaDriver &cu, CUevent event,
                  std::chrono::steady_clock::time_point deadline, const std::atomic<bool> *abort,
                  const char *what) {
  for (uint64_t round = 0;; ++round) {  // small copies end within microseconds: poll at once
    const CUresult r = cu.event_query(event);
    if (r == kCudaSuccess) return Status::Ok();
    if (r != kCudaErrorNotReady)
      return cuda_failed(cu, std::string("cuEventQuery while ") + what, r);
    DDL_RETURN_IF_ERROR(pause_between_polls(round, deadline, abort, what));
  }
}

Status pause_between_polls(uint64_t round, std::chrono::steady_clock::time_point deadline,
                           const std::atomic<bool> *abort, const char *what) {
  if (abort && abort->load(std::memory_order_relaxed))
    return invalid_usage("the communicator was aborted while %s", what);
  if ((round & 255) == 0 && std::chrono::steady_clock::now() >= deadline)
    return timeout_error("deadline passed while %s", what);
  if (round < 1000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  return Status::Ok();
}

Status classify_call(const CollectiveCall &call, PointerInfo *where) {
  *where = PointerInfo();
  const CudaDriver *cu = cuda_driver();
  // A call that moves nothing needs no lookup; the forms with counts per rank may move data
  // whatever their count (alltoallv's is 0, allgatherv's the rank's own block).
  const bool empty = call.count == 0 && !per_peer_counts(call.collective);
  if (!cu || empty || call.collective == Collective::kBarrier) return Status::Ok();
  if (call.collective == Collective::kBroadcast) {
    *where = pointer_info(*cu, call.recvbuf);
    return Status::Ok();
  }
  // A buffer the rank does not use (NULL: a send's recvbuf, a gather's off the root) takes
  // the kind of the other.
  const void *send_ptr = call.sendbuf ? call.sendbuf : call.recvbuf;
  const void *recv_ptr = call.recvbuf ? call.recvbuf : call.sendbuf;
  const PointerInfo send = pointer_info(*cu, send_ptr);
  const PointerInfo recv = pointer_info(*cu, recv_ptr);
  auto kind = [](const PointerInfo &p) {
    return p.kind == MemoryKind::kDevice ? "device" : "host";
  };
  if (send.kind != recv.kind)
    return invalid_argument(
        "sendbuf %p is %s memory and recvbuf %p is %s memory: the buffers of one call must be "
        "both device memory or both host memory",
        call.sendbuf, kind(send), call.recvbuf, kind(recv));
  *where = send;
  return Status::Ok();
}

Status reserve_staging(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where) {
  DeviceState *st = nullptr;
  DDL_RETURN_IF_ERROR(device_state(comm, &st));
  ScopedContext scope(*st->cu, where.context);
  return prepare_staging(comm, st, where.context,
                         StagedChunks(comm, st->stage_bytes, call).slot_bytes());
}

Status run_staged(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where,
                  bool from_stream) {
  size_t current = 0;
  // The chunk's own call is named by the host collective's error; this names the caller's.
  auto context = [&](const StagedChunks *p) {
    std::string chunk = p ? strprintf(", chunk %zu of %zu", current + 1, p->chunks()) : "";
    return strprintf(
        "rank %d: %s of device buffers (count %zu, %s)%s, staged through pinned host "
        "memory: ",
        comm->rank, collective_name(call.collective), call.count, datatype_name(call.dtype),
        chunk.c_str());
  };
  DeviceState *st = nullptr;
  Status s = device_state(comm, &st);
  if (!s.ok()) return s.prefix(context(nullptr));
  if (!st->logged_path) {
    st->logged_path = true;
    DDL_INFO(
        "device buffers: staged through pinned host memory in chunks of up to %zu B "
        "(DDL_CUDA_STAGE_BYTES), device copies overlapping the host collective",
        st->stage_bytes);
  }
  ScopedContext scope(*st->cu, where.context);
  StagedChunks chunks(comm, st->stage_bytes, call);
  bool local_failure = true;
  s = prepare_staging(comm, st, where.context, chunks.slot_bytes());
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(st->staging_mu);
    // This call's slots: a later call's growing them must not move its chunks.
    chunks.use_slots(st->slots, st->slot_bytes);
  }
  if (s.ok()) s = run_pipeline(comm, st, chunks, from_stream, &current, &local_failure);
  if (s.ok()) return s;
  if (st->copy_stream) {
    // No copy may touch the caller's buffers after the call has returned.
    if (st->cu->event_record(st->drained, st->copy_stream) == kCudaSuccess)
      wait_event(*st->cu, st->drained, deadline_of(comm), nullptr, "ending the copies");
  }
  // The host collective's failures reached the peers already. A copy that failed leaves the
  // peers inside a chunk: they hear why, and the communicator is done.
  s.prefix(context(&chunks));
  if (!local_failure) return s;
  if (comm->failure.ok()) {
    send_failure_notice(comm, s);
    comm->failure = s;
  }
  return s;
}

void destroy_device_state(ddl_comm *comm) {
  DeviceState *st = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_state_mu);  // existing_device_state may look
    st = comm->device;
    comm->device = nullptr;
  }
  if (!st) return;
  const CudaDriver &cu = *st->cu;
  // Errors are ignored: the application may have destroyed its context already.
  destroy_stream_ipc(comm, st);
  destroy_ipc(st);
  if (st->copy_stream) {
    ScopedContext scope(cu, st->context);
    for (CUevent e : st->staged) cu.event_destroy(e);
    cu.event_destroy(st->drained);
    cu.stream_destroy(st->copy_stream);
  }
  destroy_stream_queue(st);
  if (st->slots) {
    ScopedContext scope(cu, st->context);
    cu.mem_free_host(st->slots);
    for (void *p : st->retired_slots) cu.mem_free_host(p);
  }
  delete st;
}

}  // namespace device
}  // namespace ddl

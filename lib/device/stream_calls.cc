// Stream-ordered collectives, in two modes.
//
// Host-synchronous (the default): the caller's thread records an event on the stream, waits
// for it (with the deadline, and abort), runs the collective as a blocking call and returns
// when it has ended. Nothing on the stream ever waits for ddl; the host waits instead, as
// PyTorch's gloo backend does for CUDA tensors.
//
// Asynchronous (the default for a communicator that spans hosts; DDL_CUDA_STREAM_ASYNC=1 or 0
// forces either mode): the caller's thread queues the call's device part on its stream and returns;
// the progress thread does the host part, touching host memory only. Each queued call takes a
// record: three words of pinned memory mapped for the device (how many chunks the stream has
// staged, how many the host has reduced, whether the stream is done with the record) and two
// pinned slots. On the stream, chunk by chunk (staged_chunks.h): the copy of its input into
// its slot, a write of `staged`, and, two chunks later, a wait until `done` has passed it and
// the copy of its result back; then a write of `drained`. The progress thread polls `staged`,
// runs each chunk's host collective in its slot and writes `done` (all of it on failure,
// timeout or abort, so that the stream is never left waiting). Host buffers are one chunk,
// reduced where they are. Work queued on the stream after the call runs after it; the host
// goes on at once, as with NCCL. An allreduce among ranks of one host is queued whole on the
// device instead, over CUDA IPC with barriers on the device (stream_ipc.h): no progress thread.
//
// Why the progress thread makes no driver call at all: an H200 (bench/gpu.md, 2026-11-28)
// showed that while a stream waits on a flag, an application's call that waits for the device
// (freeing memory, a synchronous copy: torch's .item()) holds the driver, and any other
// thread's driver call, even an asynchronous copy or an event query, then blocks behind it:
// had the progress thread made one before writing the flag, neither would return. The earlier
// form of this mode did (its copies, kernels and event queries), and hung on an H100 and an
// H200. Everything a call needs on the device (the record's slots, the words) is made, and
// every copy, write and wait queued, by the caller's thread. A communicator with two ranks in
// one process (ranks as threads) runs its stream calls host-synchronously: one rank's caller
// thread, making a record's slots, would wait for another rank's stream, which waits for a
// collective that the first rank's stream has not been given yet.
//
// The stream's waits are ddl's wait kernel where the kernels load (kernels/wait_flag.h says
// why), else a stream memory wait, else a host function; its writes are stream memory writes
// (which first make the stream's earlier writes visible), else host functions. A host function
// that waits holds one of the driver's callback threads, which runs every stream's host
// functions of the process in turn: it is the last fallback.
#include <cstring>
#include <memory>
#include <thread>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/collectives.h"
#include "lib/core/comm.h"
#include "lib/core/dispatch.h"
#include "lib/core/progress.h"
#include "lib/device/device_reduce.h"
#include "lib/device/device_state.h"
#include "lib/device/staged_chunks.h"
#include "lib/device/staging.h"
#include "lib/device/stream_ipc.h"

namespace ddl {
namespace device {

// A queued call's record: words[kStaged], words[kDone], words[kDrained], in pinned memory
// mapped for the device (each record on a line of its own), and its two staging slots.
enum Word { kStaged = 0, kDone = 1, kDrained = 2 };
constexpr size_t kRecordBytes = 64;
// Calls in flight at once, per communicator: a 17th waits (on the host, with the deadline)
// until the oldest has drained. Each record's slots are up to 2 x DDL_CUDA_STAGE_BYTES.
constexpr size_t kRecords = 16;
// A `done` past every chunk, for a program whose call will not run (the device's waits compare
// cyclically, as 32-bit signed differences: not ~0u).
constexpr uint32_t kReleaseAll = 1u << 30;

struct Record {
  uint32_t *words = nullptr;
  CUdeviceptr words_device = 0;
  unsigned char *slots = nullptr;  // two slots of slot_bytes each
  size_t slot_bytes = 0;
  uint64_t taken = 0;  // when it was last taken (the queue's count of calls)
};

struct StreamQueue {
  void *words = nullptr;  // kRecords lines
  CUcontext context = nullptr;
  Record records[kRecords];
  uint64_t calls = 0;
};

// One queued stream-ordered call (owned by its CollectiveCall until it has run).
struct StreamCall {
  Record *record = nullptr;
  PointerInfo where;  // host buffers: one chunk, reduced where they are
};

namespace {

uint32_t load_word(const Record &r, Word w) {
  return __atomic_load_n(&r.words[w], __ATOMIC_ACQUIRE);
}
void store_word(Record *r, Word w, uint32_t value) {
  __atomic_store_n(&r->words[w], value, __ATOMIC_RELEASE);
}

// Polls a record's word until it reaches `number`, the deadline passes or abort is raised.
Status wait_word(const Record &r, Word w, uint32_t number,
                 std::chrono::steady_clock::time_point deadline, const std::atomic<bool> *abort,
                 const char *what) {
  for (uint64_t round = 0; load_word(r, w) < number; ++round)
    DDL_RETURN_IF_ERROR(pause_between_polls(round, deadline, abort, what));
  return Status::Ok();
}

// The host-function fallbacks of a stream's wait and write.
struct HostWord {
  uint32_t *word;
  uint32_t number;
};
void host_wait(void *arg) {
  std::unique_ptr<HostWord> wait(static_cast<HostWord *>(arg));
  while (__atomic_load_n(wait->word, __ATOMIC_ACQUIRE) < wait->number) std::this_thread::yield();
}
void host_write(void *arg) {
  std::unique_ptr<HostWord> write(static_cast<HostWord *>(arg));
  __atomic_store_n(write->word, write->number, __ATOMIC_RELEASE);
}
CUresult queue_host_function(const CudaDriver &cu, CUstream stream, CUhostFn fn, uint32_t *word,
                             uint32_t number) {
  auto *arg = new HostWord{word, number};
  const CUresult r = cu.launch_host_func(stream, fn, arg);
  if (r != kCudaSuccess) delete arg;
  return r;
}

// Holds `stream` until the record's word reaches `number` (the header says which wait).
// DDL_CUDA_STREAM_WAIT=value picks the stream memory wait (to compare the two on a GPU).
Status queue_wait(const CudaDriver &cu, CUstream stream, CUcontext ctx, Record *r, Word w,
                  uint32_t number) {
  static const bool value_wait = env_string("DDL_CUDA_STREAM_WAIT") == "value";
  const CUdeviceptr word = r->words_device + w * sizeof(uint32_t);
  if (!value_wait && cuda_kernels_built() && load_device_kernels(cu, ctx).ok())
    return launch_wait_flag(cu, stream, ctx, word, number);
  CUresult res;
  if (cu.stream_wait_value32)
    res = cu.stream_wait_value32(stream, word, number, kStreamWaitValueGeq);
  else if (cu.launch_host_func)
    res = queue_host_function(cu, stream, host_wait, &r->words[w], number);
  else
    return unsupported(
        "%s has neither cuStreamWaitValue32 nor cuLaunchHostFunc: later work on the stream "
        "could not wait for the collective",
        cu.library.c_str());
  return res == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuStreamWaitValue32", res);
}

// Writes `number` to the record's word once the stream's earlier work has ended: a stream
// memory write, else (none, or refused: a device without stream memory operations) a host
// function.
Status queue_write(const CudaDriver &cu, CUstream stream, Record *r, Word w, uint32_t number) {
  CUresult res = kCudaErrorNotReady;  // anything but success: not written yet
  if (cu.stream_write_value32)
    res = cu.stream_write_value32(stream, r->words_device + w * sizeof(uint32_t), number, 0);
  if (res == kCudaSuccess) return Status::Ok();
  if (!cu.launch_host_func) {
    if (cu.stream_write_value32) return cuda_failed(cu, "cuStreamWriteValue32", res);
    return unsupported(
        "%s has neither cuStreamWriteValue32 nor cuLaunchHostFunc: the stream could not tell "
        "ddl that it reached the call",
        cu.library.c_str());
  }
  res = queue_host_function(cu, stream, host_write, &r->words[w], number);
  return res == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuLaunchHostFunc", res);
}

// A record for the next call, on the caller's thread (the words made on first use): a free
// one whose slots are large enough, else any free one, else the one taken longest ago once its
// stream has drained it. Reusing the same few records keeps their slots: making slots is a
// pinned allocation, milliseconds, which waits for the device.
Status take_record(ddl_comm *comm, DeviceState *st, CUcontext ctx, size_t slot_bytes,
                   Record **out) {
  const CudaDriver &cu = *st->cu;
  std::lock_guard<std::mutex> lock(st->queue_mu);
  if (!st->queue) {
    auto queue = std::make_unique<StreamQueue>();
    CUresult r = cu.mem_host_alloc(&queue->words, kRecords * kRecordBytes,
                                   kMemHostAllocPortable | kMemHostAllocDeviceMap);
    if (r != kCudaSuccess) return cuda_failed(cu, "cuMemHostAlloc (the stream calls' words)", r);
    std::memset(queue->words, 0, kRecords * kRecordBytes);
    CUdeviceptr device = 0;
    r = cu.mem_host_get_device_pointer(&device, queue->words, 0);
    if (r != kCudaSuccess) {
      cu.mem_free_host(queue->words);
      return cuda_failed(cu, "cuMemHostGetDevicePointer (the stream calls' words)", r);
    }
    for (size_t i = 0; i < kRecords; ++i) {
      Record &record = queue->records[i];
      record.words = reinterpret_cast<uint32_t *>(static_cast<unsigned char *>(queue->words) +
                                                  i * kRecordBytes);
      record.words_device = device + i * kRecordBytes;
      store_word(&record, kDrained, 1);  // free: a record is in use from its taking to its drain
    }
    queue->context = ctx;
    st->queue = queue.release();
  }
  Record *fit = nullptr, *free = nullptr, *oldest = nullptr;
  for (Record &r : st->queue->records) {
    if (load_word(r, kDrained) == 0) {
      if (!oldest || r.taken < oldest->taken) oldest = &r;
      continue;
    }
    if (!free) free = &r;
    if (r.slot_bytes >= slot_bytes) {
      fit = &r;
      break;
    }
  }
  Record *r = fit ? fit : free;
  if (!r) {
    DDL_RETURN_IF_ERROR(wait_word(
        *oldest, kDrained, 1, deadline_of(comm), &comm->aborted,
        "waiting for a stream to finish with one of the 16 stream-ordered calls in flight (the "
        "most there may be)"));
    r = oldest;
  }
  r->taken = ++st->queue->calls;
  store_word(r, kDrained, 0);  // in use from here (another caller's thread may look)
  *out = r;
  return Status::Ok();
}

// The record's two slots, at least slot_bytes each (made on the caller's thread).
Status make_slots(const CudaDriver &cu, Record *r, size_t slot_bytes) {
  if (r->slot_bytes >= slot_bytes) return Status::Ok();
  if (r->slots) cu.mem_free_host(r->slots);  // drained: no copy uses them
  r->slots = nullptr;
  r->slot_bytes = 0;
  void *p = nullptr;
  const CUresult res = cu.mem_host_alloc(&p, 2 * slot_bytes, kMemHostAllocPortable);
  if (res != kCudaSuccess) return cuda_failed(cu, "cuMemHostAlloc (staging slots)", res);
  r->slots = static_cast<unsigned char *>(p);
  r->slot_bytes = slot_bytes;
  return Status::Ok();
}

// The call's device part, on the stream: chunk c's input goes in while the host reduces chunk
// c-1 and chunk c-2's result comes out (the same slot as chunk c: it must be out first).
Status queue_program(const CudaDriver &cu, CUstream stream, CUcontext ctx, Record *r,
                     const StagedChunks *chunks) {
  const size_t n = chunks ? chunks->chunks() : 1;
  for (size_t c = 0; c < n; ++c) {
    if (chunks) {
      if (c >= 2) {
        DDL_RETURN_IF_ERROR(queue_wait(cu, stream, ctx, r, kDone, static_cast<uint32_t>(c - 1)));
        DDL_RETURN_IF_ERROR(chunks->copy_out(cu, stream, c - 2));
      }
      DDL_RETURN_IF_ERROR(chunks->copy_in(cu, stream, c));
    }
    DDL_RETURN_IF_ERROR(queue_write(cu, stream, r, kStaged, static_cast<uint32_t>(c + 1)));
  }
  for (size_t c = n > 2 ? n - 2 : 0; c < n; ++c) {
    DDL_RETURN_IF_ERROR(queue_wait(cu, stream, ctx, r, kDone, static_cast<uint32_t>(c + 1)));
    if (chunks) DDL_RETURN_IF_ERROR(chunks->copy_out(cu, stream, c));
  }
  return queue_write(cu, stream, r, kDrained, 1);
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
  t->cu = cuda_driver();
  if (!t->cu)
    return unsupported("%sstream-ordered calls need the CUDA driver, and there is none (%s)",
                       call_words(comm, call).c_str(), cuda_absent_reason().c_str());
  DDL_RETURN_IF_ERROR(classify_call(call, &t->where));  // checked above; for the context
  Status s = device_state(comm, &t->state);
  if (!s.ok()) return s.prefix(call_words(comm, call));
  auto stream = static_cast<CUstream>(stream_handle);
  // The stream's context (the default stream: the current one) is where events live.
  if (t->cu->stream_get_ctx) t->cu->stream_get_ctx(stream, &t->context);
  if (!t->context) t->context = t->where.context;
  if (!t->context) t->cu->ctx_get_current(&t->context);
  if (!t->context)
    return invalid_usage("%sno CUDA context is current and the stream names none",
                         call_words(comm, call).c_str());
  return Status::Ok();
}

}  // namespace

bool queues_on_stream(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kBroadcast ||
         collective == Collective::kAllgather || collective == Collective::kReduceScatter;
}

Status queue_alone(ddl_comm *comm, const CollectiveCall &call, void *stream_handle, bool *queued) {
  *queued = false;
  if (comm->nranks != 1) return Status::Ok();
  StreamTarget t;
  DDL_RETURN_IF_ERROR(stream_target(comm, call, stream_handle, &t));
  if (t.where.kind != MemoryKind::kDevice || !t.cu->memcpy_dtod_async) return Status::Ok();
  const std::string context = call_words(comm, call);
  DDL_RETURN_IF_ERROR(check_usable(comm, context));
  // An allreduce, allgather or reduce-scatter of one rank copies its count; a broadcast's
  // buffer is its input and output.
  const size_t bytes =
      call.collective == Collective::kBroadcast ? 0 : call.count * datatype_size(call.dtype);
  if (bytes > 0 && call.sendbuf != call.recvbuf) {
    const CudaDriver &cu = *t.cu;
    ScopedContext scope(cu, t.context);
    const CUresult r = cu.memcpy_dtod_async(reinterpret_cast<CUdeviceptr>(call.recvbuf),
                                            reinterpret_cast<CUdeviceptr>(call.sendbuf), bytes,
                                            static_cast<CUstream>(stream_handle));
    if (r != kCudaSuccess) return cuda_failed(cu, "cuMemcpyDtoDAsync", r).prefix(context);
  }
  *queued = true;
  return Status::Ok();
}

bool stream_calls_async(ddl_comm *comm) {
  // DDL_CUDA_STREAM_ASYNC=1 or 0 forces a mode; unset, a communicator that spans hosts is
  // asynchronous (its device data is staged either way, and its network collective is long:
  // the caller's thread should not sit in it) and one inside a host host-synchronous (CUDA
  // IPC, milliseconds faster than staging for large buffers, is not queued on streams yet).
  static const std::string forced = env_string("DDL_CUDA_STREAM_ASYNC");
  if (forced == "0" || (forced != "1" && comm->hosts < 2)) return false;
  // The same answer on every rank (every rank has the same pids and hosts). Without a driver
  // there is nothing to run asynchronously.
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
    s = wait_event(cu, ready, deadline_of(comm), &comm->aborted,
                   "waiting for the work queued on the stream before the call");
  }
  if (ready) cu.event_destroy(ready);
  if (s.ok()) return s;
  return s.prefix(call_words(comm, call));
}

Status start_stream_call(ddl_comm *comm, CollectiveCall *call, void *stream_handle,
                         bool *on_device_only) {
  *on_device_only = false;
  auto context = [&] { return call_words(comm, *call); };
  StreamTarget t;
  DDL_RETURN_IF_ERROR(stream_target(comm, *call, stream_handle, &t));
  const CudaDriver &cu = *t.cu;
  DeviceState *st = t.state;
  ScopedContext scope(cu, t.context);
  if (t.where.kind == MemoryKind::kDevice && stream_ipc_applies(comm, *st, *call)) {
    // Queued whole on the device, with no host collective to check the communicator: here.
    DDL_RETURN_IF_ERROR(check_usable(comm, context()));
    Status s = queue_stream_ipc(comm, *call, static_cast<CUstream>(stream_handle), t.context,
                                on_device_only);
    if (!s.ok()) return s.prefix(context());
    if (*on_device_only) return s;
  }
  std::unique_ptr<StagedChunks> chunks;
  if (t.where.kind == MemoryKind::kDevice)
    chunks = std::make_unique<StagedChunks>(comm, st->stage_bytes, *call);
  Record *r = nullptr;
  Status s = take_record(comm, st, t.context, chunks ? chunks->slot_bytes() : 0, &r);
  if (!s.ok()) return s.prefix(context());
  if (chunks) {
    s = make_slots(cu, r, chunks->slot_bytes());
    if (!s.ok()) {
      store_word(r, kDrained, 1);  // nothing was queued: free again
      return s.prefix(context());
    }
    chunks->use_slots(r->slots, r->slot_bytes);
  }
  store_word(r, kStaged, 0);
  store_word(r, kDone, 0);
  s = queue_program(cu, static_cast<CUstream>(stream_handle), t.context, r, chunks.get());
  if (!s.ok()) {
    // Whatever of the program was queued must not wait for a call that will not run.
    store_word(r, kDone, kReleaseAll);
    return s.prefix(context());
  }
  call->stream = new StreamCall{r, t.where};
  return Status::Ok();
}

Status run_stream_call(ddl_comm *comm, const CollectiveCall &call) {
  std::unique_ptr<StreamCall> op(call.stream);
  CollectiveCall plain = call;
  plain.stream = nullptr;
  Record *r = op->record;
  const bool device = op->where.kind == MemoryKind::kDevice;
  std::unique_ptr<StagedChunks> chunks;
  if (device) {
    chunks = std::make_unique<StagedChunks>(comm, comm->device->stage_bytes, plain);
    chunks->use_slots(r->slots, r->slot_bytes);
  }
  const size_t n = chunks ? chunks->chunks() : 1;
  Status s;
  for (size_t c = 0; c < n; ++c) {
    s = wait_word(*r, kStaged, static_cast<uint32_t>(c + 1), deadline_of(comm), &comm->aborted,
                  c == 0 ? "waiting for the work queued on the stream before the call"
                         : "copying a chunk of the device buffers to pinned memory");
    if (!s.ok()) {
      // This rank never joined (this chunk of) the collective: the peers inside it hear why.
      s.prefix(describe_call(comm, plain, static_cast<uint32_t>(comm->calls)) + ": ");
      if (comm->failure.ok() && !comm->aborted.load()) send_failure_notice(comm, s);
      break;
    }
    s = chunks ? dispatch(comm, chunks->host_call(c), CallPlace{})
               : dispatch(comm, plain, CallPlace{op->where, /*from_stream=*/true});
    if (!s.ok()) break;
    store_word(r, kDone, static_cast<uint32_t>(c + 1));
  }
  // The stream goes on whatever happened (on failure with what the slots hold).
  store_word(r, kDone, static_cast<uint32_t>(n));
  // No request carries a stream call's failure: the communicator's next call reports it.
  if (!s.ok() && comm->failure.ok() && !comm->aborted.load()) comm->failure = s;
  return s;
}

void destroy_stream_queue(DeviceState *st) {
  StreamQueue *queue = st->queue;
  if (!queue) return;
  st->queue = nullptr;
  const CudaDriver &cu = *st->cu;
  // Errors are ignored: the application may have destroyed its context already.
  ScopedContext scope(cu, queue->context);
  for (Record &r : queue->records)
    if (r.slots) cu.mem_free_host(r.slots);
  cu.mem_free_host(queue->words);
  delete queue;
}

}  // namespace device
}  // namespace ddl

#include "lib/device/stream_ipc.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/common/process_liveness.h"
#include "lib/core/comm.h"
#include "lib/core/dispatch.h"
#include "lib/core/progress.h"
#include "lib/device/cuda_ipc.h"
#include "lib/device/device_reduce.h"
#include "lib/device/device_state.h"
#include "lib/device/staging.h"

namespace ddl {
namespace device {

// The pinned words the barriers read and write, and the watcher's.
enum Word { kAbort = 0, kFailedNumber = 1, kFailedRank = 2, kPeerDied = 3 };

// What a communicator keeps for the path: its stream and events, this rank's scratch (a flag
// line, then the input and output regions), every rank's scratch as opened here, the pinned
// words (Word), and the watcher: a thread that looks every few milliseconds whether a peer
// process has died (all are on this host), and then ends the device's waits at once (abort)
// instead of at their deadline, naming the dead rank.
struct StreamIpc {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUevent before = nullptr;  // the caller's stream at the call
  CUevent after = nullptr;   // the end of the call on the communicator's stream
  CUdeviceptr scratch = 0;
  size_t region_bytes = 0;
  std::vector<CUdeviceptr> scratch_of;  // by rank (this rank's own: scratch)
  void *words = nullptr;                // Word; failed rank: + 1 (0: none)
  CUdeviceptr words_device = 0;
  uint32_t barriers = 0;  // numbers given to barriers (every rank numbers them alike)
  std::thread watcher;
  std::mutex watcher_mu;
  std::condition_variable watcher_wake;
  bool watcher_stop = false;
};

namespace {

constexpr size_t kFlagLine = 256;  // the scratch's first bytes: this rank's flag
constexpr uint64_t kDefaultRegionBytes = 32ull << 20;
constexpr int kMaxRanks = kernels::kMaxBarrierRanks;

uint32_t *words_of(const StreamIpc &p) {
  return static_cast<uint32_t *>(p.words);
}

// The watcher's loop (see StreamIpc): pids of 0 are in another PID namespace (not watched).
void watch_peers(StreamIpc *p, std::vector<pid_t> pids, int rank) {
  std::unique_lock<std::mutex> lock(p->watcher_mu);
  while (!p->watcher_wake.wait_for(lock, std::chrono::milliseconds(20),
                                   [p] { return p->watcher_stop; })) {
    for (size_t q = 0; q < pids.size(); ++q) {
      if (static_cast<int>(q) == rank || pids[q] == 0 || process_is_alive(pids[q])) continue;
      uint32_t *w = words_of(*p);
      __atomic_store_n(&w[kPeerDied], 1u, __ATOMIC_RELEASE);
      uint32_t none = 0;
      __atomic_compare_exchange_n(&w[kFailedRank], &none, static_cast<uint32_t>(q) + 1, false,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      __atomic_store_n(&w[kAbort], 1u, __ATOMIC_RELEASE);
      return;
    }
  }
}

void stop_watcher(StreamIpc *p) {
  if (!p->watcher.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(p->watcher_mu);
    p->watcher_stop = true;
  }
  p->watcher_wake.notify_all();
  p->watcher.join();
}

// Closes the peers' scratch opened here.
void close_imports(const CudaDriver &cu, StreamIpc *p, int rank) {
  ScopedContext scope(cu, p->context);
  for (size_t q = 0; q < p->scratch_of.size(); ++q)
    if (static_cast<int>(q) != rank && p->scratch_of[q]) cu.ipc_close_mem_handle(p->scratch_of[q]);
  p->scratch_of.clear();
}

// Freeing a scratch another process still has open is undefined: once every rank has closed
// its imports (close_imports, then this host barrier; a failed communicator or a rank that
// never comes skips it at the deadline).
void wait_until_imports_closed(ddl_comm *comm) {
  CollectiveCall barrier;
  barrier.collective = Collective::kBarrier;
  const Status s = run_blocking(comm, barrier);
  if (!s.ok())
    DDL_DEBUG("rank %d: the CUDA-IPC scratch freed without the last barrier: %s", comm->rank,
              s.message().c_str());
}

// Frees what was made (any part of it), with its context current.
void release(const CudaDriver &cu, StreamIpc *p, int rank) {
  stop_watcher(p);
  close_imports(cu, p, rank);
  ScopedContext scope(cu, p->context);
  if (p->scratch) cu.mem_free(p->scratch);
  if (p->before) cu.event_destroy(p->before);
  if (p->after) cu.event_destroy(p->after);
  if (p->stream) cu.stream_destroy(p->stream);
  if (p->words) cu.mem_free_host(p->words);
  delete p;
}

// This rank's part of the set-up: stream, events, words, scratch (its flag zeroed) and the
// scratch's handle.
Status make_local(const CudaDriver &cu, ddl_comm *comm, StreamIpc *p, CUipcMemHandle *handle) {
  uint64_t region = kDefaultRegionBytes;
  const std::string text = env_string("DDL_CUDA_IPC_SCRATCH");
  if (!text.empty() && (!parse_bytes(text, &region) || region < 4096 || region > (4ull << 30)))
    return invalid_argument("DDL_CUDA_IPC_SCRATCH=%s: expected bytes in 4K..4G (e.g. 32M)",
                            text.c_str());
  p->region_bytes = region;
  DDL_CU_TRY(cu, stream_create(&p->stream, kStreamNonBlocking), "cuStreamCreate");
  DDL_CU_TRY(cu, event_create(&p->before, kEventDisableTiming), "cuEventCreate");
  DDL_CU_TRY(cu, event_create(&p->after, kEventDisableTiming), "cuEventCreate");
  DDL_CU_TRY(cu, mem_host_alloc(&p->words, 64, kMemHostAllocPortable | kMemHostAllocDeviceMap),
             "cuMemHostAlloc (the device barriers' words)");
  std::memset(p->words, 0, 64);
  DDL_CU_TRY(cu, mem_host_get_device_pointer(&p->words_device, p->words, 0),
             "cuMemHostGetDevicePointer");
  DDL_CU_TRY(cu, mem_alloc(&p->scratch, kFlagLine + 2 * region), "cuMemAlloc (CUDA-IPC scratch)");
  static const unsigned char zeros[kFlagLine] = {};
  DDL_CU_TRY(cu, memcpy_htod_async(p->scratch, zeros, kFlagLine, p->stream), "cuMemcpyHtoDAsync");
  DDL_CU_TRY(cu, event_record(p->after, p->stream), "cuEventRecord");
  DDL_RETURN_IF_ERROR(wait_event(cu, p->after, deadline_of(comm), &comm->aborted,
                                 "zeroing the CUDA-IPC scratch's flag"));
  DDL_CU_TRY(cu, ipc_get_mem_handle(handle, p->scratch), "cuIpcGetMemHandle (CUDA-IPC scratch)");
  return Status::Ok();
}

// Every rank's answer to one question (a blocking host allgather): whether all said yes. The
// scratch's size too: it sets the chunks, and so the barriers' numbers, which must agree.
struct SetupRecord {
  uint32_t ok = 0;
  uint32_t pad = 0;
  uint64_t region_bytes = 0;
  CUipcMemHandle handle = {};
};

Status allgather_records(ddl_comm *comm, const SetupRecord &mine, std::vector<SetupRecord> *all) {
  all->assign(static_cast<size_t>(comm->nranks), SetupRecord());
  CollectiveCall gather;
  gather.collective = Collective::kAllgather;
  gather.sendbuf = &mine;
  gather.recvbuf = all->data();
  gather.count = sizeof(SetupRecord);
  gather.dtype = DDL_UINT8;
  return run_blocking(comm, gather);
}

bool all_ok(const std::vector<SetupRecord> &records) {
  for (const SetupRecord &r : records)
    if (!r.ok || r.region_bytes != records[0].region_bytes) return false;
  return true;
}

// The first call's set-up with every rank: the communicator's path, or null (refused by some
// rank, every rank alike) with the reason logged.
Status set_up(ddl_comm *comm, DeviceState *st, CUcontext context) {
  const CudaDriver &cu = *st->cu;
  ScopedContext scope(cu, context);
  auto *p = new StreamIpc();
  p->context = context;
  SetupRecord mine;
  Status local = make_local(cu, comm, p, &mine.handle);
  mine.ok = local.ok();
  mine.region_bytes = p->region_bytes;
  std::vector<SetupRecord> all;
  Status s = allgather_records(comm, mine, &all);
  if (s.ok() && all_ok(all)) {
    // Every rank's scratch, opened here; then whether every rank opened every other's.
    p->scratch_of.assign(all.size(), 0);
    for (size_t q = 0; q < all.size() && local.ok(); ++q) {
      if (static_cast<int>(q) == comm->rank) {
        p->scratch_of[q] = p->scratch;
        continue;
      }
      const CUresult r =
          cu.ipc_open_mem_handle(&p->scratch_of[q], all[q].handle, kIpcMemLazyEnablePeerAccess);
      if (r != kCudaSuccess)
        local = cuda_failed(cu, "cuIpcOpenMemHandle (a peer's CUDA-IPC scratch)", r);
    }
    mine.ok = local.ok();
    s = allgather_records(comm, mine, &all);
  }
  if (!s.ok()) {
    release(cu, p, comm->rank);
    return s.prefix("setting up the CUDA-IPC allreduce on streams: ");
  }
  if (!all_ok(all)) {
    if (!p->scratch_of.empty()) {  // peers may have opened this rank's scratch
      close_imports(cu, p, comm->rank);
      wait_until_imports_closed(comm);
    }
    release(cu, p, comm->rank);
    st->stream_ipc_refused = true;
    int refusing = 0;
    while (refusing + 1 < static_cast<int>(all.size()) && all[refusing].ok) ++refusing;
    // The rank that could not says why (a bad DDL_CUDA_IPC_SCRATCH among the reasons).
    if (!local.ok())
      DDL_WARN("allreduce of device buffers on streams: staged, not over CUDA IPC: %s",
               local.message().c_str());
    else if (all[refusing].ok) {
      size_t other = 1;
      while (all[other].region_bytes == all[0].region_bytes) ++other;
      DDL_WARN(
          "allreduce of device buffers on streams: staged, not over CUDA IPC: "
          "DDL_CUDA_IPC_SCRATCH differs between the ranks (rank 0: %llu B, rank %zu: %llu B)",
          static_cast<unsigned long long>(all[0].region_bytes), other,
          static_cast<unsigned long long>(all[other].region_bytes));
    } else
      DDL_INFO(
          "allreduce of device buffers on streams: staged, not over CUDA IPC: rank %d could "
          "not set it up",
          refusing);
    return Status::Ok();
  }
  p->watcher = std::thread(watch_peers, p, comm->pids, comm->rank);
  st->stream_ipc.store(p, std::memory_order_release);
  DDL_INFO(
      "allreduce of device buffers on streams: over CUDA IPC on the device (%zu B of scratch "
      "per region, barriers on the device)",
      p->region_bytes);
  return Status::Ok();
}

// Queues the next barrier on the communicator's stream.
Status queue_barrier(const CudaDriver &cu, StreamIpc *p, int timeout_ms) {
  kernels::IpcBarrierArgs args{};
  args.own = reinterpret_cast<unsigned *>(p->scratch);
  args.nranks = static_cast<int>(p->scratch_of.size());
  for (int q = 0; q < args.nranks; ++q)
    args.flags[q] = reinterpret_cast<const volatile unsigned *>(p->scratch_of[q]);
  args.number = ++p->barriers;
  args.timeout_ns = static_cast<unsigned long long>(timeout_ms) * 1000000ull;
  args.abort =
      reinterpret_cast<const volatile unsigned *>(p->words_device + kAbort * sizeof(uint32_t));
  args.failed =
      reinterpret_cast<volatile unsigned *>(p->words_device + kFailedNumber * sizeof(uint32_t));
  return launch_ipc_barrier(cu, p->stream, p->context, args);
}

// The elements of rank q's block of a chunk of n: [n*q/N, n*(q+1)/N).
size_t block_begin(size_t n, int q, int nranks) {
  return n * static_cast<size_t>(q) / static_cast<size_t>(nranks);
}

Status queue_chunk(const CudaDriver &cu, ddl_comm *comm, StreamIpc *p, const CollectiveCall &call,
                   size_t first, size_t n) {
  const size_t elem = datatype_size(call.dtype);
  const int nranks = comm->nranks, me = comm->rank;
  const CUdeviceptr in_region = kFlagLine, out_region = kFlagLine + p->region_bytes;
  const auto send = reinterpret_cast<CUdeviceptr>(call.sendbuf) + first * elem;
  const auto recv = reinterpret_cast<CUdeviceptr>(call.recvbuf) + first * elem;
  // Only the peers read the input region, and only their blocks: this rank's own block is
  // reduced straight out of its input, one copy fewer of 1/n of the chunk.
  const size_t begin = block_begin(n, me, nranks), end = block_begin(n, me + 1, nranks);
  if (begin > 0)
    DDL_CU_TRY(cu, memcpy_dtod_async(p->scratch + in_region, send, begin * elem, p->stream),
               "cuMemcpyDtoDAsync (into the CUDA-IPC scratch)");
  if (n > end)
    DDL_CU_TRY(cu,
               memcpy_dtod_async(p->scratch + in_region + end * elem, send + end * elem,
                                 (n - end) * elem, p->stream),
               "cuMemcpyDtoDAsync (into the CUDA-IPC scratch)");
  DDL_RETURN_IF_ERROR(queue_barrier(cu, p, comm->config.timeout_ms));
  if (end > begin) {
    const void *srcs[kMaxRanks];
    for (int q = 0; q < nranks; ++q)
      srcs[q] = reinterpret_cast<const void *>((q == me ? send : p->scratch_of[q] + in_region) +
                                               begin * elem);
    DDL_RETURN_IF_ERROR(device_reduce(
        cu, p->stream, reinterpret_cast<void *>(p->scratch + out_region + begin * elem), srcs,
        nranks, end - begin, static_cast<ddl_datatype_t>(call.dtype),
        static_cast<ddl_op_t>(call.op), nranks));
  }
  DDL_RETURN_IF_ERROR(queue_barrier(cu, p, comm->config.timeout_ms));
  for (int k = 0; k < nranks; ++k) {
    const int q = (me + k) % nranks;  // from the next rank on: not every rank reads one at once
    const size_t b = block_begin(n, q, nranks), e = block_begin(n, q + 1, nranks);
    if (e > b)
      DDL_CU_TRY(cu,
                 memcpy_dtod_async(recv + b * elem, p->scratch_of[q] + out_region + b * elem,
                                   (e - b) * elem, p->stream),
                 "cuMemcpyDtoDAsync (out of a CUDA-IPC scratch)");
  }
  return Status::Ok();
}

}  // namespace

bool stream_ipc_applies(const ddl_comm *comm, const DeviceState &st, const CollectiveCall &call) {
  if (st.stream_ipc_refused) return false;
  const CudaDriver &cu = *st.cu;
  return comm->nranks <= kMaxRanks && cu.mem_alloc && cu.mem_free && cu.stream_wait_event &&
         cuda_ipc_possible(comm, call, nullptr);
}

Status queue_stream_ipc(ddl_comm *comm, const CollectiveCall &call, CUstream stream,
                        CUcontext context, bool *queued) {
  *queued = false;
  DeviceState *st = nullptr;
  DDL_RETURN_IF_ERROR(device_state(comm, &st));
  const CudaDriver &cu = *st->cu;
  StreamIpc *p = st->stream_ipc.load(std::memory_order_acquire);
  if (!p) {
    DDL_RETURN_IF_ERROR(set_up(comm, st, context));
    p = st->stream_ipc.load(std::memory_order_acquire);
    if (!p) return Status::Ok();  // refused: staged
  }
  if (context != p->context)
    return unsupported(
        "the stream's CUDA context is not the one of the communicator's first stream-ordered "
        "allreduce (one context per communicator on this path)");
  ScopedContext scope(cu, context);
  DDL_CU_TRY(cu, event_record(p->before, stream), "cuEventRecord on the caller's stream");
  DDL_CU_TRY(cu, stream_wait_event(p->stream, p->before, 0), "cuStreamWaitEvent");
  const size_t per_chunk = p->region_bytes / datatype_size(call.dtype);
  for (size_t first = 0; first < call.count; first += per_chunk)
    DDL_RETURN_IF_ERROR(
        queue_chunk(cu, comm, p, call, first, std::min(per_chunk, call.count - first)));
  DDL_CU_TRY(cu, event_record(p->after, p->stream), "cuEventRecord");
  DDL_CU_TRY(cu, stream_wait_event(stream, p->after, 0),
             "cuStreamWaitEvent on the caller's stream");
  *queued = true;
  return Status::Ok();
}

Status stream_ipc_failure(ddl_comm *comm) {
  DeviceState *st = comm->device;
  StreamIpc *p = st ? st->stream_ipc.load(std::memory_order_acquire) : nullptr;
  if (!p) return Status::Ok();
  const uint32_t *w = words_of(*p);
  const uint32_t failed = __atomic_load_n(&w[kFailedRank], __ATOMIC_ACQUIRE);
  if (failed == 0) return Status::Ok();
  const int peer = static_cast<int>(failed) - 1;
  if (__atomic_load_n(&w[kPeerDied], __ATOMIC_ACQUIRE))
    return Status(DDL_ERR_REMOTE,
                  strprintf("rank %d: allreduce of device buffers over CUDA IPC on the stream: "
                            "rank %d (pid %d on this host) has died; the calls on the stream "
                            "from then on have undefined results",
                            comm->rank, peer, static_cast<int>(comm->pids[peer])));
  return timeout_error(
      "rank %d: allreduce of device buffers over CUDA IPC on the stream: rank %d did not reach "
      "barrier %u within %d ms (DDL_TIMEOUT_MS) on the device; that call and the later ones "
      "on this communicator have undefined results",
      comm->rank, peer, __atomic_load_n(&w[kFailedNumber], __ATOMIC_ACQUIRE),
      comm->config.timeout_ms);
}

void abort_stream_ipc(ddl_comm *comm) {
  DeviceState *st = existing_device_state(comm);
  StreamIpc *p = st ? st->stream_ipc.load(std::memory_order_acquire) : nullptr;
  if (p) __atomic_store_n(&words_of(*p)[kAbort], 1u, __ATOMIC_RELEASE);
}

void destroy_stream_ipc(ddl_comm *comm, DeviceState *st) {
  StreamIpc *p = st->stream_ipc.exchange(nullptr);
  if (!p) return;
  const CudaDriver &cu = *st->cu;
  {
    // Errors are ignored: the application may have destroyed its context already. This
    // rank's calls end first (its reads of the peers' scratch), then it closes what it opened.
    ScopedContext scope(cu, p->context);
    if (cu.event_record(p->after, p->stream) == kCudaSuccess)
      wait_event(cu, p->after, deadline_of(comm), nullptr,
                 "the last CUDA-IPC allreduces on the stream");
  }
  close_imports(cu, p, comm->rank);
  wait_until_imports_closed(comm);
  release(cu, p, comm->rank);
}

}  // namespace device
}  // namespace ddl

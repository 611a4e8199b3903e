#include "lib/device/cuda_ipc.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/collectives.h"
#include "lib/core/comm.h"
#include "lib/device/device_state.h"

namespace ddl {
namespace device {
namespace {

// Past this many opened allocations a call closes those it did not use.
constexpr size_t kMaxOpened = 256;
// The barriers travel in the same call as the exchange: their tags start above its tags.
constexpr uint32_t kBarrierTagOffset[2] = {1u << 22, 2u << 22};
constexpr uint32_t kVoteTagOffset = 3u << 22;
// Allocations waiting for a caller's thread to open them: beyond this, calls stay staged.
constexpr size_t kMaxPending = 64;

void close_opened(const CudaDriver &cu, IpcState *ipc, bool all, uint64_t keep_call) {
  for (auto it = ipc->opened.begin(); it != ipc->opened.end();) {
    if (all || it->second.last_call != keep_call) {
      const CUresult r = cu.ipc_close_mem_handle(it->second.base);
      if (r != kCudaSuccess)
        DDL_DEBUG("cuIpcCloseMemHandle of rank %d's allocation: %s", it->first.first,
                  cuda_error_text(cu, r).c_str());
      it = ipc->opened.erase(it);
    } else {
      ++it;
    }
  }
}

Status make_plans(ddl_comm *comm, IpcState *ipc, size_t record_bytes) {
  CollectiveArgs args;
  args.nranks = comm->nranks;
  args.rank = comm->rank;
  args.elem_size = 1;
  args.collective = Collective::kAllgather;
  args.count = record_bytes;
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args, 0, &ipc->exchange, nullptr));
  args.count = sizeof(uint32_t);
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args, kVoteTagOffset, &ipc->vote, nullptr));
  args.collective = Collective::kBarrier;
  args.count = 0;
  for (int b = 0; b < 2; ++b)
    DDL_RETURN_IF_ERROR(
        make_comm_plan(comm, args, kBarrierTagOffset[b], &ipc->barrier[b], nullptr));
  return Status::Ok();
}

}  // namespace

Status describe_buffer(const CudaDriver &cu, const void *ptr, size_t bytes, IpcBufferRef *ref) {
  const auto address = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr base = 0;
  size_t alloc_bytes = 0;
  CUresult r = cu.mem_get_address_range(&base, &alloc_bytes, address);
  if (r != kCudaSuccess) return cuda_failed(cu, strprintf("cuMemGetAddressRange(%p)", ptr), r);
  if (address + bytes > base + alloc_bytes)
    return invalid_argument("%p + %zu B runs past its allocation (%zu B at %#llx)", ptr, bytes,
                            alloc_bytes, base);
  // A handle per call (a few microseconds): one cached by address would go stale when the
  // allocation is freed and another made at the same address.
  r = cu.ipc_get_mem_handle(&ref->handle, base);
  if (r != kCudaSuccess)
    return cuda_failed(
        cu, strprintf("cuIpcGetMemHandle of the allocation at %#llx holding %p", base, ptr), r);
  ref->base = base;
  ref->offset = address - base;
  ref->alloc_bytes = alloc_bytes;
  return Status::Ok();
}

Status prepare_ipc(ddl_comm *comm, DeviceState *st, CUcontext context, size_t record_bytes,
                   IpcState **out) {
  const CudaDriver &cu = *st->cu;
  std::lock_guard<std::mutex> lock(st->ipc_mu);  // a caller's thread and the progress thread
  if (st->ipc && st->ipc->context != context) {
    destroy_ipc_state(cu, st->ipc);
    delete st->ipc;
    st->ipc = nullptr;
  }
  if (!st->ipc) {
    std::unique_ptr<IpcState> ipc(new IpcState());
    ipc->context = context;
    ipc->close_each_call = env_string("DDL_CUDA_IPC_CACHE") == "0";
    CUresult r = cu.stream_create(&ipc->stream, kStreamNonBlocking);
    if (r == kCudaSuccess) r = cu.event_create(&ipc->done, kEventDisableTiming);
    if (r == kCudaSuccess) r = cu.event_create(&ipc->ready, kEventDisableTiming);
    if (r != kCudaSuccess) {
      destroy_ipc_state(cu, ipc.get());
      return cuda_failed(cu, "making the CUDA-IPC stream and events", r);
    }
    Status s = make_plans(comm, ipc.get(), record_bytes);
    if (!s.ok()) {
      destroy_ipc_state(cu, ipc.get());
      return s;
    }
    st->ipc = ipc.release();
  }
  *out = st->ipc;
  return Status::Ok();
}

std::pair<int, std::string> opened_key(int peer, const IpcBufferRef &ref) {
  return std::make_pair(peer, std::string(ref.handle.reserved, sizeof ref.handle.reserved));
}

namespace {

Status open_allocation(ddl_comm *comm, int peer, const IpcBufferRef &ref, CUdeviceptr *base) {
  const CudaDriver &cu = *comm->device->cu;
  const CUresult r = cu.ipc_open_mem_handle(base, ref.handle, kIpcMemLazyEnablePeerAccess);
  if (r == kCudaSuccess) return Status::Ok();
  return cuda_failed(
      cu,
      strprintf("cuIpcOpenMemHandle of rank %d's allocation (%llu B at %#llx in pid %d)", peer,
                static_cast<unsigned long long>(ref.alloc_bytes),
                static_cast<unsigned long long>(ref.base), static_cast<int>(comm->pids[peer])),
      r);
}

}  // namespace

Status peer_address(ddl_comm *comm, IpcState *ipc, int peer, const IpcBufferRef &ref,
                    uint64_t call_number, CUdeviceptr *out) {
  if (comm->pids[peer] == getpid()) {  // ranks as threads of one process
    *out = ref.base + ref.offset;
    return Status::Ok();
  }
  const auto key = opened_key(peer, ref);
  std::lock_guard<std::mutex> lock(ipc->mu);
  auto it = ipc->opened.find(key);
  if (it == ipc->opened.end()) {
    if (!may_sync_device(comm))  // the vote keeps such calls from getting here
      return Status(DDL_ERR_INTERNAL,
                    strprintf("rank %d's allocation is not open, and the progress thread may not "
                              "open it while streams wait for it",
                              peer));
    IpcState::Opened opened;
    DDL_RETURN_IF_ERROR(open_allocation(comm, peer, ref, &opened.base));
    it = ipc->opened.emplace(key, opened).first;
  }
  it->second.last_call = call_number;
  *out = it->second.base + ref.offset;
  return Status::Ok();
}

bool peer_is_open(ddl_comm *comm, IpcState *ipc, int peer, const IpcBufferRef &ref, bool remember) {
  if (comm->pids[peer] == getpid()) return true;
  const auto key = opened_key(peer, ref);
  std::lock_guard<std::mutex> lock(ipc->mu);
  if (ipc->opened.count(key)) return true;
  if (remember && ipc->pending.size() < kMaxPending) {
    for (const auto &p : ipc->pending)
      if (opened_key(p.first, p.second) == key) return false;
    ipc->pending.emplace_back(peer, ref);
  }
  return false;
}

void open_pending(ddl_comm *comm, IpcState *ipc) {
  std::vector<std::pair<int, IpcBufferRef>> pending;
  {
    std::lock_guard<std::mutex> lock(ipc->mu);
    pending.swap(ipc->pending);
  }
  if (pending.empty()) return;
  // Not under the lock: an open may wait for the device, whose streams may wait for calls
  // the progress thread is running, which reads the cache.
  ScopedContext scope(*comm->device->cu, ipc->context);
  for (const auto &p : pending) {
    IpcState::Opened opened;
    const Status s = open_allocation(comm, p.first, p.second, &opened.base);
    if (!s.ok()) {
      DDL_DEBUG("rank %d: %s (dropped: the call that needs it again stages)", comm->rank,
                s.message().c_str());
      continue;
    }
    std::lock_guard<std::mutex> lock(ipc->mu);
    if (!ipc->opened.emplace(opened_key(p.first, p.second), opened).second)
      comm->device->cu->ipc_close_mem_handle(opened.base);  // opened twice: keep one
  }
}

void end_ipc_call(ddl_comm *comm, IpcState *ipc, uint64_t call_number) {
  if (!may_sync_device(comm)) return;
  const CudaDriver &cu = *comm->device->cu;
  std::lock_guard<std::mutex> lock(ipc->mu);
  if (ipc->close_each_call)
    close_opened(cu, ipc, true, 0);
  else if (ipc->opened.size() > kMaxOpened)
    close_opened(cu, ipc, false, call_number);
}

void destroy_ipc_state(const CudaDriver &cu, IpcState *ipc) {
  ScopedContext scope(cu, ipc->context);
  close_opened(cu, ipc, true, 0);
  if (ipc->stream) cu.stream_destroy(ipc->stream);  // idle: every call waits for its work
  if (ipc->done) cu.event_destroy(ipc->done);
  if (ipc->ready) cu.event_destroy(ipc->ready);
  ipc->stream = nullptr;
  ipc->done = ipc->ready = nullptr;
}

}  // namespace device
}  // namespace ddl

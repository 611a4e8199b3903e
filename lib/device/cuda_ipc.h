// CUDA IPC inside a host, the parts that do not depend on the collective: what a rank
// publishes about one of its device buffers, and what a communicator keeps for the path (a
// stream, events, the host-side exchange and barrier plans, and peers' allocations opened in
// this process).
//
// Opened allocations are cached per communicator and closed when it is destroyed: opening a
// handle costs the driver milliseconds, and training loops pass the same buffers call after
// call. The driver calls cuMemFree of an exported allocation that another process still has
// open undefined behaviour: a buffer given to a device collective should outlive the
// communicator, or DDL_CUDA_IPC_CACHE=0 closes what a call opened at its end (slow, safe).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/device/cuda_driver.h"
#include "lib/exec/plan.h"

struct ddl_comm;

namespace ddl {
namespace device {

struct DeviceState;

// Where one device buffer lies, as another process finds it: the handle of the allocation
// that holds it (cuIpcGetMemHandle takes allocation bases only) and the offset within.
// `base` is the allocation's address in the owner's process: a peer in the same process (ranks
// as threads) uses it directly, as a process cannot open its own handles.
struct IpcBufferRef {
  CUipcMemHandle handle = {};
  uint64_t base = 0;
  uint64_t offset = 0;
  uint64_t alloc_bytes = 0;
};

// *ref for the `bytes` at ptr (current context: the buffer's). An error says why the
// allocation cannot be exported (memory from another allocator, managed memory).
Status describe_buffer(const CudaDriver &cu, const void *ptr, size_t bytes, IpcBufferRef *ref);

struct IpcState {
  CUcontext context = nullptr;
  CUstream stream = nullptr;     // the calls' kernels and copies (non-blocking)
  CUevent done = nullptr;        // the stream's work of a phase has ended
  CUevent ready = nullptr;       // blocking calls: the default stream's work before the call
  bool close_each_call = false;  // DDL_CUDA_IPC_CACHE=0
  // Host-side plans: the exchange of IpcRecords (an allgather carrying the call's signature),
  // the vote of calls that may not open allocations (an allgather of one word: may every
  // rank go on?) and the two barriers between the phases.
  std::unique_ptr<Plan> exchange, vote, barrier[2];
  struct Opened {
    CUdeviceptr base = 0;
    uint64_t last_call = 0;  // ddl_comm::calls of the last call that used it
  };
  // `opened` and `pending` are shared by the progress thread (which reads the cache) and the
  // callers' threads (which open what calls on the progress thread could not: the rule in
  // device_state.h).
  std::mutex mu;
  std::map<std::pair<int, std::string>, Opened> opened;  // by (peer rank, handle bytes)
  std::vector<std::pair<int, IpcBufferRef>> pending;     // (peer rank, buffer) to open
};

// The key of rank `peer`'s allocation in IpcState::opened.
std::pair<int, std::string> opened_key(int peer, const IpcBufferRef &ref);

// The communicator's IPC state for buffers of `context` (made, or remade for another
// context, here); with `context` current.
Status prepare_ipc(ddl_comm *comm, DeviceState *st, CUcontext context, size_t record_bytes,
                   IpcState **out);

// rank `peer`'s buffer, described by ref, as an address in this process (opened on first use,
// with `context` current). call_number marks the cache entry as used by this call.
Status peer_address(ddl_comm *comm, IpcState *ipc, int peer, const IpcBufferRef &ref,
                    uint64_t call_number, CUdeviceptr *out);

// Whether peer_address would find rank `peer`'s buffer without opening anything; if not, and
// `remember`, it is queued for open_pending.
bool peer_is_open(ddl_comm *comm, IpcState *ipc, int peer, const IpcBufferRef &ref, bool remember);

// On a caller's thread: opens the allocations calls on the progress thread could not (with the
// IPC context current). One that fails (freed since) is dropped: the call that needs it again
// votes for the staged path and queues it anew.
void open_pending(ddl_comm *comm, IpcState *ipc);

// After a call: closes what it opened when the cache is off, and trims a cache that grew past
// its bound to what this call used (allocations freed by their owners are never used again).
// Not on a progress thread that may not synchronize the device: its cache only grows.
void end_ipc_call(ddl_comm *comm, IpcState *ipc, uint64_t call_number);

// Closes every opened allocation and frees the stream and events (errors ignored).
void destroy_ipc_state(const CudaDriver &cu, IpcState *ipc);

}  // namespace device
}  // namespace ddl

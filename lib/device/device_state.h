// What a communicator keeps for device buffers: pinned staging slots, a copy stream and its
// events (used only by the thread that runs collectives), the CUDA-IPC path's state, and the
// asynchronous stream mode's records (stream_calls.cc).
//
// The rule of the asynchronous stream mode: while a caller's stream waits for ddl, the
// progress thread makes no driver call that synchronizes the device (pinned or device
// allocation and free, opening or closing a peer's allocation, loading a module): such a call
// waits for that stream, which waits for the progress thread. What a nonblocking call on
// device buffers needs is therefore made on the caller's thread before it is queued
// (prepare_queued_call), and may_sync_device says where the rule holds. Stream-ordered calls
// themselves go further: their progress thread part makes no driver call at all.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/device/cuda_driver.h"

struct ddl_comm;

namespace ddl {
namespace device {

struct IpcState;     // lib/device/cuda_ipc.h
struct StreamQueue;  // lib/device/stream_calls.cc
struct StreamIpc;    // lib/device/stream_ipc.cc

struct DeviceState {
  const CudaDriver *cu = nullptr;
  // No two ranks of the communicator share a process (its pids, fixed): a condition of the
  // asynchronous stream mode (stream_calls_async), worked out once.
  bool one_process_per_rank = true;
  size_t stage_bytes = 0;  // DDL_CUDA_STAGE_BYTES: one stage's pinned slot
  bool logged_path = false;
  std::set<std::string> paths_logged;  // "allreduce of device buffers: staged ...", once each
  std::mutex ipc_mu;                   // making `ipc` (callers' and progress threads)
  IpcState *ipc = nullptr;             // the CUDA-IPC path's stream, plans and opened handles

  // Staging: two slots of slot_bytes each (PORTABLE: usable from every context), and the
  // copy stream and events of the context they were made in.
  std::mutex staging_mu;  // the slots and copy stream (callers' and progress threads)
  unsigned char *slots = nullptr;
  size_t slot_bytes = 0;
  // Slots outgrown while a call may still use them: freed with the communicator (growing is
  // rare: only a call whose one element per rank exceeds DDL_CUDA_STAGE_BYTES needs more).
  std::vector<void *> retired_slots;
  CUcontext context = nullptr;
  CUstream copy_stream = nullptr;
  CUevent staged[2] = {nullptr, nullptr};  // a slot's input is in (and its last output out)
  CUevent drained = nullptr;               // every copy of the call has ended

  // The CUDA-IPC allreduce queued on streams (stream_ipc.h): set up at the first such call
  // (read by ddl_comm_abort from any thread), or refused for good by some rank.
  std::atomic<StreamIpc *> stream_ipc{nullptr};
  bool stream_ipc_refused = false;
  // The asynchronous stream mode's records (stream_calls.cc), made by a caller on first use.
  std::mutex queue_mu;  // taking a record (callers' threads)
  StreamQueue *queue = nullptr;
};

// The communicator's state, made on first use (thread-safe).
Status device_state(ddl_comm *comm, DeviceState **out);
// The state if made already, else null, from any thread (ddl_comm_abort).
DeviceState *existing_device_state(ddl_comm *comm);

// Whether this thread may make driver calls that synchronize the device: not the progress
// thread of a communicator whose stream-ordered calls are asynchronous (the rule above).
bool may_sync_device(ddl_comm *comm);

// Closes the peers' allocations opened by the CUDA-IPC path and frees its stream (at
// destroy, after the progress thread has ended).
void destroy_ipc(DeviceState *st);
// Frees the asynchronous stream mode's records (likewise).
void destroy_stream_queue(DeviceState *st);

// The communicator's deadline for a wait that starts now (DDL_TIMEOUT_MS).
std::chrono::steady_clock::time_point deadline_of(const ddl_comm *comm);

// Between two polls of a wait: an error once abort is raised or the deadline has passed (`what`
// names the wait in it), else a pause that grows with the rounds (yields, then 50 us sleeps:
// a long wait must not take a core from the ranks).
Status pause_between_polls(uint64_t round, std::chrono::steady_clock::time_point deadline,
                           const std::atomic<bool> *abort, const char *what);

// Polls event until it has happened, the deadline passes, or abort is raised. `what` names
// the wait in the error.
Status wait_event(const CudaDriver &cu, CUevent event,
                  std::chrono::steady_clock::time_point deadline, const std::atomic<bool> *abort,
                  const char *what);

}  // namespace device
}  // namespace ddl

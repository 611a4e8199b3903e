// What a communicator keeps for device buffers: pinned staging slots, a copy stream and its
// events (used only by the thread that runs collectives), and the pinned flag that releases
// stream-ordered calls (written by that thread, its address handed to the callers' streams).
//
// The rule of the asynchronous stream mode (stream_calls.cc): while a caller's stream waits
// on the flag, the progress thread makes no driver call that synchronizes the device
// (pinned or device allocation and free, opening or closing a peer's allocation, loading a
// module): such a call waits for that stream, which waits for the progress thread. What a
// queued call needs is therefore made on the caller's thread before it is queued
// (prepare_queued_call), and may_sync_device says where the rule holds.
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

struct IpcState;  // lib/device/cuda_ipc.h

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

  // Stream-ordered calls: the number of the last one that ended, in pinned memory mapped for
  // the device. Callers' streams wait until it reaches their call's number.
  std::mutex flag_mu;  // making the flag (callers' threads)
  uint32_t *flag = nullptr;
  CUdeviceptr flag_device = 0;
  CUcontext flag_context = nullptr;
  uint32_t issued = 0;  // numbers given to calls (the calling thread, under CommCall)
};

// The communicator's state, made on first use (thread-safe).
Status device_state(ddl_comm *comm, DeviceState **out);

// Whether this thread may make driver calls that synchronize the device: not the progress
// thread of a communicator whose stream-ordered calls are asynchronous (the rule above).
bool may_sync_device(ddl_comm *comm);

// Closes the peers' allocations opened by the CUDA-IPC path and frees its stream (at
// destroy, after the progress thread has ended).
void destroy_ipc(DeviceState *st);

// Polls event until it has happened, the deadline passes, or abort is raised. `what` names
// the wait in the error.
Status wait_event(const CudaDriver &cu, CUevent event,
                  std::chrono::steady_clock::time_point deadline, const std::atomic<bool> *abort,
                  const char *what);

}  // namespace device
}  // namespace ddl

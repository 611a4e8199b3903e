// Device buffers in the collectives (issue 13, first slice). Every collective takes device
// memory (lib/core/collectives.cc, staged_on_device; send and receive do not yet): it is
// staged through pinned host memory in chunks (the forms with counts per rank in one), pipelined so
// that the device copies of one chunk overlap the host collective of the next, and the host
// collective is the one host buffers take (run_host_collective). Stream-ordered calls
// (ddl_*_stream) wait for their stream on the host and run as blocking calls, or, in the
// asynchronous mode, queue their copies on the stream and their host collectives to the progress
// thread (stream_calls.cc).
//
// Two rows of the one dispatch (lib/core/dispatch.h): run_collective asks classify_call where
// the buffers are; the dispatch runs device calls over CUDA IPC or staged; asynchronous stream
// calls run their chunks' host collectives through it (run_stream_call).
#pragma once

#include "lib/common/status.h"
#include "lib/core/collectives.h"
#include "lib/device/cuda_driver.h"

namespace ddl {
namespace device {

// Where a call's buffers are: host memory when there is no driver (a cached answer), when the
// call moves no data, or when CUDA does not know them. Host and device buffers mixed in one
// call are an invalid_argument naming the buffers (the caller adds the rank and collective).
Status classify_call(const CollectiveCall &call, PointerInfo *where);

// Whether an allreduce of device buffers can go over CUDA IPC (lib/device/ipc_allreduce.cc:
// every rank on this host, the driver's IPC entry points, the kernels built); if not,
// *why_not says why (when not null). The dispatch's cuda_ipc row (lib/core/dispatch.h).
bool cuda_ipc_possible(const ddl_comm *comm, const CollectiveCall &call, std::string *why_not);

// Runs it over CUDA IPC, on the calling thread; where the ranks' vote finds one that cannot
// open its peers' memory, staged instead (run_staged), said once in the log with the reason.
// from_stream: a stream-ordered call, whose stream run_stream_call has waited for (a
// blocking call waits for the legacy default stream's work itself).
Status run_cuda_ipc(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where,
                    bool from_stream);

// Runs a checked collective (the dispatch checked it) whose buffers are device memory (where:
// from classify_call), on the calling thread: chunks of DDL_CUDA_STAGE_BYTES (per stage; two stages
// in flight) go to pinned host memory, through the host collective, and back. from_stream: as for
// run_cuda_ipc (a blocking call first waits for the legacy default stream's work).
Status run_staged(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where,
                  bool from_stream);

// Whether comm's stream-ordered calls run asynchronously (by default when comm spans hosts;
// DDL_CUDA_STREAM_ASYNC=1 or 0 forces it; never with two ranks of comm in one process:
// lib/device/stream_calls.cc) or host-synchronously.
bool stream_calls_async(ddl_comm *comm);

// On the caller's thread, before a nonblocking call on device buffers is queued to the
// progress thread: makes what it will need there and may not make there in the asynchronous
// mode (device_state.h): pinned staging slots, the CUDA-IPC state and kernels, the peers'
// allocations that earlier calls could not open. Nothing for host buffers or in the
// host-synchronous mode.
Status prepare_queued_call(ddl_comm *comm, const CollectiveCall &call);

// Pieces of it: the staging slots the call needs, and the CUDA-IPC path's part.
Status reserve_staging(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where);
Status prepare_ipc_call(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where);

// The collectives a stream-ordered call may queue (on the stream alone, or asynchronously to
// the progress thread): the allreduce family (allreduce, broadcast, allgather, reduce-scatter),
// whose chunks a record's slots carry. The others wait for the stream in every mode.
bool queues_on_stream(Collective collective);

// Either mode, on the caller's thread: a communicator of one rank queues a call on device
// buffers on `stream` alone (*queued): its result is its input, so one device copy (none in
// place, none for a broadcast), with no host step, as NCCL does. Nothing else is queued.
Status queue_alone(ddl_comm *comm, const CollectiveCall &call, void *stream, bool *queued);

// Host-synchronous mode, on the caller's thread: checks the call, records an event on
// `stream` and waits for it (the work queued before the call) with the deadline and abort;
// the caller then runs the call as a blocking one. Needs a CUDA driver.
Status wait_for_stream(ddl_comm *comm, const CollectiveCall &call, void *stream);

// Asynchronous mode, on the caller's thread: checks the call; an allreduce of device buffers
// among ranks of this host is queued whole on the device (stream_ipc.h: *on_device_only, and
// nothing more to do); else takes one of the communicator's records and queues on `stream`
// the call's device part (staging copies, and the writes and waits that hand each chunk to
// the host and back), and sets call->stream: the caller then queues the call to the progress
// thread. Needs a CUDA driver.
Status start_stream_call(ddl_comm *comm, CollectiveCall *call, void *stream, bool *on_device_only);

// On the progress thread, with no driver call: waits (deadline, abort) for the stream to hand
// over each chunk, runs its host collective, and hands it back; releases the stream whatever
// happened. A failure also fails the communicator, so that the next call reports it (no
// request carries it).
Status run_stream_call(ddl_comm *comm, const CollectiveCall &call);

// Frees the pinned memory, streams and events of comm (after its progress thread has ended).
void destroy_device_state(ddl_comm *comm);

}  // namespace device
}  // namespace ddl

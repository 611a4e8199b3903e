// The allreduce of device buffers among the ranks of one host, queued whole on the caller's
// stream, for the asynchronous stream mode (stream_calls.cc): no host step per call, no
// progress thread, the host back at once. The CUDA-IPC path of blocking calls
// (ipc_allreduce.cc) exchanges its buffers' handles over the host transport at every call and
// keeps the host between its phases; a queued call can do neither, so here each rank has a
// scratch allocation of its own that every rank opened once, at the communicator's first such
// call, and the phases are separated by barriers on the device (kernels/ipc_barrier.h).
//
// Per chunk of up to DDL_CUDA_IPC_SCRATCH bytes (default 32 MiB), on the communicator's own
// stream, made to follow the caller's stream at the call and the caller's stream to follow it:
//  1. copy the chunk of this rank's input, but for its own block, into its scratch's input
//     region (only the peers read it, for their blocks);
//  2. barrier: every rank's input is in (and, of the previous chunk, every rank has reduced
//     out of this rank's input region and gathered out of its output region);
//  3. reduce this rank's block of the chunk out of its own input and every peer's input
//     region into its own output region (the reduction kernels, up to 8 ranks);
//  4. barrier: every block is reduced;
//  5. copy every block out of its owner's output region into the caller's output buffer.
// One stream of the communicator's carries every such call in call order, so that the ranks'
// barriers meet in the same order whatever streams the callers use. A barrier that waits
// longer than DDL_TIMEOUT_MS (a rank that never makes the call) stops waiting and says so in
// pinned host memory; a thread of the communicator's watches the peers' processes (all on this
// host) and, when one dies, ends every wait at once and names it. Either way that call and
// every later one on the communicator complete with undefined results, and the next call
// fails with the words of it (stream_ipc_failure); ddl_comm_abort ends the waits at once.
//
// Checked through the stand-in driver (tests/device/fakes), whose kernels run on the host, and
// on an H200 with 2 ranks sharing it (bench/gpu.md, runs 6 and 8): correct, as fast as the
// host-synchronous path up to 8 MB under MPS, 54 % of its bandwidth at 128 MB (the copies
// into and out of the scratch, which the host-synchronous path does without: it reads the
// peers' buffers in place), and 10x slower without MPS (the barriers spin while the other
// process waits for its time slice).
#pragma once

#include "lib/common/status.h"
#include "lib/core/collectives.h"
#include "lib/device/cuda_driver.h"

struct ddl_comm;

namespace ddl {
namespace device {

struct DeviceState;

// Whether this call (device buffers, an asynchronous stream call) goes over CUDA IPC on the
// device: an allreduce among 2 to 8 ranks all on this host, the IPC entry points, the kernels,
// cuStreamWaitEvent and cuMemAlloc, DDL_CUDA_IPC not 0, and the path not refused by a rank at
// its set-up. The same answer on every rank.
bool stream_ipc_applies(const ddl_comm *comm, const DeviceState &st, const CollectiveCall &call);

// On the caller's thread: queues the whole allreduce on `stream` (in `context`). The first
// call sets the path up with every rank (its scratch made and opened by the others: two host
// allgathers, a blocking step); if a rank cannot, every rank refuses the path for good and
// *queued is false (the caller stages the call instead).
Status queue_stream_ipc(ddl_comm *comm, const CollectiveCall &call, CUstream stream,
                        CUcontext context, bool *queued);

// A barrier's failure (its deadline passed), in words, once set; Ok before.
Status stream_ipc_failure(ddl_comm *comm);

// ddl_comm_abort: ends the device's waits (any thread).
void abort_stream_ipc(ddl_comm *comm);

// At destroy (after the progress thread has ended, with comm->device already detached): this
// rank's calls ended, the peers' scratch closed, a host barrier (no rank frees its scratch
// while another may still read it), then everything freed.
void destroy_stream_ipc(ddl_comm *comm, DeviceState *st);

}  // namespace device
}  // namespace ddl

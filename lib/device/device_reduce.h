// The CUDA reduction kernels (lib/device/kernels/), launched through the driver API: the
// fatbin embedded in libddl at build time is loaded with cuModuleLoadData once per context,
// on first use, and its 50 kernels (10 datatypes x 5 ops) looked up by name.
//
// Where they are used: the CUDA-IPC allreduce inside a host (ipc_allreduce.cc), where each
// rank reduces its block straight out of every rank's device memory. The staged path
// (staging.h) reduces in pinned host memory with the CPU kernels: a device reduction there
// would add a copy back to the device per step and win nothing. Tested through the stand-in
// driver (tests/device), and on a GPU by tests/device/test_device_kernels_gpu.cc (passed on an
// H200, 2026-11-26) and bench/kernels/device_reduce_bench.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ddl/ddl.h"
#include "lib/common/status.h"
#include "lib/device/cuda_driver.h"
#include "lib/device/kernels/ipc_barrier.h"

namespace ddl {
namespace device {

// Whether this build carries the kernels (DDL_CUDA_KERNELS); "" when it does, else why not.
bool cuda_kernels_built();
const std::string &cuda_kernels_absent_reason();

// dst[i] = op(srcs[0][i], ..., srcs[nsrcs-1][i]) for i < count, on the device, queued on
// `stream` (0 is the legacy default stream) in the stream's context (or the current one):
// the call returns once the kernel is queued, like a cuLaunchKernel. 2 <= nsrcs <= 8. dst
// may be one of the srcs (in place); no other overlap. Pointers need no alignment (16-byte
// vectors where all share one alignment, elements one by one otherwise, bytes where one is
// not even aligned to the element size). AVG divides the sum by avg_divisor (>= 1) once;
// float16/bfloat16 are computed in float32 and rounded once (lib/device/kernels/
// reduce_math.h has the full semantics). count 0 queues nothing.
//
// Errors: invalid_argument for a bad datatype, op, input count, divisor or null pointer;
// unsupported when the build has no kernels or the driver lacks the module entry points;
// DDL_ERR_SYSTEM with the driver's error for a failed load or launch. The messages name
// the call ("device reduce of 1000 float16 (avg, 3 inputs)"); callers add their rank and
// collective.
Status device_reduce(const CudaDriver &cu, CUstream stream, void *dst, const void *const *srcs,
                     int nsrcs, size_t count, ddl_datatype_t dtype, ddl_op_t op, int avg_divisor);

// Loads the kernels for `context` now, if not yet (device_reduce would on its first launch):
// for the callers' threads, as loading a module may synchronize the device (device_state.h).
Status load_device_kernels(const CudaDriver &cu, CUcontext context);
// Queues on `stream` (in `context`, current) the kernel that holds the stream until the
// pinned word at device address `flag` reaches `number` (kernels/wait_flag.h).
Status launch_wait_flag(const CudaDriver &cu, CUstream stream, CUcontext context, CUdeviceptr flag,
                        uint32_t number);
// Queues on `stream` (in `context`) the ranks' barrier of the CUDA-IPC allreduce queued on a
// stream (kernels/ipc_barrier.h).
Status launch_ipc_barrier(const CudaDriver &cu, CUstream stream, CUcontext context,
                          const kernels::IpcBarrierArgs &args);
// Whether they are loaded for `context` (without loading them).
bool device_kernels_loaded(CUcontext context);

// The kernel's name for a datatype and op ("ddl_reduce_float16_avg"); "" when invalid.
std::string reduce_kernel_name(int dtype, int op);

// Unloads the modules of every context (cuModuleUnload). For tests and for a process that
// is about to destroy its contexts; the next device_reduce loads again.
void unload_device_kernels(const CudaDriver &cu);

}  // namespace device
}  // namespace ddl

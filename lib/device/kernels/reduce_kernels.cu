// The CUDA reduction kernels: one __global__ function per datatype and op, named
// ddl_reduce_<datatype>_<op> (extern "C", so the driver finds them by these names), and
// ddl_wait_flag, the stream-ordered calls' wait (wait_flag.h), and ddl_ipc_barrier, the barrier
// of the CUDA-IPC allreduce queued on a stream (ipc_barrier.h). Built by
// nvcc into a fatbin that libddl embeds as bytes (lib/device/kernels/CMakeLists.txt) and
// loads with cuModuleLoadData: libddl links neither cudart nor libcuda. The work of each
// thread is reduce_body.h's, shared with the CPU tests and the stand-in driver.
#include "lib/device/kernels/ipc_barrier.h"
#include "lib/device/kernels/reduce_body.h"
#include "lib/device/kernels/wait_flag.h"

#define DDL_DEFINE_KERNEL(dtype, codec, op, op_number)                                           \
  extern "C" __global__ void __launch_bounds__(256)                                              \
      ddl_reduce_##dtype##_##op(const ::ddl::kernels::ReduceArgs args) {                         \
    const unsigned long long thread =                                                            \
        static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;                  \
    const unsigned long long nthreads = static_cast<unsigned long long>(gridDim.x) * blockDim.x; \
    ::ddl::kernels::reduce_thread<codec, op_number>(args, thread, nthreads);                     \
  }

// Every op of one datatype.
#define DDL_KERNELS_OF(dtype, codec)                             \
  DDL_DEFINE_KERNEL(dtype, codec, sum, ::ddl::kernels::kOpSum)   \
  DDL_DEFINE_KERNEL(dtype, codec, prod, ::ddl::kernels::kOpProd) \
  DDL_DEFINE_KERNEL(dtype, codec, min, ::ddl::kernels::kOpMin)   \
  DDL_DEFINE_KERNEL(dtype, codec, max, ::ddl::kernels::kOpMax)   \
  DDL_DEFINE_KERNEL(dtype, codec, avg, ::ddl::kernels::kOpAvg)

DDL_KERNEL_DATATYPES(DDL_KERNELS_OF)

// Holds the stream until the host writes the flag (lib/device/kernels/wait_flag.h): one
// thread, sleeping between reads so that it does not flood the PCIe link with polls.
extern "C" __global__ void ddl_wait_flag(const ::ddl::kernels::WaitFlagArgs args) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  while (!::ddl::kernels::flag_reached(args)) __nanosleep(1000);
  __threadfence_system();
}

// The ranks' barrier on the device (lib/device/kernels/ipc_barrier.h): one thread.
extern "C" __global__ void ddl_ipc_barrier(const ::ddl::kernels::IpcBarrierArgs args) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  // This rank's work before the barrier (its copies and kernels on this stream) has ended;
  // the flag says so to the other ranks.
  __threadfence_system();
  *reinterpret_cast<volatile unsigned *>(args.own) = args.number;
  __threadfence_system();
  if (args.failed[1] != 0 || *args.abort != 0) return;
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    const int missing = ::ddl::kernels::first_missing(args);
    if (missing < 0) break;
    if (*args.abort != 0) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > args.timeout_ns) {
      args.failed[0] = args.number;
      __threadfence_system();
      args.failed[1] = static_cast<unsigned>(missing) + 1;
      __threadfence_system();
      return;
    }
    __nanosleep(500);
  }
  __threadfence_system();  // the other ranks' writes before their flags, seen after
}

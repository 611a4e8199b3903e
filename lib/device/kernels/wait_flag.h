// The flag-wait kernel's argument and test, for nvcc (reduce_kernels.cu) and g++ (the
// stand-in driver): one thread polls a word of pinned host memory, mapped for the device,
// until it reaches a number. The asynchronous stream mode (lib/device/stream_calls.cc) queues
// it on the caller's stream instead of cuStreamWaitValue32: a running kernel holds one
// block of one multiprocessor, where a stream memory wait holds a hardware queue that other
// streams' work (ddl's own copies and kernels among it) may be queued behind, a hidden
// dependency that the driver's documentation warns may deadlock. NCCL's kernels wait on
// host-written flags the same way.
#pragma once

namespace ddl {
namespace kernels {

struct WaitFlagArgs {
  const volatile unsigned *flag;  // device address of the pinned word
  unsigned number;                // released once *flag - number >= 0 (cyclic)
  unsigned pad;
};

#if defined(__CUDACC__)
#define DDL_HOST_DEVICE __host__ __device__
#else
#define DDL_HOST_DEVICE
#endif

DDL_HOST_DEVICE inline bool flag_reached(const WaitFlagArgs &args) {
  return static_cast<int>(*args.flag - args.number) >= 0;
}

#undef DDL_HOST_DEVICE

}  // namespace kernels
}  // namespace ddl

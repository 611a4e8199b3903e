// The barrier of the CUDA-IPC allreduce queued on a stream (lib/device/stream_ipc.cc), for nvcc
// (reduce_kernels.cu) and g++ (the stand-in driver): one thread of each rank's kernel writes the
// barrier's number into its own flag and waits until every rank's flag has reached it. The flags
// are device memory that every rank opened through CUDA IPC; two words of pinned host memory,
// mapped for the device, end the wait early (`abort`, written by ddl_comm_abort) or tell the
// host that it passed its deadline (`failed`). Once a barrier has failed, later ones do not
// wait: the stream goes on, with undefined results, and the next call reports the failure.
#pragma once

namespace ddl {
namespace kernels {

constexpr int kMaxBarrierRanks = 8;

struct IpcBarrierArgs {
  unsigned *own;                                     // this rank's flag
  const volatile unsigned *flags[kMaxBarrierRanks];  // every rank's flag, by rank
  int nranks;
  unsigned number;                // passed once every flag - number >= 0 (cyclic)
  unsigned long long timeout_ns;  // counted from the kernel's start
  const volatile unsigned *abort;
  volatile unsigned *failed;  // [0]: the number that timed out; [1]: the rank missing + 1
};

#if defined(__CUDACC__)
#define DDL_HOST_DEVICE __host__ __device__
#else
#define DDL_HOST_DEVICE
#endif

// The first rank whose flag has not reached the barrier's number, or -1 when all have.
DDL_HOST_DEVICE inline int first_missing(const IpcBarrierArgs &args) {
  for (int r = 0; r < args.nranks; ++r)
    if (static_cast<int>(*args.flags[r] - args.number) < 0) return r;
  return -1;
}

#undef DDL_HOST_DEVICE

}  // namespace kernels
}  // namespace ddl

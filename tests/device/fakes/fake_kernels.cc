// The stand-in driver's "kernels" (fake_cuda.c's cuModuleGetFunction/cuLaunchKernel): each
// name of lib/device/kernels/reduce_kernels.cu maps to the same thread body
// (reduce_body.h), compiled here by g++ and run for every thread of the launch's grid, one
// after another, on the stream's thread; ddl_wait_flag polls its flag (wait_flag.h) there.
//
// What this checks: the launcher's side of the kernels (lib/device/device_reduce.cc) — the
// names it looks up, the argument block it passes, the split into head/vectors/tail and the
// grid it sizes (every element must be covered by some thread), alignment (a 16-byte or
// element access at an address a GPU would fault on is reported as a fault here), and stream
// order. What it does not check: the device code as nvcc compiles it, its speed, the fatbin
// (only its magic number is looked at) or anything a real GPU does.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "lib/device/kernels/ipc_barrier.h"
#include "lib/device/kernels/reduce_body.h"
#include "lib/device/kernels/wait_flag.h"

namespace {

using ddl::kernels::ReduceArgs;
using Runner = void (*)(const ReduceArgs &args, unsigned long long nthreads);

struct Kernel {
  const char *name;
  Runner run;
  size_t element_size;
};

template <class Codec, int kOp>
void run_grid(const ReduceArgs &args, unsigned long long nthreads) {
  for (unsigned long long t = 0; t < nthreads; ++t)
    ddl::kernels::reduce_thread<Codec, kOp>(args, t, nthreads);
}

#define FAKE_KERNEL(dtype, codec, op, op_number) \
  {"ddl_reduce_" #dtype "_" #op, &run_grid<codec, op_number>, sizeof(typename codec::S)},
#define FAKE_KERNELS_OF(dtype, codec)                      \
  FAKE_KERNEL(dtype, codec, sum, ::ddl::kernels::kOpSum)   \
  FAKE_KERNEL(dtype, codec, prod, ::ddl::kernels::kOpProd) \
  FAKE_KERNEL(dtype, codec, min, ::ddl::kernels::kOpMin)   \
  FAKE_KERNEL(dtype, codec, max, ::ddl::kernels::kOpMax)   \
  FAKE_KERNEL(dtype, codec, avg, ::ddl::kernels::kOpAvg)

const Kernel kKernels[] = {DDL_KERNEL_DATATYPES(FAKE_KERNELS_OF)};
const Kernel kWaitFlag = {"ddl_wait_flag", nullptr, 0};
const Kernel kIpcBarrier = {"ddl_ipc_barrier", nullptr, 0};

}  // namespace

extern "C" {

// A kernel by name, or null.
const void *fake_kernel_lookup(const char *name) {
  for (const Kernel &k : kKernels)
    if (std::strcmp(k.name, name) == 0) return &k;
  if (std::strcmp(name, kWaitFlag.name) == 0) return &kWaitFlag;
  return std::strcmp(name, kIpcBarrier.name) == 0 ? &kIpcBarrier : nullptr;
}

// Whether a kernel waits on a host-written flag (the driver's waits on values, for fake_cuda.c).
int fake_kernel_waits(const void *kernel) {
  return kernel == &kWaitFlag || kernel == &kIpcBarrier;
}

const char *fake_kernel_name(const void *kernel) {
  return static_cast<const Kernel *>(kernel)->name;
}

size_t fake_kernel_args_bytes(const void *kernel) {
  if (kernel == &kWaitFlag) return sizeof(ddl::kernels::WaitFlagArgs);
  return kernel == &kIpcBarrier ? sizeof(ddl::kernels::IpcBarrierArgs) : sizeof(ReduceArgs);
}

// ddl_wait_flag: polls the pinned word (host memory here) until it reaches the number.
static int run_wait_flag(const void *args_copy, char *(*translate)(uintptr_t, size_t), char *why,
                         size_t why_size) {
  ddl::kernels::WaitFlagArgs a;
  std::memcpy(&a, args_copy, sizeof a);
  char *flag = translate(reinterpret_cast<uintptr_t>(a.flag), sizeof(unsigned));
  if (!flag) {
    snprintf(why, why_size, "ddl_wait_flag: illegal address: flag %p is not pinned memory",
             static_cast<const void *>(const_cast<const unsigned *>(a.flag)));
    return 1;
  }
  a.flag = reinterpret_cast<const volatile unsigned *>(flag);
  while (!ddl::kernels::flag_reached(a)) usleep(20);
  return 0;
}

// ddl_ipc_barrier: as the kernel does (reduce_kernels.cu), every address translated (the flags
// are device memory, the peers' opened through IPC; abort and failed pinned memory).
static int run_ipc_barrier(const void *args_copy, char *(*translate)(uintptr_t, size_t), char *why,
                           size_t why_size) {
  ddl::kernels::IpcBarrierArgs a;
  std::memcpy(&a, args_copy, sizeof a);
  auto word = [&](const volatile void *p) {
    return reinterpret_cast<volatile unsigned *>(
        translate(reinterpret_cast<uintptr_t>(p), sizeof(unsigned)));
  };
  volatile unsigned *own = word(a.own), *abort = word(a.abort), *failed = word(a.failed);
  bool ok = own && abort && failed && a.nranks >= 1 && a.nranks <= ddl::kernels::kMaxBarrierRanks;
  for (int r = 0; ok && r < a.nranks; ++r) ok = (a.flags[r] = word(a.flags[r])) != nullptr;
  if (!ok) {
    snprintf(why, why_size, "ddl_ipc_barrier: illegal address among its words (%d ranks)",
             a.nranks);
    return 1;
  }
  a.abort = abort;
  __atomic_store_n(const_cast<unsigned *>(own), a.number, __ATOMIC_RELEASE);
  if (failed[1] != 0 || *abort != 0) return 0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    const int missing = ddl::kernels::first_missing(a);
    if (missing < 0) return 0;
    if (*abort != 0) return 0;
    if (std::chrono::steady_clock::now() - start > std::chrono::nanoseconds(a.timeout_ns)) {
      failed[0] = a.number;
      failed[1] = static_cast<unsigned>(missing) + 1;
      return 0;
    }
    usleep(20);
  }
}

// Runs a launch whose argument block was copied at cuLaunchKernel. translate() gives the
// host bytes of a device (or pinned) range, or null for memory the fake did not make.
// Returns 0, or writes why the launch would have faulted on a GPU into `why`.
int fake_kernel_run(const void *kernel, const void *args_copy, unsigned long long nthreads,
                    char *(*translate)(uintptr_t address, size_t bytes), char *why,
                    size_t why_size) {
  if (kernel == &kWaitFlag) return run_wait_flag(args_copy, translate, why, why_size);
  if (kernel == &kIpcBarrier) return run_ipc_barrier(args_copy, translate, why, why_size);
  const Kernel &k = *static_cast<const Kernel *>(kernel);
  ReduceArgs a;
  std::memcpy(&a, args_copy, sizeof a);
  if (a.nsrcs < 2 || a.nsrcs > ddl::kernels::kMaxInputs || a.divisor < 1) {
    snprintf(why, why_size, "%s: %d inputs, divisor %d", k.name, a.nsrcs, a.divisor);
    return 1;
  }
  const size_t size = k.element_size;
  const unsigned long long lanes = ddl::kernels::kVectorBytes / size;
  if (a.head + a.nvec * lanes > a.count) {
    snprintf(why, why_size, "%s: head %llu + %llu vectors exceed %llu elements", k.name, a.head,
             a.nvec, a.count);
    return 1;
  }
  // The accesses a GPU would fault on: typed ones not aligned to the element, 16-byte ones
  // not aligned to 16.
  uintptr_t pointers[ddl::kernels::kMaxInputs + 1];
  int npointers = 0;
  pointers[npointers++] = reinterpret_cast<uintptr_t>(a.dst);
  for (int i = 0; i < a.nsrcs; ++i) pointers[npointers++] = reinterpret_cast<uintptr_t>(a.src[i]);
  for (int i = 0; i < npointers; ++i) {
    const uintptr_t p = pointers[i];
    const char *which = i == 0 ? "dst" : "an input";
    if (!a.bytewise && p % size != 0) {
      snprintf(why, why_size, "%s: misaligned address: %s (0x%lx) is read as %zu-byte elements",
               k.name, which, static_cast<unsigned long>(p), size);
      return 1;
    }
    if (a.nvec && (p + a.head * size) % ddl::kernels::kVectorBytes != 0) {
      snprintf(why, why_size,
               "%s: misaligned address: %s (0x%lx) + head %llu is read in "
               "16-byte vectors",
               k.name, which, static_cast<unsigned long>(p), a.head);
      return 1;
    }
  }
  // Device addresses -> the fake's host shadows.
  const size_t bytes = a.count * size;
  char *dst = translate(reinterpret_cast<uintptr_t>(a.dst), bytes);
  if (!dst) {
    snprintf(why, why_size, "%s: illegal address: dst %p is not device memory of %zu bytes", k.name,
             a.dst, bytes);
    return 1;
  }
  a.dst = dst;
  for (int i = 0; i < a.nsrcs; ++i) {
    char *src = translate(reinterpret_cast<uintptr_t>(a.src[i]), bytes);
    if (!src) {
      snprintf(why, why_size,
               "%s: illegal address: input %d %p is not device memory of %zu "
               "bytes",
               k.name, i, a.src[i], bytes);
      return 1;
    }
    a.src[i] = src;
  }
  // The translated pointers keep their offsets within 16 bytes only if the shadows are
  // aligned like the device ranges; the host copies do not care (memcpy), so run as is.
  k.run(a, nthreads);
  return 0;
}

}  // extern "C"

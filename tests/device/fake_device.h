// The tests' side of the stand-in CUDA driver (fakes/fake_cuda.c): the same library ddl opens
// through DDL_CUDA_LIBRARY (dlopen of one path gives one copy), for allocating "device"
// memory, making a context current and queueing "kernels" (host functions) on streams.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace ddltest {

typedef unsigned long long CUdeviceptr;

struct FakeCuda {
  int (*init)(unsigned);
  int (*primary_ctx)(void **, int);
  int (*set_current)(void *);
  int (*mem_alloc)(CUdeviceptr *, size_t);
  int (*mem_free)(CUdeviceptr);
  int (*stream_create)(void **, unsigned);
  int (*stream_synchronize)(void *);
  int (*stream_destroy)(void *);
  int (*launch_host_func)(void *, void (*)(void *), void *);
  // A synchronous copy: after the default stream's work, holding the driver while it waits.
  int (*dtoh)(void *, CUdeviceptr, size_t);
  void *(*host_view)(CUdeviceptr);
  // Handles this process opened and closed (first opens, last closes), and imports open now.
  void (*ipc_stats)(int *opened, int *closed, int *open_now);
  // Device-synchronizing calls and synchronous copies that waited past FAKE_CUDA_SYNC_WAIT_MS
  // for streams waiting on a value, or for the default stream (a hang on a GPU).
  int (*sync_hangs)();
  // Pinned allocations made so far (cuMemHostAlloc).
  int (*host_allocs)();
  // Kernel launches run so far (and modules, grid and name: unused here).
  void (*kernel_stats)(int *run, int *loaded, int *unloaded, unsigned *grid, unsigned *block,
                       const char **kernel);

  // Loads the fake and makes its context current on this thread; aborts on failure.
  static FakeCuda &get() {
    static FakeCuda fake = [] {
      FakeCuda f{};
      void *lib = dlopen(FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        fprintf(stderr, "dlopen(%s): %s\n", FAKE_CUDA, dlerror());
        abort();
      }
      bool ok =
          sym(lib, "cuInit", &f.init) && sym(lib, "cuDevicePrimaryCtxRetain", &f.primary_ctx) &&
          sym(lib, "cuCtxSetCurrent", &f.set_current) && sym(lib, "cuMemAlloc_v2", &f.mem_alloc) &&
          sym(lib, "cuMemFree_v2", &f.mem_free) && sym(lib, "cuStreamCreate", &f.stream_create) &&
          sym(lib, "cuStreamSynchronize", &f.stream_synchronize) &&
          sym(lib, "cuStreamDestroy_v2", &f.stream_destroy) &&
          sym(lib, "cuLaunchHostFunc", &f.launch_host_func) &&
          sym(lib, "cuMemcpyDtoH_v2", &f.dtoh) && sym(lib, "fake_cuda_host_view", &f.host_view) &&
          sym(lib, "fake_cuda_ipc_stats", &f.ipc_stats) &&
          sym(lib, "fake_cuda_sync_hangs", &f.sync_hangs) &&
          sym(lib, "fake_cuda_host_allocs", &f.host_allocs) &&
          sym(lib, "fake_cuda_kernel_stats", &f.kernel_stats);
      if (!ok) abort();
      return f;
    }();
    void *ctx = nullptr;
    if (fake.init(0) != 0 || fake.primary_ctx(&ctx, 0) != 0 || fake.set_current(ctx) != 0) abort();
    return fake;
  }

 private:
  template <typename F>
  static bool sym(void *lib, const char *name, F *fn) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    if (!*fn) fprintf(stderr, "fake CUDA lacks %s\n", name);
    return *fn != nullptr;
  }
};

// "Device" memory of the fake: a pointer that crashes when the host touches it, and its
// shadow, which the tests read and write as a kernel would.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes ? bytes : 1) {
    if (FakeCuda::get().mem_alloc(&ptr_, bytes_) != 0) abort();
  }
  ~DeviceBuffer() { FakeCuda::get().mem_free(ptr_); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *device() const { return reinterpret_cast<void *>(ptr_); }
  unsigned char *shadow() const {
    return static_cast<unsigned char *>(FakeCuda::get().host_view(ptr_));
  }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_;
};

}  // namespace ddltest

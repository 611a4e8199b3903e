// device_reduce_bench: the CUDA reduction kernels' bandwidth on a real GPU beside the
// device's own copy bandwidth, measured in the same run (issue 25's target: a 2-input sum at
// >= 90 % of the device-to-device copy's bytes per second, float32 and bfloat16, >= 64 MB).
//
//   device_reduce_bench [-r REPEATS] [SIZE...]      (sizes in MB of one input; default 64 256 1024)
//
// Bandwidth counts the bytes that must cross device memory once: a copy of N bytes reads N
// and writes N (2N); a reduction of k inputs of N bytes into one output reads kN and writes
// N ((k+1)N), in place or not. Each figure is the median of REPEATS timed batches of 10
// launches, timed with CUDA events on one stream, after a warm-up batch. Prints a table and
// exits 77 (skipped) where there is no GPU or the build has no kernels.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "lib/device/cuda_driver.h"
#include "lib/device/device_reduce.h"

namespace dev = ddl::device;

namespace {

constexpr int kSkipped = 77;

// The driver entry points ddl's CudaDriver does not carry (allocation and event timing).
struct Extra {
  int (*device_get)(int *, int);
  int (*device_get_name)(char *, int, int);
  int (*primary_ctx_retain)(void **, int);
  int (*mem_alloc)(unsigned long long *, size_t);
  int (*mem_free)(unsigned long long);
  int (*memset_d8)(unsigned long long, unsigned char, size_t);
  int (*event_synchronize)(void *);
  int (*event_elapsed)(float *, void *, void *);
};

template <typename F>
void load(void *lib, const char *name, F *fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!*fn) {
    std::fprintf(stderr, "device_reduce_bench: libcuda.so.1 lacks %s\n", name);
    std::exit(1);
  }
}

void check(int result, const char *what) {
  if (result != 0) {
    std::fprintf(stderr, "device_reduce_bench: %s failed (CUresult %d)\n", what, result);
    std::exit(1);
  }
}

// Milliseconds per launch of `launch`: the median of `repeats` batches of 10, on stream 0.
double time_ms(const dev::CudaDriver &cu, const Extra &x, int repeats,
               const std::function<void()> &launch) {
  dev::CUevent start = nullptr, stop = nullptr;
  check(cu.event_create(&start, 0), "cuEventCreate");
  check(cu.event_create(&stop, 0), "cuEventCreate");
  std::vector<double> batches;
  for (int r = 0; r <= repeats; ++r) {  // batch 0 warms up
    check(cu.event_record(start, nullptr), "cuEventRecord");
    for (int i = 0; i < 10; ++i) launch();
    check(cu.event_record(stop, nullptr), "cuEventRecord");
    check(x.event_synchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check(x.event_elapsed(&ms, start, stop), "cuEventElapsedTime");
    if (r > 0) batches.push_back(ms / 10);
  }
  cu.event_destroy(start);
  cu.event_destroy(stop);
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  int repeats = 5;
  std::vector<size_t> megabytes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (std::atol(argv[i]) > 0) {
      megabytes.push_back(std::strtoul(argv[i], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: device_reduce_bench [-r REPEATS] [SIZE_MB...]\n");
      return 2;
    }
  }
  if (megabytes.empty()) megabytes = {64, 256, 1024};

  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::printf("device_reduce_bench: skipped: no CUDA driver here (%s)\n", dlerror());
    return kSkipped;
  }
  const dev::CudaDriver *cu = dev::cuda_driver();
  if (!cu) {
    std::printf("device_reduce_bench: skipped: %s\n", dev::cuda_absent_reason().c_str());
    return kSkipped;
  }
  if (!dev::cuda_kernels_built()) {
    std::printf("device_reduce_bench: skipped: %s\n", dev::cuda_kernels_absent_reason().c_str());
    return kSkipped;
  }
  Extra x{};
  load(lib, "cuDeviceGet", &x.device_get);
  load(lib, "cuDeviceGetName", &x.device_get_name);
  load(lib, "cuDevicePrimaryCtxRetain", &x.primary_ctx_retain);
  load(lib, "cuMemAlloc_v2", &x.mem_alloc);
  load(lib, "cuMemFree_v2", &x.mem_free);
  load(lib, "cuMemsetD8_v2", &x.memset_d8);
  load(lib, "cuEventSynchronize", &x.event_synchronize);
  load(lib, "cuEventElapsedTime_v2", &x.event_elapsed);
  int device = 0;
  void *ctx = nullptr;
  check(cu->init(0), "cuInit");
  check(x.device_get(&device, 0), "cuDeviceGet");
  check(x.primary_ctx_retain(&ctx, device), "cuDevicePrimaryCtxRetain");
  check(cu->ctx_set_current(static_cast<dev::CUcontext>(ctx)), "cuCtxSetCurrent");
  char name[256] = "?";
  x.device_get_name(name, sizeof name, device);

  std::printf("# %s; bandwidth = bytes that cross device memory once per call / time;\n", name);
  std::printf("# copy: 2N (read N, write N); reduce of 2 inputs: 3N; median of %d batches\n",
              repeats);
  std::printf("%10s %10s %12s %12s %12s %8s\n", "MB/input", "dtype", "copy GB/s", "sum GB/s",
              "inplace GB/s", "sum/copy");
  for (size_t mb : megabytes) {
    const size_t bytes = mb << 20;
    unsigned long long a = 0, b = 0, out = 0;
    check(x.mem_alloc(&a, bytes), "cuMemAlloc (input 0)");
    check(x.mem_alloc(&b, bytes), "cuMemAlloc (input 1)");
    check(x.mem_alloc(&out, bytes), "cuMemAlloc (output)");
    // Small values: no infinities or NaNs to slow anything down.
    check(x.memset_d8(a, 0x3c, bytes), "cuMemsetD8");
    check(x.memset_d8(b, 0x3c, bytes), "cuMemsetD8");
    const double copy_ms = time_ms(*cu, x, repeats, [&] {
      check(cu->memcpy_dtod_async(out, a, bytes, nullptr), "cuMemcpyDtoDAsync");
    });
    const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;
    for (ddl_datatype_t dtype : {DDL_FLOAT32, DDL_BFLOAT16}) {
      const size_t count = bytes / ddl_datatype_size(dtype);
      auto reduce = [&](unsigned long long dst) {
        const void *srcs[2] = {reinterpret_cast<void *>(a), reinterpret_cast<void *>(b)};
        const ddl::Status st = dev::device_reduce(*cu, nullptr, reinterpret_cast<void *>(dst), srcs,
                                                  2, count, dtype, DDL_SUM, 1);
        if (!st.ok()) {
          std::fprintf(stderr, "device_reduce_bench: %s\n", st.message().c_str());
          std::exit(1);
        }
      };
      const double sum_ms = time_ms(*cu, x, repeats, [&] { reduce(out); });
      // In place re-adds b into a on each launch: values grow but stay finite over 60 calls.
      const double inplace_ms = time_ms(*cu, x, repeats, [&] { reduce(a); });
      const double sum_gbs = 3.0 * bytes / sum_ms / 1e6;
      const double inplace_gbs = 3.0 * bytes / inplace_ms / 1e6;
      std::printf("%10zu %10s %12.0f %12.0f %12.0f %7.1f%%\n", mb, ddl_datatype_name(dtype),
                  copy_gbs, sum_gbs, inplace_gbs, 100.0 * sum_gbs / copy_gbs);
    }
    x.mem_free(a);
    x.mem_free(b);
    x.mem_free(out);
  }
  return 0;
}

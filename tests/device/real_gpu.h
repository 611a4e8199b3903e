// Tests on a real GPU (libcuda.so.1), skipped with the reason where there is none: the
// driver ddl opens, with device 0's primary context current, and the entry points the tests
// call that ddl's CudaDriver does not carry.
#pragma once

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <string>

#include "lib/device/cuda_driver.h"
#include "lib/device/device_reduce.h"

namespace ddltest {

struct Gpu {
  int (*device_get)(int *, int);
  int (*primary_ctx_retain)(void **, int);
  int (*mem_alloc)(unsigned long long *, size_t);
  int (*mem_free)(unsigned long long);
  int (*htod)(unsigned long long, const void *, size_t);
  int (*dtoh)(void *, unsigned long long, size_t);
  int (*ctx_synchronize)();
};

// The real driver with device 0's primary context current, or a skip saying why not.
inline const ddl::device::CudaDriver &real_driver(Gpu *gpu) {
  // DDL_GPU_TEST_LIBRARY: another driver, e.g. the stand-in, to check this test itself.
  const char *other = getenv("DDL_GPU_TEST_LIBRARY");
  const std::string library = other && *other ? other : "libcuda.so.1";
  setenv("DDL_CUDA_LIBRARY", library.c_str(), 1);
  void *lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) cr_skip_test("no CUDA driver here (%s)", dlerror());
  const ddl::device::CudaDriver *cu = ddl::device::cuda_driver();
  if (!cu) cr_skip_test("ddl found no CUDA driver: %s", ddl::device::cuda_absent_reason().c_str());
  if (!ddl::device::cuda_kernels_built())
    cr_skip_test("this build has no CUDA kernels: %s",
                 ddl::device::cuda_kernels_absent_reason().c_str());
  auto sym = [&](const char *name) {
    void *p = dlsym(lib, name);
    cr_assert(p, "%s lacks %s", library.c_str(), name);
    return p;
  };
  gpu->device_get = reinterpret_cast<int (*)(int *, int)>(sym("cuDeviceGet"));
  gpu->primary_ctx_retain =
      reinterpret_cast<int (*)(void **, int)>(sym("cuDevicePrimaryCtxRetain"));
  gpu->mem_alloc = reinterpret_cast<int (*)(unsigned long long *, size_t)>(sym("cuMemAlloc_v2"));
  gpu->mem_free = reinterpret_cast<int (*)(unsigned long long)>(sym("cuMemFree_v2"));
  gpu->htod =
      reinterpret_cast<int (*)(unsigned long long, const void *, size_t)>(sym("cuMemcpyHtoD_v2"));
  gpu->dtoh = reinterpret_cast<int (*)(void *, unsigned long long, size_t)>(sym("cuMemcpyDtoH_v2"));
  gpu->ctx_synchronize = reinterpret_cast<int (*)()>(sym("cuCtxSynchronize"));
  int device = 0;
  void *ctx = nullptr;
  if (cu->init(0) != 0 || gpu->device_get(&device, 0) != 0) cr_skip_test("no usable GPU");
  cr_assert_eq(gpu->primary_ctx_retain(&ctx, device), 0);
  cr_assert_eq(cu->ctx_set_current(static_cast<ddl::device::CUcontext>(ctx)), 0);
  return *cu;
}

}  // namespace ddltest

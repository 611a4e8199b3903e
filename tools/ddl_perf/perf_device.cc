#include "perf_device.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "lib/common/params.h"

namespace ddl_perf {

// The driver entry points ddl_perf uses, with the types of cuda.h (CUresult is an int,
// CUdevice an int, CUdeviceptr a 64-bit integer: the same as a pointer on 64-bit hosts).
struct DeviceMemory::Api {
  int (*init)(unsigned);
  int (*device_get_count)(int *);
  int (*device_get)(int *, int);
  int (*device_get_name)(char *, int, int);
  int (*primary_ctx_retain)(void **, int);
  int (*primary_ctx_release)(int);
  int (*ctx_set_current)(void *);
  int (*mem_alloc)(unsigned long long *, size_t);
  int (*mem_free)(unsigned long long);
  int (*memcpy_htod)(unsigned long long, const void *, size_t);
  int (*memcpy_dtoh)(void *, unsigned long long, size_t);
  int (*get_error_name)(int, const char **);
  int (*ctx_synchronize)();
};

namespace {

template <typename F>
bool load(void *handle, const char *name, F *fn, std::string *missing) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  if (!*fn && missing->empty()) *missing = name;
  return *fn != nullptr;
}

}  // namespace

int local_rank_from_env() {
  for (const char *var :
       {"DDL_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", "DDL_RANK",
        "OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID"}) {
    int64_t value = 0;
    const char *text = std::getenv(var);
    if (text && ddl::parse_int(text, 0, 1 << 20, &value)) return static_cast<int>(value);
  }
  return 0;
}

DeviceMemory::~DeviceMemory() {
  if (api_ && context_) api_->primary_ctx_release(device_);
  delete api_;
}

bool DeviceMemory::open(int device, int local_rank, std::string *error) {
  const char *env = std::getenv("DDL_CUDA_LIBRARY");
  library_ = env && *env ? env : "libcuda.so.1";
  // Never closed, as libddl never closes it (the driver's threads and handlers).
  void *handle = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    *error = "-G needs a CUDA driver, and " + library_ + " cannot be loaded: " + (why ? why : "?");
    return false;
  }
  api_ = new Api{};
  std::string missing;
  load(handle, "cuInit", &api_->init, &missing);
  load(handle, "cuDeviceGetCount", &api_->device_get_count, &missing);
  load(handle, "cuDeviceGet", &api_->device_get, &missing);
  load(handle, "cuDeviceGetName", &api_->device_get_name, &missing);
  load(handle, "cuDevicePrimaryCtxRetain", &api_->primary_ctx_retain, &missing);
  load(handle, "cuDevicePrimaryCtxRelease_v2", &api_->primary_ctx_release, &missing);
  load(handle, "cuCtxSetCurrent", &api_->ctx_set_current, &missing);
  load(handle, "cuMemAlloc_v2", &api_->mem_alloc, &missing);
  load(handle, "cuMemFree_v2", &api_->mem_free, &missing);
  load(handle, "cuMemcpyHtoD_v2", &api_->memcpy_htod, &missing);
  load(handle, "cuMemcpyDtoH_v2", &api_->memcpy_dtoh, &missing);
  load(handle, "cuGetErrorName", &api_->get_error_name, &missing);
  load(handle, "cuCtxSynchronize", &api_->ctx_synchronize, &missing);
  if (!missing.empty()) {
    *error = library_ + " lacks " + missing;
    return false;
  }
  auto failed = [&](const char *call, int r) {
    const char *name = nullptr;
    if (api_->get_error_name(r, &name) != 0 || !name) name = "unknown error";
    *error = std::string(call) + " failed: " + name + " (" + std::to_string(r) + ") in " + library_;
    return false;
  };
  int r = api_->init(0);
  if (r != 0) return failed("cuInit", r);
  if ((r = api_->device_get_count(&count_)) != 0) return failed("cuDeviceGetCount", r);
  if (count_ < 1) {
    *error = library_ + " reports no GPU";
    return false;
  }
  device_ = device >= 0 ? device : local_rank % count_;
  if (device_ >= count_) {
    *error = "-D " + std::to_string(device_) + ": there are only " + std::to_string(count_) +
             " GPUs (0.." + std::to_string(count_ - 1) + ")";
    return false;
  }
  int handle_device = 0;
  if ((r = api_->device_get(&handle_device, device_)) != 0) return failed("cuDeviceGet", r);
  char name[256] = "";
  if ((r = api_->device_get_name(name, sizeof name, handle_device)) != 0)
    return failed("cuDeviceGetName", r);
  name_ = name;
  if ((r = api_->primary_ctx_retain(&context_, handle_device)) != 0) {
    context_ = nullptr;
    return failed("cuDevicePrimaryCtxRetain", r);
  }
  // Current on this thread: libddl runs blocking collectives on the caller's thread, and
  // finds each buffer's context from the pointer.
  if ((r = api_->ctx_set_current(context_)) != 0) return failed("cuCtxSetCurrent", r);
  return true;
}

std::string DeviceMemory::description() const {
  return "GPU " + std::to_string(device_) + " of " + std::to_string(count_) + " (" + name_ +
         ") through " + library_;
}

bool DeviceMemory::alloc(size_t bytes, void **ptr, std::string *error) {
  unsigned long long dptr = 0;
  const int r = api_->mem_alloc(&dptr, bytes);
  if (r != 0) {
    *error = "cuMemAlloc of " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device_) +
             " failed (CUDA error " + std::to_string(r) + ")";
    return false;
  }
  *ptr = reinterpret_cast<void *>(dptr);
  return true;
}

void DeviceMemory::free(void *ptr) {
  if (ptr) api_->mem_free(reinterpret_cast<unsigned long long>(ptr));
}

bool DeviceMemory::to_device(void *dst, const void *src, size_t bytes, std::string *error) {
  const int r = api_->memcpy_htod(reinterpret_cast<unsigned long long>(dst), src, bytes);
  if (r == 0) return true;
  *error = "cuMemcpyHtoD of " + std::to_string(bytes) + " bytes failed (CUDA error " +
           std::to_string(r) + ")";
  return false;
}

bool DeviceMemory::to_host(void *dst, const void *src, size_t bytes, std::string *error) {
  const int r = api_->memcpy_dtoh(dst, reinterpret_cast<unsigned long long>(src), bytes);
  if (r == 0) return true;
  *error = "cuMemcpyDtoH of " + std::to_string(bytes) + " bytes failed (CUDA error " +
           std::to_string(r) + ")";
  return false;
}

bool DeviceMemory::synchronize(std::string *error) {
  const int r = api_->ctx_synchronize();
  if (r == 0) return true;
  *error = "cuCtxSynchronize failed (CUDA error " + std::to_string(r) + ")";
  return false;
}

}  // namespace ddl_perf

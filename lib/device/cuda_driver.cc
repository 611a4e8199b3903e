#include "lib/device/cuda_driver.h"

#include <dlfcn.h>

#include <utility>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/common/status.h"

namespace ddl {
namespace device {
namespace {

template <typename F>
bool load(void *handle, const char *symbol, F *fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, symbol));
  return *fn != nullptr;
}

// The first of several names (cuda.h maps the API names to versioned symbols, e.g.
// cuStreamWaitValue32 -> cuStreamWaitValue32_v2 since CUDA 12).
template <typename F>
bool load_any(void *handle, std::initializer_list<const char *> symbols, F *fn) {
  for (const char *symbol : symbols)
    if (load(handle, symbol, fn)) return true;
  return false;
}

struct Loaded {
  CudaDriver driver;
  bool present = false;
  std::string absent;
};

Loaded open_driver() {
  Loaded out;
  const std::string enabled = env_string("DDL_CUDA");
  if (enabled == "0") {
    out.absent = "DDL_CUDA=0";
    return out;
  }
  std::string library = env_string("DDL_CUDA_LIBRARY");
  if (library.empty()) library = "libcuda.so.1";
  // Never dlclose'd: the driver starts threads and registers handlers; unloading it is a
  // known source of crashes at exit.
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    out.absent = strprintf("cannot load %s: %s", library.c_str(), why ? why : "?");
    return out;
  }
  CudaDriver &cu = out.driver;
  cu.library = library;
  const char *missing = nullptr;
  auto need = [&](bool found, const char *name) {
    if (!found && !missing) missing = name;
  };
  need(load(handle, "cuInit", &cu.init), "cuInit");
  need(load(handle, "cuPointerGetAttributes", &cu.pointer_get_attributes),
       "cuPointerGetAttributes");
  need(load(handle, "cuCtxGetCurrent", &cu.ctx_get_current), "cuCtxGetCurrent");
  need(load(handle, "cuCtxSetCurrent", &cu.ctx_set_current), "cuCtxSetCurrent");
  need(load(handle, "cuStreamCreate", &cu.stream_create), "cuStreamCreate");
  need(load_any(handle, {"cuStreamDestroy_v2", "cuStreamDestroy"}, &cu.stream_destroy),
       "cuStreamDestroy_v2");
  need(load(handle, "cuMemcpyDtoHAsync_v2", &cu.memcpy_dtoh_async), "cuMemcpyDtoHAsync_v2");
  need(load(handle, "cuMemcpyHtoDAsync_v2", &cu.memcpy_htod_async), "cuMemcpyHtoDAsync_v2");
  need(load(handle, "cuEventCreate", &cu.event_create), "cuEventCreate");
  need(load(handle, "cuEventRecord", &cu.event_record), "cuEventRecord");
  need(load(handle, "cuEventQuery", &cu.event_query), "cuEventQuery");
  need(load_any(handle, {"cuEventDestroy_v2", "cuEventDestroy"}, &cu.event_destroy),
       "cuEventDestroy_v2");
  need(load(handle, "cuMemHostAlloc", &cu.mem_host_alloc), "cuMemHostAlloc");
  need(load(handle, "cuMemFreeHost", &cu.mem_free_host), "cuMemFreeHost");
  need(load_any(handle, {"cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer"},
                &cu.mem_host_get_device_pointer),
       "cuMemHostGetDevicePointer_v2");
  if (missing) {
    out.absent = strprintf("%s lacks %s", library.c_str(), missing);
    return out;
  }
  load(handle, "cuStreamGetCtx", &cu.stream_get_ctx);
  load_any(handle, {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"}, &cu.stream_wait_value32);
  load_any(handle, {"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}, &cu.stream_write_value32);
  load(handle, "cuLaunchHostFunc", &cu.launch_host_func);
  load(handle, "cuGetErrorName", &cu.get_error_name);
  load(handle, "cuModuleLoadData", &cu.module_load_data);
  load(handle, "cuModuleGetFunction", &cu.module_get_function);
  load(handle, "cuModuleUnload", &cu.module_unload);
  load(handle, "cuLaunchKernel", &cu.launch_kernel);
  load(handle, "cuCtxGetDevice", &cu.ctx_get_device);
  load(handle, "cuDeviceGetAttribute", &cu.device_get_attribute);
  load(handle, "cuDeviceGetPCIBusId", &cu.device_get_pci_bus_id);
  load(handle, "cuIpcGetMemHandle", &cu.ipc_get_mem_handle);
  load_any(handle, {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"}, &cu.ipc_open_mem_handle);
  load(handle, "cuIpcCloseMemHandle", &cu.ipc_close_mem_handle);
  load(handle, "cuMemGetAddressRange_v2", &cu.mem_get_address_range);
  load(handle, "cuMemcpyDtoDAsync_v2", &cu.memcpy_dtod_async);
  load(handle, "cuMemAlloc_v2", &cu.mem_alloc);
  load(handle, "cuMemFree_v2", &cu.mem_free);
  load(handle, "cuStreamWaitEvent", &cu.stream_wait_event);
  out.present = true;
  return out;
}

const Loaded &loaded() {
  static const Loaded once = [] {
    Loaded l = open_driver();
    if (l.present)
      DDL_DEBUG("CUDA driver API from %s: device buffers are recognised", l.driver.library.c_str());
    else
      DDL_DEBUG("no CUDA driver (%s): every buffer is host memory", l.absent.c_str());
    return l;
  }();
  return once;
}

}  // namespace

const CudaDriver *cuda_driver() {
  const Loaded &l = loaded();
  return l.present ? &l.driver : nullptr;
}

const std::string &cuda_absent_reason() {
  return loaded().absent;
}

std::string current_gpu_bus_id() {
  const CudaDriver *cu = cuda_driver();
  if (!cu || !cu->ctx_get_device || !cu->device_get_pci_bus_id) return std::string();
  // Before cuInit this fails with NOT_INITIALIZED; with no context it gives null.
  CUcontext context = nullptr;
  if (cu->ctx_get_current(&context) != kCudaSuccess || !context) return std::string();
  CUdevice device = 0;
  char bus_id[32] = "";
  if (cu->ctx_get_device(&device) != kCudaSuccess ||
      cu->device_get_pci_bus_id(bus_id, sizeof bus_id, device) != kCudaSuccess)
    return std::string();
  bus_id[sizeof bus_id - 1] = 0;
  return bus_id;
}

std::string cuda_error_text(const CudaDriver &cu, CUresult result) {
  const char *name = nullptr;
  if (cu.get_error_name && cu.get_error_name(result, &name) == kCudaSuccess && name)
    return strprintf("%s (%d)", name, result);
  return strprintf("CUDA error %d", result);
}

Status cuda_failed(const CudaDriver &cu, const std::string &what, CUresult result) {
  return Status(DDL_ERR_SYSTEM,
                strprintf("CUDA %s: %s", what.c_str(), cuda_error_text(cu, result).c_str()));
}

bool has_ipc_entry_points(const CudaDriver &cu, const char **missing) {
  const std::pair<bool, const char *> needed[] = {
      {cu.ipc_get_mem_handle != nullptr, "cuIpcGetMemHandle"},
      {cu.ipc_open_mem_handle != nullptr, "cuIpcOpenMemHandle_v2"},
      {cu.ipc_close_mem_handle != nullptr, "cuIpcCloseMemHandle"},
      {cu.mem_get_address_range != nullptr, "cuMemGetAddressRange_v2"},
      {cu.memcpy_dtod_async != nullptr, "cuMemcpyDtoDAsync_v2"}};
  for (const auto &n : needed)
    if (!n.first) {
      *missing = n.second;
      return false;
    }
  *missing = nullptr;
  return true;
}

PointerInfo pointer_info(const CudaDriver &cu, const void *ptr) {
  PointerInfo info;
  // cuPointerGetAttributes (unlike cuPointerGetAttribute) succeeds on memory CUDA does not
  // know and leaves the memory type 0; before cuInit it fails with NOT_INITIALIZED.
  unsigned memory_type = 0;
  CUcontext context = nullptr;
  int attributes[2] = {kPointerAttributeMemoryType, kPointerAttributeContext};
  void *data[2] = {&memory_type, &context};
  const CUresult r =
      cu.pointer_get_attributes(2, attributes, data, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != kCudaSuccess || memory_type == 0 || memory_type == kMemoryTypeHost) return info;
  info.kind = MemoryKind::kDevice;
  info.context = context;
  return info;
}

ScopedContext::ScopedContext(const CudaDriver &cu, CUcontext ctx) : cu_(cu) {
  if (!ctx || cu_.ctx_get_current(&saved_) != kCudaSuccess || saved_ == ctx) return;
  switched_ = cu_.ctx_set_current(ctx) == kCudaSuccess;
}

ScopedContext::~ScopedContext() {
  if (switched_) cu_.ctx_set_current(saved_);
}

}  // namespace device
}  // namespace ddl

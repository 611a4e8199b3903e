// The CUDA driver API through dlopen: libddl.so.0 never links libcuda, so one library loads and
// runs on machines without CUDA and uses the GPU where there is one. Only the types and entry
// points ddl calls are declared here, with the values of cuda.h (12.x/13.x).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/common/call.h"
#include "lib/common/status.h"

namespace ddl {
namespace device {

typedef int CUresult;  // CUDA_SUCCESS == 0
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef int CUdevice;
typedef void (*CUhostFn)(void *user_data);
// An exported device allocation (CU_IPC_HANDLE_SIZE bytes), passed by value as cuda.h does.
struct CUipcMemHandle {
  char reserved[64];
};

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorNotInitialized = 3;
constexpr CUresult kCudaErrorNotFound = 500;
constexpr CUresult kCudaErrorNotReady = 600;
constexpr int kDeviceAttributeMultiprocessorCount = 16;  // CU_DEVICE_ATTRIBUTE_...
constexpr int kPointerAttributeContext = 1;              // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kPointerAttributeMemoryType = 2;           // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeHost = 1;                  // CU_MEMORYTYPE_HOST
constexpr unsigned kMemHostAllocPortable = 0x1;
constexpr unsigned kMemHostAllocDeviceMap = 0x2;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kStreamWaitValueGeq = 0x0;
constexpr unsigned kIpcMemLazyEnablePeerAccess = 0x1;
// CU_STREAM_LEGACY: the legacy default stream, which waits for every blocking stream.
inline CUstream legacy_stream() {
  return reinterpret_cast<CUstream>(uintptr_t{1});
}

struct CudaDriver {
  std::string library;  // what was opened (DDL_CUDA_LIBRARY, or libcuda.so.1)
  CUresult (*init)(unsigned flags);
  CUresult (*pointer_get_attributes)(unsigned count, int *attributes, void **data, CUdeviceptr ptr);
  CUresult (*ctx_get_current)(CUcontext *ctx);
  CUresult (*ctx_set_current)(CUcontext ctx);
  CUresult (*stream_create)(CUstream *stream, unsigned flags);
  CUresult (*stream_destroy)(CUstream stream);
  CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
  CUresult (*event_create)(CUevent *event, unsigned flags);
  CUresult (*event_record)(CUevent event, CUstream stream);
  CUresult (*event_query)(CUevent event);
  CUresult (*event_destroy)(CUevent event);
  CUresult (*mem_host_alloc)(void **ptr, size_t bytes, unsigned flags);
  CUresult (*mem_free_host)(void *ptr);
  CUresult (*mem_host_get_device_pointer)(CUdeviceptr *dptr, void *ptr, unsigned flags);
  // Optional: null when the driver lacks them.
  CUresult (*stream_get_ctx)(CUstream stream, CUcontext *ctx);
  // Writes `value` to a word of mapped pinned memory once the stream's earlier work has ended
  // (with a memory barrier: their writes are visible first). Optional.
  CUresult (*stream_write_value32)(CUstream stream, CUdeviceptr addr, uint32_t value,
                                   unsigned flags);
  CUresult (*stream_wait_value32)(CUstream stream, CUdeviceptr addr, uint32_t value,
                                  unsigned flags);
  CUresult (*launch_host_func)(CUstream stream, CUhostFn fn, void *user_data);
  CUresult (*get_error_name)(CUresult error, const char **name);
  // Optional, for the reduction kernels (lib/device/device_reduce.h): without the first four
  // the kernels are unavailable; without the last two grids are sized for a large GPU.
  CUresult (*module_load_data)(CUmodule *module, const void *image);
  CUresult (*module_get_function)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*module_unload)(CUmodule module);
  CUresult (*launch_kernel)(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                            unsigned block_x, unsigned block_y, unsigned block_z,
                            unsigned shared_bytes, CUstream stream, void **params, void **extra);
  CUresult (*ctx_get_device)(CUdevice *device);
  CUresult (*device_get_attribute)(int *value, int attribute, CUdevice device);
  // Optional, to find the GPU a rank uses in the topology (current_gpu_bus_id).
  CUresult (*device_get_pci_bus_id)(char *bus_id, int length, CUdevice device);
  // Optional, for reducing straight out of other processes' device memory inside a host
  // (lib/device/ipc_allreduce.h): without any of them, device buffers are staged.
  CUresult (*ipc_get_mem_handle)(CUipcMemHandle *handle, CUdeviceptr base);
  CUresult (*ipc_open_mem_handle)(CUdeviceptr *base, CUipcMemHandle handle, unsigned flags);
  CUresult (*ipc_close_mem_handle)(CUdeviceptr base);
  CUresult (*mem_get_address_range)(CUdeviceptr *base, size_t *bytes, CUdeviceptr ptr);
  CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  // Optional, for the CUDA-IPC allreduce queued on a stream (lib/device/stream_ipc.h): its
  // device memory, and one stream made to wait for another's event.
  CUresult (*mem_alloc)(CUdeviceptr *ptr, size_t bytes);
  CUresult (*mem_free)(CUdeviceptr ptr);
  CUresult (*stream_wait_event)(CUstream stream, CUevent event, unsigned flags);
};

// Whether cu has every entry point of the CUDA-IPC path; *missing names the first it lacks.
bool has_ipc_entry_points(const CudaDriver &cu, const char **missing);

// The driver, opened on the first call and kept for the process; null when there is none
// (no library, a missing entry point, or DDL_CUDA=0). The answer is cached: a process without
// a driver tries once, and each later call costs one load of a static.
const CudaDriver *cuda_driver();
// Why cuda_driver() is null ("DDL_CUDA=0", "cannot load libcuda.so.1: ..."); "" when it is not.
const std::string &cuda_absent_reason();

// The PCI address of the GPU whose context is current on this thread ("0000:4E:00.0"), as a
// rank that called cudaSetDevice (or torch.cuda.set_device) before creating its communicator
// has it; "" when there is no driver, the process has not initialised CUDA (ddl never does
// it for the process: that would cost every CPU-only rank a driver start), or no context is
// current.
std::string current_gpu_bus_id();

// "CUDA_ERROR_INVALID_VALUE (1)": a driver result in words.
std::string cuda_error_text(const CudaDriver &cu, CUresult result);

// A driver call that failed, as a DDL_ERR_SYSTEM: "CUDA <what>: <the result in words>".
Status cuda_failed(const CudaDriver &cu, const std::string &what, CUresult result);

// Returns cuda_failed(cu, what, r) from the enclosing function when cu.call returns r != 0.
#define DDL_CU_TRY(cu, call, what)                                     \
  do {                                                                 \
    const ::ddl::device::CUresult ddl_cu_result_ = (cu).call;          \
    if (ddl_cu_result_ != ::ddl::device::kCudaSuccess)                 \
      return ::ddl::device::cuda_failed((cu), (what), ddl_cu_result_); \
  } while (0)

using MemoryKind = ddl::MemoryKind;  // lib/common/call.h
struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  CUcontext context = nullptr;  // the context the device memory belongs to
};

// Where ptr lives. Memory CUDA does not know, and every pointer while the process has not
// initialised CUDA (it cannot hold device memory then), is host memory. Pinned host memory is
// host memory; device and managed memory are device memory (staged: copies work for both).
PointerInfo pointer_info(const CudaDriver &cu, const void *ptr);

// Makes ctx current on this thread for the scope, then puts back the one before.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver &cu, CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;

 private:
  const CudaDriver &cu_;
  CUcontext saved_ = nullptr;
  bool switched_ = false;
};

}  // namespace device
}  // namespace ddl

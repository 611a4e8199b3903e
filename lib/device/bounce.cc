#include "lib/device/bounce.h"

#include "lib/core/comm.h"
#include "lib/device/device_state.h"

namespace ddl {
namespace device {

void Bounce::of(const void *ptr, size_t bytes, std::unique_ptr<Bounce> *out) {
  out->reset();
  const CudaDriver *cu = cuda_driver();
  if (!cu || bytes == 0) return;
  const PointerInfo where = pointer_info(*cu, ptr);
  if (where.kind == MemoryKind::kDevice) out->reset(new Bounce(*cu, where, bytes));
}

template <class Copy>
Status Bounce::copied(const ddl_comm *comm, const char *what, Copy copy) const {
  ScopedContext scope(cu_, where_.context);
  CUevent done = nullptr;
  CUresult r = copy();
  if (r == kCudaSuccess) r = cu_.event_create(&done, kEventDisableTiming);
  if (r == kCudaSuccess) r = cu_.event_record(done, legacy_stream());
  Status s = r == kCudaSuccess ? wait_event(cu_, done, deadline_of(comm), &comm->aborted, what)
                               : cuda_failed(cu_, what, r);
  if (done) cu_.event_destroy(done);
  return s;
}

Status Bounce::copy_from_device(const ddl_comm *comm, const void *src) {
  return copied(comm, "copying a send's device buffer to host memory", [&] {
    return cu_.memcpy_dtoh_async(host_.data(), reinterpret_cast<CUdeviceptr>(src), host_.size(),
                                 legacy_stream());
  });
}

Status Bounce::copy_to_device(const ddl_comm *comm, void *dst) const {
  return copied(comm, "copying a received message into its device buffer", [&] {
    return cu_.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(dst), host_.data(), host_.size(),
                                 legacy_stream());
  });
}

}  // namespace device
}  // namespace ddl

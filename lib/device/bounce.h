// A send's or a receive's device buffer seen through host memory (ddl_send and ddl_recv of
// device memory): the transports move host bytes only. A send's bytes are copied out when it
// is posted (the caller's data as it is then, after the work queued on the legacy default
// stream, as for the blocking collectives), a receive's copied in once they have arrived,
// each copy waited for with the communicator's deadline. Host buffers need none.
#pragma once

#include <memory>
#include <vector>

#include "lib/device/cuda_driver.h"

struct ddl_comm;

namespace ddl {
namespace device {

class Bounce {
 public:
  // A bounce for `bytes` at `ptr` when it is device memory (*out stays null for host memory
  // and when there is no driver).
  static void of(const void *ptr, size_t bytes, std::unique_ptr<Bounce> *out);

  unsigned char *host() { return host_.data(); }
  Status copy_from_device(const ddl_comm *comm, const void *src);
  Status copy_to_device(const ddl_comm *comm, void *dst) const;

 private:
  Bounce(const CudaDriver &cu, PointerInfo where, size_t bytes)
      : cu_(cu), where_(where), host_(bytes) {}
  // Runs `copy` (an asynchronous copy on the legacy default stream) and waits for it.
  template <class Copy>
  Status copied(const ddl_comm *comm, const char *what, Copy copy) const;

  const CudaDriver &cu_;
  PointerInfo where_;
  std::vector<unsigned char> host_;
};

}  // namespace device
}  // namespace ddl

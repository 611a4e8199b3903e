// What holds a stream until a host thread says so, on a real GPU (skipped without one): the
// question behind the asynchronous stream mode (lib/device/stream_calls.cc), which hung on an
// H100 and an H200. Each test queues a wait on a stream (a stream memory wait,
// cuStreamWaitValue32, or ddl's flag-wait kernel) on a stream of its own or on the legacy
// default stream; a helper thread then does what ddl's progress thread does (a copy on a
// non-blocking stream of its own, polling its event) and writes the flag; meanwhile the main
// thread does nothing, or what an application does (an allocation and a free, a synchronous
// copy), then waits for the stream. A test that hangs is killed at Criterion's --timeout and
// names the combination that deadlocks. With DDL_GPU_TEST_LIBRARY pointing at the stand-in
// driver every test passes (it models waiting for value-waiting streams, not the driver's
// locks): that checks the test itself.
#include <criterion/criterion.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "lib/common/status.h"
#include "lib/device/device_state.h"
#include "real_gpu.h"

namespace dev = ddl::device;
using ddltest::Gpu;
using ddltest::real_driver;

namespace {

enum class Wait { kValue, kKernel };
enum class App { kNothing, kAllocation, kSyncCopy };

constexpr size_t kBytes = 1 << 20;

void probe(Wait wait, bool legacy, App app) {
  Gpu gpu{};
  const dev::CudaDriver &cu = real_driver(&gpu);
  dev::CUcontext ctx = nullptr;
  cr_assert_eq(cu.ctx_get_current(&ctx), 0);
  void *flag_host = nullptr;
  cr_assert_eq(
      cu.mem_host_alloc(&flag_host, 64, dev::kMemHostAllocPortable | dev::kMemHostAllocDeviceMap),
      0);
  auto *flag = static_cast<uint32_t *>(flag_host);
  __atomic_store_n(flag, 0u, __ATOMIC_RELEASE);
  dev::CUdeviceptr flag_device = 0;
  cr_assert_eq(cu.mem_host_get_device_pointer(&flag_device, flag_host, 0), 0);
  unsigned long long device_buffer = 0;
  cr_assert_eq(gpu.mem_alloc(&device_buffer, kBytes), 0);
  void *pinned = nullptr;
  cr_assert_eq(cu.mem_host_alloc(&pinned, kBytes, dev::kMemHostAllocPortable), 0);
  dev::CUstream own = nullptr, copies = nullptr;
  cr_assert_eq(cu.stream_create(&own, dev::kStreamNonBlocking), 0);
  cr_assert_eq(cu.stream_create(&copies, dev::kStreamNonBlocking), 0);
  const dev::CUstream waiting = legacy ? dev::legacy_stream() : own;
  dev::CUevent copied = nullptr, passed = nullptr;
  cr_assert_eq(cu.event_create(&copied, dev::kEventDisableTiming), 0);
  cr_assert_eq(cu.event_create(&passed, dev::kEventDisableTiming), 0);

  if (wait == Wait::kKernel) {
    const ddl::Status s = dev::launch_wait_flag(cu, waiting, ctx, flag_device, 1);
    cr_assert(s.ok(), "%s", s.message().c_str());
  } else {
    cr_assert(cu.stream_wait_value32, "the driver has no cuStreamWaitValue32");
    cr_assert_eq(cu.stream_wait_value32(waiting, flag_device, 1, dev::kStreamWaitValueGeq), 0);
  }
  cr_assert_eq(cu.event_record(passed, waiting), 0);

  // The progress thread's part: a copy on its own non-blocking stream, then the flag.
  std::atomic<int> helper_result{-1};
  std::thread helper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    dev::ScopedContext scope(cu, ctx);
    int r = cu.memcpy_dtoh_async(pinned, device_buffer, kBytes, copies);
    if (r == 0) r = cu.event_record(copied, copies);
    const ddl::Status s =
        r == 0 ? dev::wait_event(cu, copied,
                                 std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                 nullptr, "the helper's copy")
               : ddl::Status(DDL_ERR_SYSTEM, "the helper's copy could not be queued");
    __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
    helper_result = s.ok() ? 0 : 1;
  });

  // The application's part while the stream waits.
  int app_result = 0;
  unsigned char head[64];
  if (app == App::kAllocation) {
    unsigned long long more = 0;
    app_result = gpu.mem_alloc(&more, kBytes);
    if (app_result == 0) app_result = gpu.mem_free(more);
  } else if (app == App::kSyncCopy) {
    app_result = gpu.dtoh(head, device_buffer, sizeof head);  // ordered after the legacy stream
  }
  const ddl::Status s =
      dev::wait_event(cu, passed, std::chrono::steady_clock::now() + std::chrono::seconds(5),
                      nullptr, "the waiting stream");
  helper.join();
  cr_assert_eq(app_result, 0, "the application's call failed: %s",
               dev::cuda_error_text(cu, app_result).c_str());
  cr_assert(s.ok(), "%s", s.message().c_str());
  cr_assert_eq(helper_result.load(), 0, "the helper's copy did not end");
  cu.event_destroy(copied);
  cu.event_destroy(passed);
  cu.stream_destroy(own);
  cu.stream_destroy(copies);
  cu.mem_free_host(pinned);
  gpu.mem_free(device_buffer);
  cu.mem_free_host(flag_host);
}

}  // namespace

Test(stream_wait_gpu, value_wait_own_stream) {
  probe(Wait::kValue, false, App::kNothing);
}
Test(stream_wait_gpu, value_wait_legacy_stream) {
  probe(Wait::kValue, true, App::kNothing);
}
Test(stream_wait_gpu, kernel_wait_own_stream) {
  probe(Wait::kKernel, false, App::kNothing);
}
Test(stream_wait_gpu, kernel_wait_legacy_stream) {
  probe(Wait::kKernel, true, App::kNothing);
}
Test(stream_wait_gpu, value_wait_legacy_stream_app_allocates) {
  probe(Wait::kValue, true, App::kAllocation);
}
Test(stream_wait_gpu, kernel_wait_legacy_stream_app_allocates) {
  probe(Wait::kKernel, true, App::kAllocation);
}
Test(stream_wait_gpu, value_wait_legacy_stream_app_copies) {
  probe(Wait::kValue, true, App::kSyncCopy);
}
Test(stream_wait_gpu, kernel_wait_legacy_stream_app_copies) {
  probe(Wait::kKernel, true, App::kSyncCopy);
}

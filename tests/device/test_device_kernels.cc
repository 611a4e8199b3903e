// The launcher of the CUDA reduction kernels (lib/device/device_reduce.cc) against the
// stand-in driver, whose cuLaunchKernel runs the kernels' thread body compiled for the host
// (fakes/fake_kernels.cc). This checks the dispatch — kernel names, the argument block, the
// split into scalar head / 16-byte vectors / scalar tail, grid sizing and coverage, alignment
// (the stand-in reports an access a GPU would fault on), stream order, one module load per
// context, argument errors — and not the device code as nvcc builds it, which has never run
// here (no GPU). Results are compared with the kernels' element arithmetic, itself checked
// against lib/reduce by tests/kernels/test_device_kernel_math.cc.
#include <criterion/criterion.h>
#include <stdlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fake_device.h"
#include "lib/common/datatype.h"
#include "lib/device/cuda_driver.h"
#include "lib/device/device_reduce.h"
#include "lib/device/kernels/reduce_math.h"
#include "tests/kernels/kernel_reference.h"

using namespace ddltest;
namespace dev = ddl::device;
namespace k = ddl::kernels;

namespace {

struct Stats {
  int run, loaded, unloaded;
  unsigned grid, block;
  std::string kernel;
};

Stats stats() {
  static auto fn =
      reinterpret_cast<void (*)(int *, int *, int *, unsigned *, unsigned *, const char **)>(
          dlsym(dlopen(FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD), "fake_cuda_kernel_stats"));
  Stats s{};
  const char *name = "";
  fn(&s.run, &s.loaded, &s.unloaded, &s.grid, &s.block, &name);
  s.kernel = name;
  return s;
}

void expect_no_faults() {
  static auto fn = reinterpret_cast<int (*)(const char **)>(
      dlsym(dlopen(FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD), "fake_cuda_kernel_faults"));
  const char *why = "";
  const int n = fn(&why);
  cr_assert_eq(n, 0, "%d launches would have faulted on a GPU; the first: %s", n, why);
}

// The driver ddl opened (the stand-in), with its context current on this thread. Skips
// when this build has no kernels (nothing to launch).
const dev::CudaDriver &driver() {
  setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
  FakeCuda::get();
  const dev::CudaDriver *cu = dev::cuda_driver();
  cr_assert(cu, "no driver: %s", dev::cuda_absent_reason().c_str());
  if (!dev::cuda_kernels_built())
    cr_skip_test("this build has no CUDA kernels: %s", dev::cuda_kernels_absent_reason().c_str());
  return *cu;
}

// The expected element: the kernels' arithmetic on the host, on element i of each input.
void expected(int dtype, int op, const unsigned char *const *in, int n, size_t i, int divisor,
              void *out) {
  const size_t size = ddl::datatype_size(dtype);
  unsigned char values[8 * 8];
  for (int j = 0; j < n && j < 8; ++j) std::memcpy(values + j * size, in[j] + i * size, size);
  kernel_reduce_element(dtype, op, values, n, divisor, out);
}

// Random element bytes: integers of every bit pattern; floats as small values (so that
// products stay finite and sums meaningful), with a NaN now and then.
void fill(int dtype, unsigned char *p, size_t count, std::mt19937_64 &rng) {
  const size_t size = ddl::datatype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    unsigned char *e = p + i * size;
    const uint64_t r = rng();
    const float f = static_cast<float>(static_cast<int>(r % 41) - 20) / 4.0f;
    if (dtype == DDL_FLOAT32) {
      std::memcpy(e, &f, 4);
    } else if (dtype == DDL_FLOAT64) {
      const double d = f;
      std::memcpy(e, &d, 8);
    } else if (dtype == DDL_FLOAT16) {
      const uint16_t h = r % 97 == 0 ? 0x7d01 : k::f32_to_f16(f);
      std::memcpy(e, &h, 2);
    } else if (dtype == DDL_BFLOAT16) {
      const uint16_t b = r % 97 == 0 ? 0xffc1 : k::f32_to_bf16(f);
      std::memcpy(e, &b, 2);
    } else {
      std::memcpy(e, &r, size);
    }
  }
}

// One reduction of n inputs of `count` elements at the given byte offsets into their
// buffers (offset[0] is dst's), on `stream`, checked element by element and for bytes
// written outside dst. in_place: dst is input 0.
void check_reduce(const dev::CudaDriver &cu, void *stream, int dtype, int op, int n, size_t count,
                  int divisor, const std::vector<size_t> &offset, bool in_place,
                  std::mt19937_64 &rng) {
  const size_t size = ddl::datatype_size(dtype), bytes = count * size;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  for (int j = 0; j <= n; ++j) bufs.push_back(std::make_unique<DeviceBuffer>(bytes + 64));
  std::vector<const void *> srcs;
  std::vector<std::vector<unsigned char>> copies;  // inputs as they were
  std::vector<const unsigned char *> in;
  for (int j = 0; j < n; ++j) {
    DeviceBuffer &b = *bufs[in_place && j == 0 ? 0 : j + 1];
    const size_t off = in_place && j == 0 ? offset[0] : offset[j + 1];
    std::memset(b.shadow(), 0xa5, b.bytes());
    fill(dtype, b.shadow() + off, count, rng);
    copies.emplace_back(b.shadow() + off, b.shadow() + off + bytes);
    srcs.push_back(static_cast<unsigned char *>(b.device()) + off);
  }
  for (const auto &c : copies) in.push_back(c.data());
  DeviceBuffer &dst = *bufs[0];
  if (!in_place) std::memset(dst.shadow(), 0xa5, dst.bytes());
  void *dst_ptr = static_cast<unsigned char *>(dst.device()) + offset[0];
  const ddl::Status st =
      dev::device_reduce(cu, static_cast<dev::CUstream>(stream), dst_ptr, srcs.data(), n, count,
                         static_cast<ddl_datatype_t>(dtype), static_cast<ddl_op_t>(op), divisor);
  cr_assert(st.ok(), "%s", st.message().c_str());
  FakeCuda::get().stream_synchronize(stream);
  expect_no_faults();
  const char *what = "";
  for (size_t i = 0; i < count; ++i) {
    unsigned char want[8];
    expected(dtype, op, in.data(), n, i, divisor, want);
    what = ddl::datatype_name(dtype);
    cr_assert(std::memcmp(dst.shadow() + offset[0] + i * size, want, size) == 0,
              "%s %s, %d inputs, count %zu, offsets %zu/%zu, element %zu differs", what,
              ddl::op_name(op), n, count, offset[0], offset[1], i);
  }
  for (size_t b = 0; b < dst.bytes(); ++b)
    if (b < offset[0] || b >= offset[0] + bytes)
      cr_assert_eq(dst.shadow()[b], 0xa5, "%s %s count %zu: byte %zu outside dst written", what,
                   ddl::op_name(op), count, b);
}

}  // namespace

TestSuite(device_kernels, .timeout = 600);

Test(device_kernels, every_datatype_op_and_input_count) {
  const dev::CudaDriver &cu = driver();
  void *stream = nullptr;
  cr_assert_eq(FakeCuda::get().stream_create(&stream, 0), 0);
  std::mt19937_64 rng(1);
  const std::vector<size_t> aligned(9, 0);
  for (int dtype = 0; dtype < DDL_DATATYPE_COUNT; ++dtype)
    for (int op = 0; op < DDL_OP_COUNT; ++op)
      for (int n = 2; n <= 8; ++n)
        for (size_t count : {size_t(1), size_t(7), size_t(33), size_t(1001)}) {
          const int divisor = op == DDL_AVG ? (count == 33 ? 1 : n) : 1;
          check_reduce(cu, stream, dtype, op, n, count, divisor, aligned, false, rng);
        }
  const Stats s = stats();
  cr_assert_eq(s.loaded, 1, "the module was loaded %d times in one context", s.loaded);
  cr_assert_eq(s.run, DDL_DATATYPE_COUNT * DDL_OP_COUNT * 7 * 4);
  FakeCuda::get().stream_destroy(stream);
}

Test(device_kernels, misaligned_pointers_and_in_place) {
  const dev::CudaDriver &cu = driver();
  std::mt19937_64 rng(2);
  // All at one offset (a scalar head, then vectors); different offsets (all scalar); not
  // even element-aligned (byte by byte); in place.
  const std::vector<std::vector<size_t>> layouts = {{4, 4, 4, 4},  {8, 8, 8, 8},   {2, 2, 2, 2},
                                                    {0, 4, 8, 12}, {16, 0, 16, 0}, {1, 0, 0, 0},
                                                    {0, 3, 0, 0},  {5, 5, 5, 5}};
  for (int dtype = 0; dtype < DDL_DATATYPE_COUNT; ++dtype)
    for (int op : {DDL_SUM, DDL_MAX, DDL_AVG})
      for (const auto &layout : layouts)
        for (size_t count : {size_t(3), size_t(40), size_t(257)})
          for (bool in_place : {false, true})
            check_reduce(cu, nullptr, dtype, op, 3, count, 3, layout, in_place, rng);
}

Test(device_kernels, grids_are_capped_by_the_multiprocessors_and_still_cover_everything) {
  setenv("FAKE_CUDA_SMS", "2", 1);  // 2 SMs x 8 blocks: grids of at most 16 blocks of 256
  const dev::CudaDriver &cu = driver();
  std::mt19937_64 rng(3);
  const std::vector<size_t> aligned(9, 0);
  const size_t count = 16 * 256 * 4 * 3 + 5;  // three rounds of the grid-stride loop, a tail
  check_reduce(cu, nullptr, DDL_FLOAT32, DDL_SUM, 2, count, 1, aligned, false, rng);
  Stats s = stats();
  cr_assert_eq(s.grid, 16u);
  cr_assert_eq(s.block, 256u);
  cr_assert_eq(s.kernel, std::string("ddl_reduce_float32_sum"));
  check_reduce(cu, nullptr, DDL_INT8, DDL_MIN, 2, 100, 1, aligned, false, rng);
  s = stats();
  cr_assert_eq(s.grid, 1u, "100 int8 (6 vectors, 4 scalars) need one block, not %u", s.grid);
  cr_assert_eq(s.kernel, std::string("ddl_reduce_int8_min"));
}

Test(device_kernels, kernels_run_in_stream_order) {
  // A copy into the input (delayed by the stand-in), the reduction, and a copy out, all on
  // one stream: the kernel must see the copied input and the last copy its output.
  setenv("FAKE_CUDA_DELAY_US", "20000", 1);
  const dev::CudaDriver &cu = driver();
  void *stream = nullptr;
  cr_assert_eq(FakeCuda::get().stream_create(&stream, 0), 0);
  const size_t n = 1000;
  DeviceBuffer a(n * 4), b(n * 4), out(n * 4);
  std::vector<float> host_a(n, 2.0f), host_out(n, -1.0f);
  std::memset(a.shadow(), 0, n * 4);
  for (size_t i = 0; i < n; ++i) std::memcpy(b.shadow() + i * 4, &host_a[0], 4);  // 2.0
  auto *s = static_cast<dev::CUstream>(stream);
  cr_assert_eq(
      cu.memcpy_htod_async(reinterpret_cast<dev::CUdeviceptr>(a.device()), host_a.data(), n * 4, s),
      0);
  const void *srcs[2] = {a.device(), b.device()};
  const ddl::Status st =
      dev::device_reduce(cu, s, out.device(), srcs, 2, n, DDL_FLOAT32, DDL_SUM, 1);
  cr_assert(st.ok(), "%s", st.message().c_str());
  cr_assert_eq(cu.memcpy_dtoh_async(host_out.data(),
                                    reinterpret_cast<dev::CUdeviceptr>(out.device()), n * 4, s),
               0);
  FakeCuda::get().stream_synchronize(stream);
  expect_no_faults();
  for (size_t i = 0; i < n; ++i) cr_assert_eq(host_out[i], 4.0f, "element %zu: %g", i, host_out[i]);
  FakeCuda::get().stream_destroy(stream);
}

Test(device_kernels, argument_errors_say_what_is_wrong) {
  const dev::CudaDriver &cu = driver();
  DeviceBuffer a(64), b(64);
  const void *srcs[9] = {a.device(), b.device(), a.device(), b.device(), a.device(),
                         b.device(), a.device(), b.device(), a.device()};
  struct Case {
    int nsrcs;
    int dtype;
    int op;
    int divisor;
    bool null_input;
    const char *message;
  };
  const Case cases[] = {
      {1, DDL_FLOAT32, DDL_SUM, 1, false,
       "device reduce of 4 float32 (sum, 1 inputs): the kernels take 2 to 8 inputs"},
      {9, DDL_FLOAT32, DDL_SUM, 1, false, "(sum, 9 inputs): the kernels take 2 to 8 inputs"},
      {2, 42, DDL_SUM, 1, false, "device reduce: datatype 42 is not a ddl_datatype_t"},
      {2, DDL_INT8, 17, 1, false, "device reduce: op 17 is not a ddl_op_t"},
      {2, DDL_INT32, DDL_AVG, 0, false, "(avg, 2 inputs): the average's divisor is 0, not >= 1"},
      {2, DDL_INT32, DDL_SUM, 1, true, "(sum, 2 inputs): input 1 is a null pointer"},
  };
  for (const Case &c : cases) {
    const void *in[9];
    std::memcpy(in, srcs, sizeof in);
    if (c.null_input) in[1] = nullptr;
    ddl_datatype_t dtype;
    ddl_op_t op;
    std::memcpy(&dtype, &c.dtype, sizeof dtype);  // out-of-range values, as a C caller may pass
    std::memcpy(&op, &c.op, sizeof op);
    const ddl::Status st =
        dev::device_reduce(cu, nullptr, a.device(), in, c.nsrcs, 4, dtype, op, c.divisor);
    cr_assert_eq(st.code(), DDL_ERR_INVALID_ARGUMENT, "%s", st.message().c_str());
    cr_assert(st.message().find(c.message) != std::string::npos, "'%s' lacks '%s'",
              st.message().c_str(), c.message);
  }
  // count 0 queues nothing, whatever the pointers.
  cr_assert(dev::device_reduce(cu, nullptr, nullptr, nullptr, 2, 0, DDL_FLOAT32, DDL_SUM, 1).ok());
  cr_assert_eq(stats().run, 0);
  // No context current: said so, and nothing launched.
  FakeCuda::get().set_current(nullptr);
  const ddl::Status st =
      dev::device_reduce(cu, nullptr, a.device(), srcs, 2, 4, DDL_FLOAT32, DDL_SUM, 1);
  cr_assert_eq(st.code(), DDL_ERR_INVALID_USAGE, "%s", st.message().c_str());
  cr_assert(st.message().find("no CUDA context is current on this thread") != std::string::npos,
            "%s", st.message().c_str());
}

Test(device_kernels, one_module_per_context_until_unloaded) {
  const dev::CudaDriver &cu = driver();
  std::mt19937_64 rng(4);
  const std::vector<size_t> aligned(9, 0);
  for (int i = 0; i < 3; ++i)
    check_reduce(cu, nullptr, DDL_BFLOAT16, DDL_AVG, 4, 50, 4, aligned, false, rng);
  cr_assert_eq(stats().loaded, 1);
  dev::unload_device_kernels(cu);
  cr_assert_eq(stats().unloaded, 1);
  check_reduce(cu, nullptr, DDL_BFLOAT16, DDL_AVG, 4, 50, 4, aligned, false, rng);
  cr_assert_eq(stats().loaded, 2, "the next call after unloading loads again");
  cr_assert_eq(stats().kernel, std::string("ddl_reduce_bfloat16_avg"));
}

Test(device_kernels, a_fault_is_reported_not_hidden) {
  // Host memory the driver does not know is an illegal address for a kernel: the stand-in
  // reports the launch as a GPU would (a sticky error); the launcher itself cannot tell.
  const dev::CudaDriver &cu = driver();
  std::vector<float> host(16, 1.0f);
  DeviceBuffer b(64);
  const void *srcs[2] = {host.data(), b.device()};
  cr_assert(dev::device_reduce(cu, nullptr, b.device(), srcs, 2, 16, DDL_FLOAT32, DDL_SUM, 1).ok());
  FakeCuda::get().stream_synchronize(nullptr);
  auto faults = reinterpret_cast<int (*)(const char **)>(
      dlsym(dlopen(FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD), "fake_cuda_kernel_faults"));
  const char *why = "";
  cr_assert_eq(faults(&why), 1);
  cr_assert(std::strstr(why, "illegal address: input 0") != nullptr, "%s", why);
  const ddl::Status st =
      dev::device_reduce(cu, nullptr, b.device(), srcs, 2, 16, DDL_FLOAT32, DDL_SUM, 1);
  cr_assert_eq(st.code(), DDL_ERR_SYSTEM, "%s", st.message().c_str());
  cr_assert(st.message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos, "%s",
            st.message().c_str());
}

Test(device_kernels, without_kernels_the_error_says_why) {
  // Only in a build without nvcc or with DDL_CUDA_KERNELS=OFF: device_reduce refuses with the
  // reason, and device buffers keep working through staging (test_device_collectives).
  setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
  FakeCuda::get();
  const dev::CudaDriver *cu = dev::cuda_driver();
  cr_assert(cu, "no driver: %s", dev::cuda_absent_reason().c_str());
  if (dev::cuda_kernels_built()) cr_skip_test("this build has the CUDA kernels");
  DeviceBuffer a(64);
  const void *srcs[2] = {a.device(), a.device()};
  const ddl::Status st =
      dev::device_reduce(*cu, nullptr, a.device(), srcs, 2, 4, DDL_FLOAT32, DDL_SUM, 1);
  cr_assert_eq(st.code(), DDL_ERR_UNSUPPORTED, "%s", st.message().c_str());
  cr_assert(st.message().find(dev::cuda_kernels_absent_reason()) != std::string::npos, "%s",
            st.message().c_str());
  cr_assert(!dev::cuda_kernels_absent_reason().empty());
}

// The CUDA reduction kernels on a real GPU (libcuda.so.1), skipped with a message where there
// is none: every datatype and op, 2, 3 and 8 inputs, small and odd counts, aligned, equally
// offset (scalar head + vectors) and differently offset pointers (scalars), compared with
// the kernels' arithmetic on the host (reduce_math.h, itself checked against lib/reduce by
// tests/kernels/test_device_kernel_math.cc). Which NaN SUM/PROD/AVG return is the GPU's
// (canonical NaN), so there any NaN matches a NaN. Passed on an H200 (2026-11-26, 48 s).
#include <criterion/criterion.h>
#include <stdlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lib/common/datatype.h"
#include "lib/device/cuda_driver.h"
#include "lib/device/device_reduce.h"
#include "lib/device/kernels/reduce_math.h"
#include "real_gpu.h"
#include "tests/kernels/kernel_reference.h"

namespace dev = ddl::device;
namespace k = ddl::kernels;
using ddltest::Gpu;
using ddltest::real_driver;

namespace {

// The expected element: the kernels' arithmetic on the host, on element i of each input.
void expected(int dtype, int op, const std::vector<std::vector<unsigned char>> &in, size_t i,
              int divisor, unsigned char *out) {
  const size_t size = ddl::datatype_size(dtype);
  const int n = static_cast<int>(in.size());
  unsigned char values[8 * 8];
  for (int j = 0; j < n && j < 8; ++j)
    std::memcpy(values + j * size, in[j].data() + i * size, size);
  ddltest::kernel_reduce_element(dtype, op, values, n, divisor, out);
}

}  // namespace

Test(device_kernels_gpu, every_datatype_and_op_on_a_real_gpu, .timeout = 600) {
  Gpu gpu{};
  const dev::CudaDriver &cu = real_driver(&gpu);
  std::mt19937_64 rng(90);
  struct Layout {
    size_t dst, src;  // byte offsets: dst and the first input at `dst`, the others at `src`
  };
  for (int dtype = 0; dtype < DDL_DATATYPE_COUNT; ++dtype) {
    const size_t size = ddl::datatype_size(dtype);
    for (const Layout layout : {Layout{0, 0}, Layout{4, 4}, Layout{0, 8}, Layout{1, 1}}) {
      for (int op = 0; op < DDL_OP_COUNT; ++op)
        for (int n : {2, 3, 8})
          for (size_t count : {size_t(1), size_t(31), size_t(1000003)}) {
            const int divisor = op == DDL_AVG ? n : 1;
            const size_t bytes = count * size + 16;
            std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count * size));
            for (auto &v : in)
              for (size_t b = 0; b < v.size(); b += 8) {
                const uint64_t r = rng();
                std::memcpy(v.data() + b, &r, std::min<size_t>(8, v.size() - b));
              }
            std::vector<unsigned long long> bufs(n + 1);
            for (auto &b : bufs) cr_assert_eq(gpu.mem_alloc(&b, bytes), 0);
            std::vector<const void *> srcs;
            for (int j = 0; j < n; ++j) {
              const size_t off = j == 0 ? layout.dst : layout.src;
              cr_assert_eq(gpu.htod(bufs[j + 1] + off, in[j].data(), count * size), 0);
              srcs.push_back(reinterpret_cast<void *>(bufs[j + 1] + off));
            }
            void *dst = reinterpret_cast<void *>(bufs[0] + layout.dst);
            const ddl::Status st = dev::device_reduce(cu, nullptr, dst, srcs.data(), n, count,
                                                      static_cast<ddl_datatype_t>(dtype),
                                                      static_cast<ddl_op_t>(op), divisor);
            cr_assert(st.ok(), "%s", st.message().c_str());
            cr_assert_eq(gpu.ctx_synchronize(), 0, "the kernel failed on the GPU");
            std::vector<unsigned char> got(count * size);
            cr_assert_eq(gpu.dtoh(got.data(), bufs[0] + layout.dst, got.size()), 0);
            for (auto b : bufs) gpu.mem_free(b);
            for (size_t i = 0; i < count; ++i) {
              unsigned char want[8];
              expected(dtype, op, in, i, divisor, want);
              const unsigned char *g = got.data() + i * size;
              const bool same = std::memcmp(g, want, size) == 0 ||
                                (op != DDL_MIN && op != DDL_MAX && ddltest::is_nan(dtype, g) &&
                                 ddltest::is_nan(dtype, want));
              cr_assert(same, "%s %s, %d inputs, count %zu, offsets %zu/%zu: element %zu differs",
                        ddl::datatype_name(dtype), ddl::op_name(op), n, count, layout.dst,
                        layout.src, i);
            }
          }
    }
  }
}

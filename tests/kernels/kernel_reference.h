// The CUDA kernels' element arithmetic (lib/device/kernels/reduce_math.h) chosen at run time,
// for tests that compare with it: test_device_kernel_math.cc checks it against lib/reduce,
// the device tests compare the kernels' results with it.
#pragma once

#include <cstdint>
#include <cstring>

#include "ddl/ddl.h"
#include "lib/common/datatype.h"
#include "lib/device/kernels/reduce_math.h"

namespace ddltest {

// *out = the kernels' reduction of the n (1..8) consecutive elements of dtype at `values`
// with op (a ddl::kernels::kOp* value); AVG divides by divisor.
inline void kernel_reduce_element(int dtype, int op, const void *values, int n, int divisor,
                                  void *out) {
  namespace k = ddl::kernels;
  auto with_codec = [&](auto codec) {
    using Codec = decltype(codec);
    using S = typename Codec::S;
    S in[8] = {};
    std::memcpy(in, values, sizeof(S) * static_cast<size_t>(n < 8 ? n : 8));
    S r{};
    switch (op) {
      case k::kOpSum:
        r = k::reduce_values<Codec, k::kOpSum>(in, n, divisor);
        break;
      case k::kOpProd:
        r = k::reduce_values<Codec, k::kOpProd>(in, n, divisor);
        break;
      case k::kOpMin:
        r = k::reduce_values<Codec, k::kOpMin>(in, n, divisor);
        break;
      case k::kOpMax:
        r = k::reduce_values<Codec, k::kOpMax>(in, n, divisor);
        break;
      default:
        r = k::reduce_values<Codec, k::kOpAvg>(in, n, divisor);
    }
    std::memcpy(out, &r, sizeof r);
  };
  switch (dtype) {
    case DDL_INT8:
      return with_codec(k::NativeCodec<int8_t>{});
    case DDL_UINT8:
      return with_codec(k::NativeCodec<uint8_t>{});
    case DDL_INT32:
      return with_codec(k::NativeCodec<int32_t>{});
    case DDL_UINT32:
      return with_codec(k::NativeCodec<uint32_t>{});
    case DDL_INT64:
      return with_codec(k::NativeCodec<int64_t>{});
    case DDL_UINT64:
      return with_codec(k::NativeCodec<uint64_t>{});
    case DDL_FLOAT16:
      return with_codec(k::Float16Codec{});
    case DDL_BFLOAT16:
      return with_codec(k::Bfloat16Codec{});
    case DDL_FLOAT32:
      return with_codec(k::NativeCodec<float>{});
    default:
      return with_codec(k::NativeCodec<double>{});
  }
}

// Whether the element of dtype at p is a NaN (false for integer types).
inline bool is_nan(int dtype, const unsigned char *p) {
  uint64_t u = 0;
  std::memcpy(&u, p, ddl::datatype_size(dtype));
  switch (dtype) {
    case DDL_FLOAT16:
      return (u & 0x7fff) > 0x7c00;
    case DDL_BFLOAT16:
      return (u & 0x7fff) > 0x7f80;
    case DDL_FLOAT32:
      return (u & 0x7fffffffu) > 0x7f800000u;
    case DDL_FLOAT64:
      return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default:
      return false;
  }
}

}  // namespace ddltest

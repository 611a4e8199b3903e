// Element arithmetic of the CUDA reduction kernels, written once for nvcc (device code) and
// for g++ (the CPU tests and the stand-in driver's reference launches). Nothing here may
// differ between the two compilers: the CPU tests check these functions against lib/reduce,
// bit for bit, and that is the part of the kernels a machine without a GPU can verify.
//
// Semantics are those of lib/reduce/reduce.h, extended from two inputs to n (2..8):
//  - integers: SUM and PROD wrap (unsigned arithmetic); AVG is the wrapped sum of all n
//    inputs divided by the divisor with C's truncating division;
//  - float32/float64: IEEE arithmetic in the type, folded left to right
//    (((x0 op x1) op x2) ...), exactly what a chain of two-input host reductions gives;
//    AVG = sum / divisor, a true division;
//  - float16/bfloat16: every input widened to float32, folded (and divided) in float32 and
//    rounded back once, round to nearest even. For n = 2 that is the host kernel's result;
//    for n > 2 it is one rounding where a chain of host reductions makes n - 1;
//  - MIN/MAX of floating types propagate NaN; otherwise MIN(a, b) = a < b ? a : b.
//  - NaNs: MIN/MAX and the conversions move them untouched (payload and sign). SUM, PROD
//    and AVG give a NaN whose bits are the hardware's: NVIDIA GPUs return the canonical NaN
//    where x86 returns one operand's. Only that differs from the CPU kernels' bits.
// float16 conversions use the hardware's cvt instructions on the device for every value
// but NaN, which is handled before them: cvt.rn.f16.f32 turns every NaN into one canonical
// NaN, and ddl keeps NaN payloads the way the CPU kernels (F16C) do. Integer code of ~15
// instructions per conversion instead would make the 8-input float16 kernel compute bound.
#pragma once

#include <stdint.h>

#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define DDL_HD __host__ __device__ __forceinline__
#else
#define DDL_HD inline
#endif

namespace ddl {
namespace kernels {

DDL_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DDL_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The IEEE conversions of non-NaN values (round to nearest even, overflow to infinity,
// subnormals kept). On the device they are single instructions whose results IEEE fixes
// (cvt.f32.f16, cvt.rn.f16.f32); on the host, integer code computing the same thing, which
// the CPU tests check against lib/reduce. NaNs never reach them (see below).
DDL_HD float f16_to_f32_ieee(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | 0x7f800000u);  // infinity
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32 (a small integer times a power
    // of two), and a normal float32, so flush-to-zero modes cannot touch it.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));  // rebias 15 -> 127
#endif
}

DDL_HD uint16_t f32_to_f16_ieee(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t magnitude;
  if (a >= 0x47800000u) {  // >= 65536 (and infinity)
    magnitude = 0x7c00u;
  } else if (a >= 0x38800000u) {  // >= 2^-14: a normal half, or 65520.. which carries to inf
    const uint32_t rebiased = a - (112u << 23);
    magnitude = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  } else {
    // Subnormal half: the value in units of 2^-24, rounded to an integer (ties to even) by
    // adding and removing 2^23 in float32 arithmetic (exact scaling first, so the one
    // rounding is that of the addition). 1024 means it rounded up to the smallest normal,
    // whose encoding 0x400 is the same number.
    const float units = float_of(a) * 16777216.0f;
    const float rounded = (units + 8388608.0f) - 8388608.0f;
    magnitude = static_cast<uint32_t>(rounded);
  }
  return static_cast<uint16_t>(sign | magnitude);
#endif
}

// binary16 -> float32, exact. A NaN keeps its sign and payload and comes back quiet (as F16C
// does); the hardware's NaN rules are not relied on.
DDL_HD float f16_to_f32(uint16_t h) {
  if ((h & 0x7fffu) > 0x7c00u)
    return float_of((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
                    (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return f16_to_f32_ieee(h);
}

// float32 -> binary16, round to nearest even; too large gives infinity; a NaN keeps its sign
// and the top 10 bits of its payload with the quiet bit set (as vcvtps2ph does; cvt.rn.f16.f32
// would give one canonical NaN instead).
DDL_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
  return f32_to_f16_ieee(f);
}

DDL_HD float bf16_to_f32(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

// float32 -> bfloat16, round to nearest even; a NaN gets the quiet bit first so that the
// truncation of its payload cannot leave an infinity.
DDL_HD uint16_t f32_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u | 0x00400000u) >> 16);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Codecs: S is how an element is stored, C the type the arithmetic runs in.
template <class T>
struct NativeCodec {
  using S = T;
  using C = T;
  static DDL_HD C in(S s) { return s; }
  static DDL_HD S out(C c) { return c; }
};
struct Float16Codec {
  using S = uint16_t;
  using C = float;
  static DDL_HD C in(S s) { return f16_to_f32(s); }
  static DDL_HD S out(C c) { return f32_to_f16(c); }
};
struct Bfloat16Codec {
  using S = uint16_t;
  using C = float;
  static DDL_HD C in(S s) { return bf16_to_f32(s); }
  static DDL_HD S out(C c) { return f32_to_bf16(c); }
};

// The ops, numbered as ddl_op_t (kept free of ddl.h so that nvcc needs no ddl header).
enum : int { kOpSum = 0, kOpProd = 1, kOpMin = 2, kOpMax = 3, kOpAvg = 4, kOpCount = 5 };

// Integer SUM/PROD wrap: computed in an unsigned type at least as wide as unsigned int, so
// that uint8 * uint8 never becomes a signed int product (undefined on overflow).
template <class C>
using WrapType =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

// acc op x for SUM, PROD, MIN, MAX; AVG folds as SUM (the division comes once, at the end).
template <int kOp, class C>
DDL_HD C combine(C acc, C x) {
  if constexpr (kOp == kOpSum || kOp == kOpAvg) {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(static_cast<WrapType<C>>(acc) + static_cast<WrapType<C>>(x));
    else
      return acc + x;
  } else if constexpr (kOp == kOpProd) {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(static_cast<WrapType<C>>(acc) * static_cast<WrapType<C>>(x));
    else
      return acc * x;
  } else if constexpr (kOp == kOpMin) {
    if constexpr (std::is_floating_point_v<C>) return acc != acc ? acc : (acc < x ? acc : x);
    return acc < x ? acc : x;
  } else {
    static_assert(kOp == kOpMax, "unknown op");
    if constexpr (std::is_floating_point_v<C>) return acc != acc ? acc : (acc > x ? acc : x);
    return acc > x ? acc : x;
  }
}

// AVG's division (divisor >= 2; 1 leaves the sum alone, bits included). Integers truncate
// toward zero as C does; the quotient always fits the type, so the narrowing is exact.
template <class C>
DDL_HD C divide(C sum, int divisor) {
  if constexpr (std::is_floating_point_v<C>) {
    return sum / static_cast<C>(divisor);
  } else if constexpr (std::is_signed_v<C>) {
    return static_cast<C>(static_cast<long long>(sum) / static_cast<long long>(divisor));
  } else {
    return static_cast<C>(static_cast<unsigned long long>(sum) /
                          static_cast<unsigned long long>(divisor));
  }
}

// The whole reduction of one element from its n widened inputs; what the kernels compute
// per element, and what the CPU tests compare with lib/reduce.
template <class Codec, int kOp>
DDL_HD typename Codec::S reduce_values(const typename Codec::S *inputs, int n, int divisor) {
  typename Codec::C acc = Codec::in(inputs[0]);
  for (int k = 1; k < n; ++k) acc = combine<kOp>(acc, Codec::in(inputs[k]));
  if (kOp == kOpAvg && divisor != 1) acc = divide(acc, divisor);
  return Codec::out(acc);
}

}  // namespace kernels
}  // namespace ddl

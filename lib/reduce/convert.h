// float16 / bfloat16 <-> float32 conversions, inline so that the portable kernels can
// vectorize them. Written branch-free (selects, no table lookups) because GCC if-converts
// selects inside a loop into blends, and a branchy version would keep the fp16 loops scalar.
//
// These are the reference semantics for every ISA: the AVX2/AVX-512 kernels convert with F16C
// (vcvtph2ps / vcvtps2ph with round-to-nearest-even) and integer shifts, and the tests check
// that they agree bit for bit with the functions below, NaN payloads included:
//  - half -> float is exact; a signalling NaN comes back quiet (as vcvtph2ps does);
//  - float -> half rounds to nearest, ties to even; overflow gives +-inf; a NaN keeps its sign
//    and the top 10 bits of its payload, with the quiet bit set (as vcvtps2ph does);
//  - bfloat16 -> float is a shift (exact, NaNs untouched);
//  - float -> bfloat16 rounds to nearest, ties to even; a NaN gets the quiet bit so that
//    truncating its payload cannot turn it into an infinity.
// The subnormal path of float -> half relies on one float addition rounding to nearest, i.e.
// on MXCSR's default rounding mode (the kernels' own arithmetic depends on it too).
#pragma once

#include <cstdint>
#include <cstring>

namespace ddl {
namespace reduce_detail {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float half_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa, sign removed
  const uint32_t exp = em & 0x7c00u;
  // Normal: move the 15-bit field up by 13 and rebias the exponent from 15 to 127.
  const uint32_t normal = (em << 13) + (112u << 23);
  // Inf/NaN: exponent all ones; a NaN gets the quiet bit.
  const uint32_t infnan = 0x7f800000u | (em << 13) | (em > 0x7c00u ? 0x00400000u : 0u);
  // Subnormal (and zero): mant * 2^-24, computed exactly as (2^-14 * (1 + mant/1024)) - 2^-14.
  // The result is a normal float, so flush-to-zero / denormals-are-zero modes do not matter.
  const uint32_t sub =
      f32_bits(f32_from_bits((113u << 23) | (em << 13)) - f32_from_bits(113u << 23));
  const uint32_t mag = exp == 0x7c00u ? infnan : (exp == 0 ? sub : normal);
  return f32_from_bits(sign | mag);
}

inline uint16_t f32_to_half(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // >= 2^16: infinity (or NaN). Values in [65520, 65536) also overflow, through the rounding
  // carry of the normal path below.
  const uint32_t big = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;
  // < 2^-14: the result is subnormal or zero. Adding 0.5f puts the half's subnormal unit
  // (2^-24) at the float's last mantissa bit, so the FP addition does the RNE for us; the
  // integer difference is then the half's bit pattern (0x400 when it rounds up to 2^-14).
  const uint32_t sub = f32_bits(f32_from_bits(a) + 0.5f) - 0x3f000000u;
  // Normal: rebias, add 0xfff plus the lowest kept bit (ties to even), drop 13 bits. A carry
  // out of the mantissa increments the exponent, up to 0x7c00 (inf), which is right.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t mag = a >= 0x47800000u ? big : (a < 0x38800000u ? sub : normal);
  return static_cast<uint16_t>(sign | mag);
}

inline float bf16_to_f32(uint16_t b) {
  return f32_from_bits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);  // RNE; +-inf stay inf
  const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : rounded;
  return static_cast<uint16_t>(r >> 16);
}

}  // namespace reduce_detail
}  // namespace ddl

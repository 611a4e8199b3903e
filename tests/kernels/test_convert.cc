// float16 / bfloat16 conversions: every 16-bit pattern round-trips, ties go to even, and a
// reference written independently (double arithmetic and nearbyint) agrees on a sweep of
// float32 bit patterns. Then each ISA's vector conversions (F16C, AVX-512, shifts) must give
// the scalar functions' bits for all 65536 inputs, NaN payloads included.
#include <criterion/criterion.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lib/reduce/reduce.h"

using namespace ddl;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
}
bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0;
}

// The value of a binary16 from its definition.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(1024 + m, e - 25);
}

// Nearest binary16 of a finite or infinite float, ties to even, from first principles.
uint16_t ref_float_to_half(float f) {
  const uint16_t sign = (bits_of(f) >> 16) & 0x8000;
  const double x = std::fabs(static_cast<double>(f));
  if (std::isinf(x) || x >= 65520.0) return sign | 0x7c00;  // 65520: halfway to 2^16 -> even (inf)
  if (x < std::ldexp(1.0, -14))
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(x, 24)));
  int e;
  std::frexp(x, &e);                                 // x = [0.5, 1) * 2^e
  double m = std::nearbyint(std::ldexp(x, 11 - e));  // 11 significant bits: [1024, 2048]
  if (m == 2048.0) {
    m = 1024.0;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(m) - 1024));
}

// Nearest bfloat16 (8 significant bits, float32's exponent range), ties to even.
uint16_t ref_float_to_bf16(float f) {
  const uint16_t sign = (bits_of(f) >> 16) & 0x8000;
  const double x = std::fabs(static_cast<double>(f));
  if (std::isinf(x)) return sign | 0x7f80;
  double r;
  if (x < std::ldexp(1.0, -126)) {
    r = std::ldexp(std::nearbyint(std::ldexp(x, 133)), -133);  // subnormal unit 2^-133
  } else {
    int e;
    std::frexp(x, &e);
    r = std::ldexp(std::nearbyint(std::ldexp(x, 8 - e)), e - 8);
  }
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  return sign | static_cast<uint16_t>(bits_of(static_cast<float>(r)) >> 16);
}

const char *const kIsas[] = {"portable", "avx2", "avx512"};

}  // namespace

Test(convert, half_to_float_every_value) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = half_to_float(x);
    if (half_is_nan(x)) {
      // NaN: sign and payload kept, quiet bit set (what vcvtph2ps does).
      const uint32_t want = (static_cast<uint32_t>(x & 0x8000) << 16) | 0x7fc00000u |
                            (static_cast<uint32_t>(x & 0x3ff) << 13);
      if (bits_of(f) != want) cr_assert_fail("half %04x -> %08x, want %08x", h, bits_of(f), want);
      if (float_to_half(f) != (x | 0x0200))
        cr_assert_fail("half NaN %04x comes back as %04x", h, float_to_half(f));
      continue;
    }
    if (static_cast<double>(f) != half_value(x) || std::signbit(f) != ((x & 0x8000) != 0))
      cr_assert_fail("half %04x -> %a, want %a", h, static_cast<double>(f), half_value(x));
    if (float_to_half(f) != x) cr_assert_fail("half %04x round-trips to %04x", h, float_to_half(f));
  }
}

Test(convert, float_to_half_ties_to_even) {
  // Between every pair of neighbouring non-negative halves (the last pair being 65504 and
  // the 2^16 that would follow it), the midpoint goes to the even one, and one float ulp on
  // either side goes to the nearer one.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = half_value(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : half_value(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // 12 significant bits: exact
    cr_assert_eq(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      const uint16_t got = float_to_half(s * mid);
      const uint16_t below = float_to_half(s * std::nextafter(mid, 0.0f));
      const uint16_t above = float_to_half(s * std::nextafter(mid, INFINITY));
      if (got != (sign | even) || below != (sign | h) || above != (sign | (h + 1)))
        cr_assert_fail("between %04x and %04x: mid->%04x below->%04x above->%04x", h, h + 1, got,
                       below, above);
    }
  }
  cr_assert_eq(float_to_half(65519.996f), 0x7bff);
  cr_assert_eq(float_to_half(65520.0f), 0x7c00);
  cr_assert_eq(float_to_half(-1e30f), 0xfc00);
  cr_assert_eq(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even 0
  cr_assert_eq(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  cr_assert_eq(float_to_half(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 units -> 2
  cr_assert_eq(float_to_half(std::ldexp(1.0f, -130)), 0x0000);  // float subnormal
  cr_assert_eq(float_to_half(-0.0f), 0x8000);
}

Test(convert, float_to_half_sweep) {
  // ~1M float bit patterns spread over all 2^32 (the odd stride visits every exponent and
  // many mantissa bits), against the first-principles reference.
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = float_of(static_cast<uint32_t>(u));
    const uint16_t got = float_to_half(f);
    if (std::isnan(f)) {
      const uint16_t want =
          static_cast<uint16_t>(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));
      if (got != want) cr_assert_fail("NaN %08x -> %04x, want %04x", (unsigned)u, got, want);
      continue;
    }
    const uint16_t want = ref_float_to_half(f);
    if (got != want)
      cr_assert_fail("%08x (%a) -> %04x, want %04x", (unsigned)u, (double)f, got, want);
  }
}

Test(convert, bfloat16_every_value_and_ties) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t x = static_cast<uint16_t>(b);
    const float f = bfloat16_to_float(x);
    cr_assert_eq(bits_of(f), b << 16);
    const uint16_t back = float_to_bfloat16(f);
    if (bf16_is_nan(x)) {
      if (back != (x | 0x0040)) cr_assert_fail("bf16 NaN %04x comes back as %04x", b, back);
    } else if (back != x) {
      cr_assert_fail("bf16 %04x round-trips to %04x", b, back);
    }
    // Ties: the float halfway between x and the next magnitude goes to the even one (from
    // 0x7f7f, the largest finite value, that is infinity), one float ulp either side to the
    // nearer one.
    if ((x & 0x7f80) != 0x7f80) {
      const uint32_t mid = (b << 16) | 0x8000u;
      const uint16_t even = (x & 1) ? static_cast<uint16_t>(x + 1) : x;
      if (float_to_bfloat16(float_of(mid)) != even)
        cr_assert_fail("tie above %04x -> %04x", b, float_to_bfloat16(float_of(mid)));
      if (float_to_bfloat16(float_of(mid - 1)) != x ||
          float_to_bfloat16(float_of(mid + 1)) != x + 1)
        cr_assert_fail("near the tie above %04x", b);
    }
  }
  // NaN whose payload sits only in the low 16 bits must not become inf.
  cr_assert_eq(float_to_bfloat16(float_of(0x7f800001u)), 0x7fc0);
  cr_assert_eq(float_to_bfloat16(float_of(0xff800001u)), 0xffc0);
  cr_assert_eq(float_to_bfloat16(float_of(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
}

Test(convert, float_to_bfloat16_sweep) {
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = float_of(static_cast<uint32_t>(u));
    if (std::isnan(f)) {
      if (!bf16_is_nan(float_to_bfloat16(f))) cr_assert_fail("NaN %08x lost", (unsigned)u);
      continue;
    }
    const uint16_t got = float_to_bfloat16(f), want = ref_float_to_bf16(f);
    if (got != want)
      cr_assert_fail("%08x (%a) -> %04x, want %04x", (unsigned)u, (double)f, got, want);
  }
}

// Every ISA's vector conversion agrees with the scalar functions on all 65536 inputs: MAX of
// x with itself is x widened and narrowed again (NaN payload rules included), and AVG with
// divisor 3 makes ~65536 float values that need rounding.
Test(convert, vector_paths_match_scalar) {
  std::vector<uint16_t> all(65536), out(65536), other(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    all[i] = static_cast<uint16_t>(i);
    other[i] = static_cast<uint16_t>(i * 40503u);  // a permutation of all values
  }
  int ran = 0;
  for (const char *isa : kIsas) {
    if (!set_reduce_isa(isa)) continue;
    ++ran;
    for (ddl_datatype_t dt : {DDL_FLOAT16, DDL_BFLOAT16}) {
      const bool half = dt == DDL_FLOAT16;
      auto to32 = [&](uint16_t v) { return half ? half_to_float(v) : bfloat16_to_float(v); };
      auto to16 = [&](float v) { return half ? float_to_half(v) : float_to_bfloat16(v); };
      reduce(dt, DDL_MAX, out.data(), all.data(), all.data(), all.size(), 1);
      for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t want = to16(to32(all[i]));
        if (out[i] != want)
          cr_assert_fail("%s %s: max(%04x, itself) = %04x, want %04x", isa, half ? "fp16" : "bf16",
                         i, out[i], want);
      }
      reduce(dt, DDL_AVG, out.data(), all.data(), other.data(), all.size(), 3);
      for (uint32_t i = 0; i < 65536; ++i) {
        const float exact = static_cast<float>(static_cast<double>(to32(all[i])) + to32(other[i]));
        const float q = static_cast<float>(static_cast<double>(exact) / 3.0);
        const uint16_t want = to16(q);
        const bool nan = half ? half_is_nan(want) : bf16_is_nan(want);
        const bool got_nan = half ? half_is_nan(out[i]) : bf16_is_nan(out[i]);
        if (nan ? !got_nan : out[i] != want)
          cr_assert_fail("%s %s: avg(%04x, %04x)/3 = %04x, want %04x", isa, half ? "fp16" : "bf16",
                         all[i], other[i], out[i], want);
      }
    }
  }
  cr_assert_geq(ran, 1);
  set_reduce_isa(nullptr);
}

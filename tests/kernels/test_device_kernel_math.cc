// The element arithmetic of the CUDA reduction kernels (lib/device/kernels/reduce_math.h),
// compiled here by g++, against the CPU kernels of lib/reduce: the part of the device code a
// machine without a GPU can check. On the device, float16's non-NaN conversions are the cvt
// instructions instead of the host code checked here (see reduce_math.h); everything else
// is the same source.
//  - conversions: all 65536 float16 and bfloat16 patterns, every float32 at and around each
//    rounding tie, a sweep of all float32 patterns;
//  - two inputs: bit for bit ddl::reduce for every datatype, op and several divisors, on
//    special values (NaN with payloads, infinities, signed zeros, subnormals, extremes) and
//    random bit patterns (except which NaN SUM/PROD/AVG return: see same_result);
//  - 3..8 inputs: a chain of two-input ddl::reduce calls for the integer and 32/64-bit float
//    types (same result by construction), and float32 arithmetic rounded once for float16
//    and bfloat16.
#include <criterion/criterion.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "lib/common/datatype.h"
#include "lib/device/kernels/reduce_math.h"
#include "lib/reduce/reduce.h"
#include "tests/kernels/kernel_reference.h"

namespace k = ddl::kernels;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void expect_f32_to_16(uint32_t u) {
  const float f = from_bits(u);
  const uint16_t h = k::f32_to_f16(f), h_ref = ddl::float_to_half(f);
  cr_assert_eq(h, h_ref, "float16 of 0x%08x: 0x%04x, lib/reduce gives 0x%04x", u, h, h_ref);
  const uint16_t b = k::f32_to_bf16(f), b_ref = ddl::float_to_bfloat16(f);
  cr_assert_eq(b, b_ref, "bfloat16 of 0x%08x: 0x%04x, lib/reduce gives 0x%04x", u, b, b_ref);
}

}  // namespace

Test(device_kernel_math, sixteen_bit_to_float32_for_every_pattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint32_t got = bits(k::f16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t want = bits(ddl::half_to_float(static_cast<uint16_t>(h)));
    cr_assert_eq(got, want, "float16 0x%04x: 0x%08x, lib/reduce gives 0x%08x", h, got, want);
    const uint32_t bgot = bits(k::bf16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t bwant = bits(ddl::bfloat16_to_float(static_cast<uint16_t>(h)));
    cr_assert_eq(bgot, bwant, "bfloat16 0x%04x: 0x%08x, lib/reduce gives 0x%08x", h, bgot, bwant);
  }
}

Test(device_kernel_math, float32_to_sixteen_bit_at_every_tie) {
  // For each float16 h: the float32 halfway to the next one, and its neighbours. These are
  // where round-to-nearest-even decides; bfloat16 ties are every float32 ending in 0x8000.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double lo = ddl::half_to_float(static_cast<uint16_t>(sign | h));
      const double hi = ddl::half_to_float(static_cast<uint16_t>(sign | (h + 1)));
      const uint32_t mid = bits(static_cast<float>((lo + hi) / 2));  // exact in float32
      for (uint32_t u : {mid - 1, mid, mid + 1}) expect_f32_to_16(u);
    }
  }
  for (uint32_t top = 0; top <= 0xffff; ++top)
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) expect_f32_to_16(top << 16 | low);
}

Test(device_kernel_math, float32_to_sixteen_bit_sweep) {
  // Every 251st pattern (NaNs of all payloads, both signs, every exponent), and every
  // pattern around the subnormal, overflow and NaN boundaries.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) expect_f32_to_16(static_cast<uint32_t>(u));
  for (uint32_t edge : {0x33000000u, 0x38800000u, 0x477fe000u, 0x47800000u, 0x7f800000u})
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t d = 0; d < 0x4000; ++d) {
        expect_f32_to_16(sign | (edge - d));
        expect_f32_to_16(sign | (edge + d));
      }
}

namespace {

// Values worth trying for each datatype, as bytes: extremes, zeros of both signs, NaNs with
// payloads, infinities, subnormals, values whose sums overflow or round at ties.
std::vector<std::vector<unsigned char>> special_values(int dtype) {
  std::vector<std::vector<unsigned char>> out;
  auto add = [&](const auto &v) {
    std::vector<unsigned char> b(sizeof v);
    std::memcpy(b.data(), &v, sizeof v);
    out.push_back(b);
  };
  switch (dtype) {
    case DDL_INT8:
      for (int v : {0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128, 64, -64}) add(int8_t(v));
      break;
    case DDL_UINT8:
      for (int v : {0, 1, 2, 3, 7, 100, 127, 128, 200, 255}) add(uint8_t(v));
      break;
    case DDL_INT32:
      for (int64_t v : {0ll, 1ll, -1ll, 3ll, -7ll, 49ll, 1000000ll, 2147483647ll, -2147483648ll,
                        -2147483647ll, 1073741824ll})
        add(int32_t(v));
      break;
    case DDL_UINT32:
      for (uint32_t v : {0u, 1u, 3u, 49u, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0xfffffffeu})
        add(v);
      break;
    case DDL_INT64:
      for (int64_t v : {int64_t(0), int64_t(1), int64_t(-1), int64_t(-7), int64_t(1) << 40,
                        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                        -(int64_t(1) << 62)})
        add(v);
      break;
    case DDL_UINT64:
      for (uint64_t v : {uint64_t(0), uint64_t(1), uint64_t(7), ~uint64_t(0), uint64_t(1) << 63,
                         (uint64_t(1) << 63) - 1})
        add(v);
      break;
    case DDL_FLOAT16:
      for (uint16_t v :
           {0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00,
            0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7d55, 0xfd23, 0x3555, 0x4248, 0x1400, 0x3c01})
        add(v);
      break;
    case DDL_BFLOAT16:
      for (uint16_t v :
           {0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80,
            0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fa5, 0x3eab, 0x4049, 0x3f81})
        add(v);
      break;
    case DDL_FLOAT32:
      for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 3.0f, 0.1f, 1e-45f, -1e-45f, 1.17549435e-38f,
                      3.4028235e38f, -3.4028235e38f, std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), 16777216.0f, 1.0000001f})
        add(v);
      for (uint32_t nan : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu}) add(from_bits(nan));
      break;
    default:
      for (double v : {0.0, -0.0, 1.0, -1.0, 3.0, 0.1, 5e-324, 1.7976931348623157e308,
                       -std::numeric_limits<double>::infinity(), 9007199254740992.0})
        add(v);
      for (uint64_t nan : {0x7ff8000000000000ull, 0xfff0000000000001ull}) {
        double d;
        std::memcpy(&d, &nan, 8);
        add(d);
      }
  }
  return out;
}

const int kDivisors[] = {1, 2, 3, 7, 255, 256, 1000};

// Equal bytes; or, for the arithmetic ops, NaN on both sides: which NaN an addition or a
// multiplication returns is the hardware's choice (x86 returns one operand's, depending on
// the instruction's operand order, which differs between ddl's ISAs; NVIDIA GPUs return the
// canonical NaN). MIN/MAX and the conversions move NaNs untouched and must match exactly.
bool same_result(int dtype, int op, const unsigned char *got, const unsigned char *want) {
  if (std::memcmp(got, want, ddl::datatype_size(dtype)) == 0) return true;
  return op != DDL_MIN && op != DDL_MAX && ddltest::is_nan(dtype, got) &&
         ddltest::is_nan(dtype, want);
}

// Two inputs: the kernel arithmetic and ddl::reduce give the same bytes.
void check_pair(int dtype, int op, const unsigned char *a, const unsigned char *b, int divisor) {
  const size_t size = ddl::datatype_size(dtype);
  unsigned char in[16], got[8] = {}, want[8] = {};
  std::memcpy(in, a, size);
  std::memcpy(in + size, b, size);
  ddltest::kernel_reduce_element(dtype, op, in, 2, divisor, got);
  ddl::reduce(static_cast<ddl_datatype_t>(dtype), static_cast<ddl_op_t>(op), want, a, b, 1,
              divisor);
  if (!same_result(dtype, op, got, want)) {
    uint64_t ua = 0, ub = 0, ug = 0, uw = 0;
    std::memcpy(&ua, a, size);
    std::memcpy(&ub, b, size);
    std::memcpy(&ug, got, size);
    std::memcpy(&uw, want, size);
    cr_assert_fail("%s %s (divisor %d) of 0x%llx and 0x%llx: kernel 0x%llx, lib/reduce 0x%llx",
                   ddl::datatype_name(dtype), ddl::op_name(op), divisor, (unsigned long long)ua,
                   (unsigned long long)ub, (unsigned long long)ug, (unsigned long long)uw);
  }
}

}  // namespace

Test(device_kernel_math, two_inputs_match_the_cpu_kernels_bit_for_bit) {
  std::mt19937_64 rng(13);
  for (int dtype = 0; dtype < DDL_DATATYPE_COUNT; ++dtype) {
    const size_t size = ddl::datatype_size(dtype);
    auto values = special_values(dtype);
    for (int i = 0; i < 200; ++i) {  // random bit patterns: every exponent, many NaNs
      std::vector<unsigned char> v(size);
      const uint64_t r = rng();
      std::memcpy(v.data(), &r, size);
      values.push_back(v);
    }
    for (int op = 0; op < DDL_OP_COUNT; ++op)
      for (int divisor : kDivisors) {
        if (op != DDL_AVG && divisor != 1) continue;
        for (const auto &a : values)
          for (const auto &b : values) check_pair(dtype, op, a.data(), b.data(), divisor);
      }
  }
}

Test(device_kernel_math, more_inputs_match_a_chain_of_cpu_reductions) {
  // Integers and float32/float64: ((x0 op x1) op x2) ... with AVG's division at the last step
  // only, which is what the kernel folds. Small values so that float sums stay meaningful,
  // and special values mixed in.
  std::mt19937_64 rng(8);
  for (int dtype : {DDL_INT8, DDL_UINT8, DDL_INT32, DDL_UINT32, DDL_INT64, DDL_UINT64, DDL_FLOAT32,
                    DDL_FLOAT64}) {
    const size_t size = ddl::datatype_size(dtype);
    const auto specials = special_values(dtype);
    for (int op = 0; op < DDL_OP_COUNT; ++op)
      for (int n = 3; n <= 8; ++n)
        for (int trial = 0; trial < 300; ++trial) {
          const int divisor = op == DDL_AVG ? kDivisors[trial % 7] : 1;
          unsigned char in[64];
          for (int i = 0; i < n; ++i) {
            if (trial % 3 == 0) {
              const auto &s = specials[rng() % specials.size()];
              std::memcpy(in + i * size, s.data(), size);
            } else if (dtype == DDL_FLOAT32) {
              const float f = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 7.0f;
              std::memcpy(in + i * size, &f, size);
            } else if (dtype == DDL_FLOAT64) {
              const double d = static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 7.0;
              std::memcpy(in + i * size, &d, size);
            } else {
              const uint64_t r = rng();
              std::memcpy(in + i * size, &r, size);
            }
          }
          unsigned char want[8], got[8];
          const int first_op = op == DDL_AVG ? DDL_SUM : op;
          ddl::reduce(static_cast<ddl_datatype_t>(dtype),
                      static_cast<ddl_op_t>(n == 2 ? op : first_op), want, in, in + size, 1,
                      divisor);
          for (int i = 2; i < n; ++i)
            ddl::reduce(static_cast<ddl_datatype_t>(dtype),
                        static_cast<ddl_op_t>(i == n - 1 ? op : first_op), want, want,
                        in + i * size, 1, divisor);
          ddltest::kernel_reduce_element(dtype, op, in, n, divisor, got);
          cr_assert(same_result(dtype, op, got, want), "%s %s of %d inputs (trial %d) differs",
                    ddl::datatype_name(dtype), ddl::op_name(op), n, trial);
        }
  }
}

Test(device_kernel_math, sixteen_bit_floats_round_once_over_many_inputs) {
  // float16/bfloat16: every input widened, the fold and the division in float32, one
  // rounding, computed here from lib/reduce's conversions and plain float arithmetic.
  std::mt19937_64 rng(16);
  for (int dtype : {DDL_FLOAT16, DDL_BFLOAT16}) {
    const bool half = dtype == DDL_FLOAT16;
    const auto specials = special_values(dtype);
    for (int op = 0; op < DDL_OP_COUNT; ++op)
      for (int n = 2; n <= 8; ++n)
        for (int trial = 0; trial < 2000; ++trial) {
          const int divisor = op == DDL_AVG ? kDivisors[trial % 7] : 1;
          uint16_t in[8];
          for (int i = 0; i < n; ++i) {
            if (trial % 4 == 0)
              std::memcpy(&in[i], specials[rng() % specials.size()].data(), 2);
            else
              in[i] = static_cast<uint16_t>(rng());
          }
          auto widen = [&](uint16_t v) {
            return half ? ddl::half_to_float(v) : ddl::bfloat16_to_float(v);
          };
          float acc = widen(in[0]);
          for (int i = 1; i < n; ++i) {
            const float x = widen(in[i]);
            if (op == DDL_SUM || op == DDL_AVG)
              acc = acc + x;
            else if (op == DDL_PROD)
              acc = acc * x;
            else if (op == DDL_MIN)
              acc = std::isnan(acc) ? acc : (acc < x ? acc : x);
            else
              acc = std::isnan(acc) ? acc : (acc > x ? acc : x);
          }
          if (op == DDL_AVG && divisor != 1) acc = acc / static_cast<float>(divisor);
          const uint16_t want = half ? ddl::float_to_half(acc) : ddl::float_to_bfloat16(acc);
          uint16_t got = 0;
          ddltest::kernel_reduce_element(dtype, op, in, n, divisor, &got);
          cr_assert(same_result(dtype, op, reinterpret_cast<const unsigned char *>(&got),
                                reinterpret_cast<const unsigned char *>(&want)),
                    "%s %s of %d inputs (trial %d): 0x%04x, expected 0x%04x",
                    ddl::datatype_name(dtype), ddl::op_name(op), n, trial, got, want);
        }
  }
}

// Every datatype x op x ISA against an independent reference: exact integer arithmetic,
// float64 arithmetic rounded once to float32 (innocuous double rounding: 53 >= 2*24+2), and
// for float16/bfloat16 exactly to16(op(to32(a), to32(b))). Counts around every vector width
// and unroll boundary, pointers off by an element and by a byte, in place (dst == a,
// dst == b) and out of place, with guard bytes around dst to catch writes past the end.
#include <criterion/criterion.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/reduce/reduce.h"

using namespace ddl;

namespace {

const size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 1000, 4097};
const ddl_op_t kOps[] = {DDL_SUM, DDL_PROD, DDL_MIN, DDL_MAX, DDL_AVG};
const int kDivisors[] = {1, 3, 8, 7, 1000003};
const uint8_t kGuard = 0xa5;
const size_t kSlack = 64;  // guard bytes before and after dst

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t next_random() {  // splitmix64
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof v);  // little-endian: the low bytes
  return v;
}
template <class T>
uint64_t to_bits(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

bool is_nan_bits(ddl_datatype_t dt, uint64_t u) {
  switch (dt) {
    case DDL_FLOAT16:
      return (u & 0x7c00) == 0x7c00 && (u & 0x3ff);
    case DDL_BFLOAT16:
      return (u & 0x7f80) == 0x7f80 && (u & 0x7f);
    case DDL_FLOAT32:
      return std::isnan(from_bits<float>(u));
    case DDL_FLOAT64:
      return std::isnan(from_bits<double>(u));
    default:
      return false;
  }
}

// One random element: integers uniformly over all bits; floating types mostly ordinary
// values of moderate size (so that sums and products mean something), with zeros of both
// signs, infinities, NaNs, subnormals and raw random bit patterns mixed in.
uint64_t random_element(ddl_datatype_t dt) {
  const uint64_t r = next_random();
  const size_t size = datatype_size(dt);
  if (dt != DDL_FLOAT16 && dt != DDL_BFLOAT16 && dt != DDL_FLOAT32 && dt != DDL_FLOAT64)
    return size == 8 ? r : (r & ((1ull << (8 * size)) - 1));
  double v;
  switch (r % 16) {
    case 0:
      v = 0.0;
      break;
    case 1:
      v = -0.0;
      break;
    case 2:
      v = (r & 16) ? INFINITY : -INFINITY;
      break;
    case 3:
      v = NAN;
      break;
    case 4:
      v = std::ldexp(static_cast<double>((r >> 8) & 0xff), -140);
      break;  // subnormal-ish
    case 5:
      return next_random() & (size == 8 ? ~0ull : (1ull << (8 * size)) - 1);  // raw bits
    default:
      v = std::ldexp(static_cast<double>(static_cast<int64_t>(r >> 11) % 4096) / 512.0,
                     static_cast<int>((r >> 4) % 9) - 4);
  }
  switch (dt) {
    case DDL_FLOAT16:
      return float_to_half(static_cast<float>(v));
    case DDL_BFLOAT16:
      return float_to_bfloat16(static_cast<float>(v));
    case DDL_FLOAT32:
      return to_bits(static_cast<float>(v));
    default:
      return to_bits(v);
  }
}

// --- The reference -------------------------------------------------------------------

template <class T>
uint64_t ref_int(ddl_op_t op, uint64_t ab, uint64_t bb, int divisor) {
  using U = std::make_unsigned_t<T>;
  const T a = from_bits<T>(ab), b = from_bits<T>(bb);
  // Wrapping in uint64 and truncating to the type is exact modular arithmetic.
  const T sum = static_cast<T>(static_cast<U>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)));
  T r;
  switch (op) {
    case DDL_SUM:
      r = sum;
      break;
    case DDL_PROD:
      r = static_cast<T>(static_cast<U>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)));
      break;
    case DDL_MIN:
      r = a < b ? a : b;
      break;
    case DDL_MAX:
      r = a > b ? a : b;
      break;
    default:
      if constexpr (std::is_signed_v<T>)
        r = static_cast<T>(static_cast<int64_t>(sum) / divisor);  // C truncates toward zero
      else
        r = static_cast<T>(static_cast<uint64_t>(sum) / static_cast<uint64_t>(divisor));
  }
  return to_bits(r);
}

// MIN/MAX rule of reduce.h, apart from NaN (checked as "any NaN"): a < b ? a : b.
template <class F>
F ref_minmax(ddl_op_t op, F a, F b) {
  return op == DDL_MIN ? (a < b ? a : b) : (a > b ? a : b);
}

// float32 result of op on two float32 values, computed in double and rounded once.
float ref_f32(ddl_op_t op, float a, float b, int divisor) {
  const double x = a, y = b;
  switch (op) {
    case DDL_SUM:
      return static_cast<float>(x + y);
    case DDL_PROD:
      return static_cast<float>(x * y);  // exact in double, rounded once
    case DDL_MIN:
    case DDL_MAX:
      return ref_minmax(op, a, b);
    default: {
      const float s = static_cast<float>(x + y);  // the kernel rounds the sum, then the quotient
      return divisor == 1 ? s : static_cast<float>(static_cast<double>(s) / divisor);
    }
  }
}

double ref_f64(ddl_op_t op, double a, double b, int divisor) {
  switch (op) {
    case DDL_SUM:
      return a + b;
    case DDL_PROD:
      return a * b;
    case DDL_MIN:
    case DDL_MAX:
      return ref_minmax(op, a, b);
    default:
      return divisor == 1 ? a + b : (a + b) / divisor;
  }
}

uint64_t reference(ddl_datatype_t dt, ddl_op_t op, uint64_t a, uint64_t b, int divisor) {
  switch (dt) {
    case DDL_INT8:
      return ref_int<int8_t>(op, a, b, divisor);
    case DDL_UINT8:
      return ref_int<uint8_t>(op, a, b, divisor);
    case DDL_INT32:
      return ref_int<int32_t>(op, a, b, divisor);
    case DDL_UINT32:
      return ref_int<uint32_t>(op, a, b, divisor);
    case DDL_INT64:
      return ref_int<int64_t>(op, a, b, divisor);
    case DDL_UINT64:
      return ref_int<uint64_t>(op, a, b, divisor);
    case DDL_FLOAT16:
      return float_to_half(ref_f32(op, half_to_float(static_cast<uint16_t>(a)),
                                   half_to_float(static_cast<uint16_t>(b)), divisor));
    case DDL_BFLOAT16:
      return float_to_bfloat16(ref_f32(op, bfloat16_to_float(static_cast<uint16_t>(a)),
                                       bfloat16_to_float(static_cast<uint16_t>(b)), divisor));
    case DDL_FLOAT32:
      return to_bits(ref_f32(op, from_bits<float>(a), from_bits<float>(b), divisor));
    default:
      return to_bits(ref_f64(op, from_bits<double>(a), from_bits<double>(b), divisor));
  }
}

// The expected element, and whether "any NaN" is what is expected (the NaN rule says a NaN
// operand gives NaN; which payload is not specified).
bool expect_nan(ddl_datatype_t dt, ddl_op_t op, uint64_t a, uint64_t b, uint64_t want) {
  if (is_nan_bits(dt, want)) return true;
  return (op == DDL_MIN || op == DDL_MAX) && (is_nan_bits(dt, a) || is_nan_bits(dt, b));
}

// --- Running one case ----------------------------------------------------------------

enum Placement { kOutOfPlace, kDstIsA, kDstIsB };
const char *const kPlacementNames[] = {"out-of-place", "dst==a", "dst==b"};

struct Buffers {
  std::vector<uint8_t> a, b, d;
};

// Byte offsets of a, b and dst from 64-byte-aligned storage: aligned; one element off
// (vector loads straddle lines); one byte off (not even element aligned).
struct Offsets {
  size_t a, b, d;
};
std::vector<Offsets> offsets_for(size_t esize) {
  std::vector<Offsets> v = {{0, 0, 0}, {esize, 2 * esize, 3 * esize}};
  if (esize > 1) v.push_back({1, 3, 5});
  return v;
}

uint8_t *aligned(std::vector<uint8_t> &v) {
  uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t *>((p + 63) & ~uintptr_t{63});
}

void check_case(const char *isa, ddl_datatype_t dt, ddl_op_t op, int divisor, size_t count,
                const Offsets &off, Placement where) {
  const size_t es = datatype_size(dt), bytes = count * es;
  std::vector<uint8_t> sa(bytes + 192), sb(bytes + 192), sd(bytes + 192 + 2 * kSlack);
  uint8_t *a = aligned(sa) + off.a, *b = aligned(sb) + off.b;
  uint8_t *guarded = aligned(sd);
  std::memset(guarded, kGuard, bytes + 2 * kSlack + 64);
  uint8_t *d = guarded + kSlack + off.d;
  std::vector<uint64_t> va(count), vb(count);
  for (size_t i = 0; i < count; ++i) {
    va[i] = random_element(dt);
    vb[i] = random_element(dt);
    std::memcpy(a + i * es, &va[i], es);
    std::memcpy(b + i * es, &vb[i], es);
  }
  const uint8_t *x = a, *y = b;
  if (where == kDstIsA) {
    std::memcpy(d, a, bytes);
    x = d;
  } else if (where == kDstIsB) {
    std::memcpy(d, b, bytes);
    y = d;
  }
  reduce(dt, op, d, x, y, count, divisor);
  for (size_t i = 0; i < count; ++i) {
    uint64_t got = 0;
    std::memcpy(&got, d + i * es, es);
    const uint64_t want = reference(dt, op, va[i], vb[i], divisor);
    const bool ok = expect_nan(dt, op, va[i], vb[i], want) ? is_nan_bits(dt, got) : got == want;
    if (!ok)
      cr_assert_fail(
          "%s %s %s/%d count=%zu offsets=%zu,%zu,%zu %s: element %zu: op(%#llx, %#llx) = %#llx, "
          "want %#llx",
          isa, datatype_name(dt), op_name(op), divisor, count, off.a, off.b, off.d,
          kPlacementNames[where], i, (unsigned long long)va[i], (unsigned long long)vb[i],
          (unsigned long long)got, (unsigned long long)want);
  }
  for (uint8_t *p = guarded; p < guarded + bytes + 2 * kSlack + 64; ++p) {
    if (p >= d && p < d + bytes) continue;
    if (*p != kGuard)
      cr_assert_fail("%s %s %s count=%zu %s: wrote byte %td outside dst", isa, datatype_name(dt),
                     op_name(op), count, kPlacementNames[where], p - d);
  }
}

void check_isa(const char *isa) {
  if (!set_reduce_isa(isa)) cr_skip_test("%s: not supported by this build or CPU", isa);
  cr_assert_str_eq(reduce_isa(), isa);
  for (int t = 0; t < DDL_DATATYPE_COUNT; ++t) {
    const ddl_datatype_t dt = static_cast<ddl_datatype_t>(t);
    for (ddl_op_t op : kOps) {
      for (int divisor : kDivisors) {
        if (op != DDL_AVG && divisor != 1) continue;
        for (size_t count : kCounts)
          for (const Offsets &off : offsets_for(datatype_size(dt)))
            for (Placement where : {kOutOfPlace, kDstIsA, kDstIsB})
              check_case(isa, dt, op, divisor, count, off, where);
      }
    }
  }
}

// scale_average: dst = src / divisor with AVG's rounding; in place and not.
void check_scale(const char *isa) {
  if (!set_reduce_isa(isa)) cr_skip_test("%s: not supported by this build or CPU", isa);
  for (int t = 0; t < DDL_DATATYPE_COUNT; ++t) {
    const ddl_datatype_t dt = static_cast<ddl_datatype_t>(t);
    const size_t es = datatype_size(dt);
    for (int divisor : kDivisors) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          std::vector<uint8_t> ss(count * es + 64), sd(count * es + 2 * kSlack + 64);
          uint8_t *src = aligned(ss) + 1, *guarded = aligned(sd);
          std::memset(guarded, kGuard, count * es + 2 * kSlack);
          uint8_t *d = guarded + kSlack;
          std::vector<uint64_t> v(count);
          for (size_t i = 0; i < count; ++i) {
            v[i] = random_element(dt);
            std::memcpy((in_place ? d : src) + i * es, &v[i], es);
          }
          scale_average(dt, d, in_place ? d : src, count, divisor);
          // Floats: one division in float32 (float64), rounded once more for 16-bit types;
          // divisor 1 copies the bits. Integers: AVG of x and 0 is exactly x / divisor.
          for (size_t i = 0; i < count; ++i) {
            uint64_t got = 0, want;
            std::memcpy(&got, d + i * es, es);
            switch (dt) {
              case DDL_FLOAT16:
                want = divisor == 1
                           ? v[i]
                           : float_to_half(static_cast<float>(
                                 static_cast<double>(half_to_float(static_cast<uint16_t>(v[i]))) /
                                 divisor));
                break;
              case DDL_BFLOAT16:
                want =
                    divisor == 1
                        ? v[i]
                        : float_to_bfloat16(static_cast<float>(
                              static_cast<double>(bfloat16_to_float(static_cast<uint16_t>(v[i]))) /
                              divisor));
                break;
              case DDL_FLOAT32:
                want = to_bits(
                    static_cast<float>(static_cast<double>(from_bits<float>(v[i])) / divisor));
                break;
              case DDL_FLOAT64:
                want = to_bits(from_bits<double>(v[i]) / divisor);
                break;
              default:
                want = reference(dt, DDL_AVG, v[i], 0, divisor);
            }
            const bool ok = is_nan_bits(dt, want) ? is_nan_bits(dt, got) : got == want;
            if (!ok)
              cr_assert_fail(
                  "%s scale %s /%d count=%zu in_place=%d: element %zu: %#llx -> %#llx, want %#llx",
                  isa, datatype_name(dt), divisor, count, in_place, i, (unsigned long long)v[i],
                  (unsigned long long)got, (unsigned long long)want);
          }
          for (size_t k = 0; k < kSlack; ++k)
            if (guarded[k] != kGuard || d[count * es + k] != kGuard)
              cr_assert_fail("%s scale %s count=%zu: wrote outside dst", isa, datatype_name(dt),
                             count);
        }
      }
    }
  }
}

}  // namespace

Test(reduce, portable) {
  check_isa("portable");
}
Test(reduce, avx2) {
  check_isa("avx2");
}
Test(reduce, avx512) {
  check_isa("avx512");
}
Test(scale_average, portable) {
  check_scale("portable");
}
Test(scale_average, avx2) {
  check_scale("avx2");
}
Test(scale_average, avx512) {
  check_scale("avx512");
}

// Integer corner cases the random data may miss: wrap-around, the most negative value,
// truncation toward zero of negative averages.
Test(reduce, integer_corners) {
  for (const char *isa : {"portable", "avx2", "avx512"}) {
    if (!set_reduce_isa(isa)) continue;
    const int8_t a8[] = {127, -128, -128, -7, 100, -1};
    const int8_t b8[] = {1, -1, -128, 0, 100, -1};
    int8_t d8[6];
    reduce(DDL_INT8, DDL_SUM, d8, a8, b8, 6, 1);
    const int8_t sum8[] = {-128, 127, 0, -7, -56, -2};
    cr_assert_arr_eq(d8, sum8, sizeof d8, "%s", isa);
    reduce(DDL_INT8, DDL_AVG, d8, a8, b8, 6, 3);  // wrapped sums / 3, toward zero
    const int8_t avg8[] = {-42, 42, 0, -2, -18, 0};
    cr_assert_arr_eq(d8, avg8, sizeof d8, "%s", isa);
    reduce(DDL_INT8, DDL_PROD, d8, a8, b8, 6, 1);
    const int8_t prod8[] = {127, -128, 0, 0, 16, 1};
    cr_assert_arr_eq(d8, prod8, sizeof d8, "%s", isa);
    const int64_t a64[] = {INT64_MAX, INT64_MIN, -9};
    const int64_t b64[] = {1, INT64_MIN, 2};
    int64_t d64[3];
    reduce(DDL_INT64, DDL_AVG, d64, a64, b64, 3, 2);
    cr_assert_eq(d64[0], INT64_MIN / 2);
    cr_assert_eq(d64[1], 0);
    cr_assert_eq(d64[2], -3);
    const uint32_t au[] = {0xffffffffu, 7};
    const uint32_t bu[] = {0xffffffffu, 0};
    uint32_t du[2];
    reduce(DDL_UINT32, DDL_AVG, du, au, bu, 2, 3);
    cr_assert_eq(du[0], 0xfffffffeu / 3);
    cr_assert_eq(du[1], 2u);
  }
  set_reduce_isa(nullptr);
}

// AVG's integer division (which divides by multiplying) against C's operator/ on every 8-bit
// value and on edge and random 32/64-bit values, for small, odd, power-of-two and huge
// divisors: AVG of x and 0 is x / d.
template <class T>
void check_division(const char *isa, ddl_datatype_t dt, const std::vector<T> &common) {
  // 41 and 49 are divisors for which trunc(x * RN(1/d)) falls one short when d divides x
  // (41 in float, 49 in double): the kernels' correction step must catch those.
  const int divisors[] = {2,    3,     5,     6,     7,       8,       10,        11,  41,
                          49,   100,   127,   128,   129,     255,     256,       257, 1000,
                          4096, 65535, 65536, 65537, 1000003, 1 << 30, 2147483647};
  for (int d : divisors) {
    std::vector<T> xs = common;
    // Exact multiples k*d (k = 1, 2, 3, 4, 6, 8, 12, ... up to the type's range) and their
    // neighbours, negated too for signed types.
    const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<T>::max());
    for (uint64_t k = 1; k <= limit / static_cast<uint64_t>(d);
         k = k < 3 ? k + 1 : (k % 3 ? k / 2 * 3 : k / 3 * 4)) {
      for (int delta = -1; delta <= 1; ++delta) {
        const uint64_t v = k * static_cast<uint64_t>(d) + static_cast<uint64_t>(delta);
        xs.push_back(static_cast<T>(v));
        if (std::is_signed_v<T>) xs.push_back(static_cast<T>(uint64_t{0} - v));
      }
    }
    const std::vector<T> zeros(xs.size(), T(0));
    std::vector<T> out(xs.size());
    reduce(dt, DDL_AVG, out.data(), xs.data(), zeros.data(), xs.size(), d);
    for (size_t i = 0; i < xs.size(); ++i) {
      const T want = std::is_signed_v<T>
                         ? static_cast<T>(static_cast<int64_t>(xs[i]) / d)
                         : static_cast<T>(static_cast<uint64_t>(xs[i]) / static_cast<uint64_t>(d));
      if (out[i] != want)
        cr_assert_fail("%s %s: %lld / %d = %lld, want %lld", isa, datatype_name(dt),
                       (long long)xs[i], d, (long long)out[i], (long long)want);
    }
  }
}

template <class T>
std::vector<T> division_inputs() {
  std::vector<T> xs;
  if (sizeof(T) == 1) {
    for (int v = 0; v < 256; ++v) xs.push_back(static_cast<T>(v));
    return xs;
  }
  const T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  for (T e : {lo, static_cast<T>(lo + 1), static_cast<T>(lo / 2), hi, static_cast<T>(hi - 1),
              static_cast<T>(hi / 2), static_cast<T>(hi / 2 + 1), T(0), T(1), T(2), T(3),
              static_cast<T>(-1), static_cast<T>(-7)})
    xs.push_back(e);
  // Multiples of common divisors and their neighbours, where truncation is most fragile.
  for (T m : {T(3), T(7), T(1000003), static_cast<T>(2147483647)})
    for (T k : {T(1), T(12345), static_cast<T>(hi / m)})
      for (int delta = -1; delta <= 1; ++delta)
        xs.push_back(static_cast<T>(static_cast<uint64_t>(m) * static_cast<uint64_t>(k) +
                                    static_cast<uint64_t>(delta)));  // wraps
  for (int i = 0; i < 4000; ++i) xs.push_back(from_bits<T>(next_random()));
  return xs;
}

Test(reduce, integer_division) {
  for (const char *isa : {"portable", "avx2", "avx512"}) {
    if (!set_reduce_isa(isa)) continue;
    check_division(isa, DDL_INT8, division_inputs<int8_t>());
    check_division(isa, DDL_UINT8, division_inputs<uint8_t>());
    check_division(isa, DDL_INT32, division_inputs<int32_t>());
    check_division(isa, DDL_UINT32, division_inputs<uint32_t>());
    check_division(isa, DDL_INT64, division_inputs<int64_t>());
    check_division(isa, DDL_UINT64, division_inputs<uint64_t>());
  }
  set_reduce_isa(nullptr);
}

// The NaN rule, the same on every ISA: any NaN operand gives NaN for MIN and MAX.
Test(reduce, nan_min_max) {
  const float a[] = {NAN, 1.0f, NAN, -0.0f, 2.0f};
  const float b[] = {1.0f, NAN, NAN, 0.0f, -INFINITY};
  for (const char *isa : {"portable", "avx2", "avx512"}) {
    if (!set_reduce_isa(isa)) continue;
    float d[5];
    reduce(DDL_FLOAT32, DDL_MIN, d, a, b, 5, 1);
    cr_assert(std::isnan(d[0]) && std::isnan(d[1]) && std::isnan(d[2]), "%s", isa);
    cr_assert(d[3] == 0.0f && !std::signbit(d[3]), "%s: min(-0, +0) is b", isa);
    cr_assert_eq(d[4], -INFINITY);
    reduce(DDL_FLOAT32, DDL_MAX, d, a, b, 5, 1);
    cr_assert(std::isnan(d[0]) && std::isnan(d[1]) && std::isnan(d[2]), "%s", isa);
    cr_assert_eq(d[4], 2.0f);
  }
  set_reduce_isa(nullptr);
}

Test(reduce, isa_selection) {
  // The default is the best supported one; DDL_REDUCE_ISA lowers it; nonsense is ignored.
  unsetenv("DDL_REDUCE_ISA");
  cr_assert(set_reduce_isa(nullptr));
  const char *best = reduce_isa_supported("avx512") ? "avx512"
                     : reduce_isa_supported("avx2") ? "avx2"
                                                    : "portable";
  cr_assert_str_eq(reduce_isa(), best);
  cr_assert(reduce_isa_supported("portable"));
  cr_assert_not(reduce_isa_supported("sse9"));
  cr_assert_not(set_reduce_isa("sse9"));
  cr_assert_str_eq(reduce_isa(), best);
  setenv("DDL_REDUCE_ISA", "portable", 1);
  set_reduce_isa(nullptr);
  cr_assert_str_eq(reduce_isa(), "portable");
  setenv("DDL_REDUCE_ISA", "sse9", 1);
  set_log_level(LogLevel::kError);  // the warning about "sse9" is expected here
  set_reduce_isa(nullptr);
  cr_assert_str_eq(reduce_isa(), best);
  unsetenv("DDL_REDUCE_ISA");
  set_reduce_isa(nullptr);
}

Test(reduce, count_zero_touches_nothing) {
  for (int t = 0; t < DDL_DATATYPE_COUNT; ++t)
    for (ddl_op_t op : kOps)
      reduce(static_cast<ddl_datatype_t>(t), op, nullptr, nullptr, nullptr, 0, 2);
  scale_average(DDL_FLOAT32, nullptr, nullptr, 0, 4);
}

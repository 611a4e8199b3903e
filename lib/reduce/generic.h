// Element-wise kernels as templates over (storage codec, operator), written so that GCC -O3
// vectorizes them. They are the whole portable implementation, and the AVX2/AVX-512 files
// reuse them for the integer types, compiled for their ISA (GCC's vectorizer makes the code
// one would write by hand there: vpaddb, vpminsq, vpmullw with a pack for int8, ...).
//
// How to include: define DDL_REDUCE_TARGET (empty, or __attribute__((target("..."))))
// first. Everything here is in an anonymous namespace and every function carries that
// attribute, so each translation unit gets its own copies built for its own ISA. Were these
// ordinary inline templates, the linker would keep one copy of each instantiation, perhaps
// the AVX-512 one, and the portable path would then execute AVX-512 on a CPU without it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "lib/reduce/convert.h"
#include "lib/reduce/kernels.h"

#ifndef DDL_REDUCE_TARGET
#error "define DDL_REDUCE_TARGET before including lib/reduce/generic.h"
#endif

namespace ddl {
namespace reduce_detail {
namespace {

// Element loads and stores through a may_alias, 1-byte-aligned type (a GNU extension, as the
// intrinsic headers' __m256_u is): defined at any byte address, and typed, so that GCC keeps
// a double a double. (Through memcpy GCC turns the double min/max selects into 64-bit
// integer selects, which baseline SSE2 cannot vectorize.)
template <class S>
struct Unaligned {
  typedef S type __attribute__((aligned(1), may_alias));
};
template <class S>
DDL_REDUCE_TARGET inline S load_at(const void *p, size_t i) {
  return static_cast<const typename Unaligned<S>::type *>(p)[i];
}
template <class S>
DDL_REDUCE_TARGET inline void store_at(void *p, size_t i, S v) {
  static_cast<typename Unaligned<S>::type *>(p)[i] = v;
}

// Codecs: how a stored element (S) becomes the type the arithmetic runs in (C) and back.
template <class T>
struct Native {
  using S = T;
  using C = T;
  DDL_REDUCE_TARGET static C in(S s) { return s; }
  DDL_REDUCE_TARGET static S out(C c) { return c; }
};
struct Half {
  using S = uint16_t;
  using C = float;
  DDL_REDUCE_TARGET static C in(S s) { return half_to_f32(s); }
  DDL_REDUCE_TARGET static S out(C c) { return f32_to_half(c); }
};
struct BHalf {
  using S = uint16_t;
  using C = float;
  DDL_REDUCE_TARGET static C in(S s) { return bf16_to_f32(s); }
  DDL_REDUCE_TARGET static S out(C c) { return f32_to_bf16(c); }
};

// Wrapping integer arithmetic: in the unsigned type, promoted no narrower than unsigned int
// (so uint8 * uint8 never becomes a signed int product).
template <class C>
using Wide = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

template <class C>
DDL_REDUCE_TARGET inline C add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<Wide<C>>(static_cast<Wide<C>>(a) + static_cast<Wide<C>>(b)));
  } else {
    return a + b;
  }
}

// Division by AVG's divisor d (>= 2 here: divisor 1 takes the SUM loop), truncating for
// integers. x86 has no SIMD integer division and a scalar one costs 20-90 cycles, so:
//  - 8-bit: |x| <= 255, and q = (|x| * m) >> 16 with m = ceil(2^16 / d) is exact: with
//    e = m*d - 2^16 < d, the error term |x| * e / 2^16 stays below 1 for d <= 255
//    (255 * 254 < 2^16), and for d > 255 the product is below 2^16, giving 0 as it should.
//    Computed in 16-bit lanes, where the high half of the product is one vpmulhuw.
//  - 32-bit: q = trunc(|x| * RN(1/d)) in double, then one correction. The product's
//    relative error is under 2^-52 and |x| / d < 2^32 / d, so its absolute error is below
//    1/d: if d does not divide |x| the quotient is at least 1/d from either integer and
//    truncation is right; if it does, truncation may give k - 1 for k (e.g. 49 / 49), which
//    the remainder test (|x| - q*d >= d) puts right. All of it vectorizes (cvtdq2pd,
//    mulpd, cvttpd2dq, pmulld, compares, blends).
//  - 64-bit: Granlund-Montgomery's multiply-high by a precomputed magic number (Hacker's
//    Delight 10-8; one 64x64->128 multiply, a few cycles, scalar), on |x| for signed types.
// Signed types divide |x| and restore the sign with masks (x ^ s) - s, not branches: on
// random data a branch would mispredict every other element (int64 AVG ran at 2 GB/s).
template <class C>
struct Divide {
  C d;             // floating types
  uint32_t ud;     // 32-bit
  double inv;      // 32-bit
  uint16_t m16;    // 8-bit: ceil(2^16 / d) <= 32768 for d >= 2 (wraps to 0 for d = 1: unused)
  uint64_t magic;  // 64-bit
  int shift;       // 64-bit
  DDL_REDUCE_TARGET explicit Divide(int divisor)
      : d(static_cast<C>(divisor)),
        ud(static_cast<uint32_t>(divisor)),
        inv(1.0 / divisor),
        m16(static_cast<uint16_t>((65536 + static_cast<int64_t>(divisor) - 1) / divisor)),
        magic(0),
        shift(0) {
    if constexpr (std::is_integral_v<C> && sizeof(C) == 8) {
      if (divisor < 2) return;
      int l = 1;  // ceil(log2(divisor))
      while ((uint64_t{1} << l) < static_cast<uint64_t>(divisor)) ++l;
      shift = l - 1;
      const uint64_t ud64 = static_cast<uint64_t>(divisor);
      const unsigned __int128 num = static_cast<unsigned __int128>((uint64_t{1} << l) - ud64) << 64;
      magic = static_cast<uint64_t>(num / ud64) + 1;
    }
  }
  DDL_REDUCE_TARGET C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return x / d;
    } else if constexpr (sizeof(C) == 1) {
      const uint16_t sign = std::is_signed_v<C> && x < 0 ? 0xffff : 0;
      const uint16_t ax =
          static_cast<uint16_t>((static_cast<uint16_t>(static_cast<int16_t>(x)) ^ sign) - sign);
      const uint16_t q =
          static_cast<uint16_t>((static_cast<uint32_t>(ax) * static_cast<uint32_t>(m16)) >> 16);
      return static_cast<C>(static_cast<uint16_t>((q ^ sign) - sign));
    } else if constexpr (sizeof(C) == 4) {
      const uint32_t sign = std::is_signed_v<C> && x < 0 ? ~0u : 0u;
      const uint32_t ax = (static_cast<uint32_t>(x) ^ sign) - sign;
      // |x| as a double, exactly, by conversions the vector units have (int32 -> double).
      const double fx =
          std::is_signed_v<C>
              ? std::fabs(static_cast<double>(static_cast<int32_t>(x)))
              : static_cast<double>(static_cast<int32_t>(ax ^ 0x80000000u)) + 2147483648.0;
      uint32_t q = static_cast<uint32_t>(static_cast<int32_t>(fx * inv));  // < 2^31 as d >= 2
      q += (ax - q * ud) >= ud ? 1u : 0u;
      return static_cast<C>((q ^ sign) - sign);
    } else {
      const uint64_t sign = std::is_signed_v<C> && x < 0 ? ~uint64_t{0} : 0;
      const uint64_t ax = (static_cast<uint64_t>(x) ^ sign) - sign;
      const uint64_t t = static_cast<uint64_t>((static_cast<unsigned __int128>(magic) * ax) >> 64);
      const uint64_t q = (t + ((ax - t) >> 1)) >> shift;
      return static_cast<C>((q ^ sign) - sign);
    }
  }
};

struct Sum {
  template <class C>
  DDL_REDUCE_TARGET static C apply(C a, C b, const Divide<C> &) {
    return add(a, b);
  }
};
struct Prod {
  template <class C>
  DDL_REDUCE_TARGET static C apply(C a, C b, const Divide<C> &) {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(
          static_cast<Wide<C>>(static_cast<Wide<C>>(a) * static_cast<Wide<C>>(b)));
    else
      return a * b;
  }
};
// The NaN rule of reduce.h: `a < b ? a : b` is what minps does (b when either is NaN, b
// for equal values); the extra select makes a NaN in a win too. GCC turns it into
// vminps + vcmpunordps + a blend, as the hand-written kernels do.
struct Min {
  template <class C>
  DDL_REDUCE_TARGET static C apply(C a, C b, const Divide<C> &) {
    if constexpr (std::is_floating_point_v<C>)
      return a != a ? a : (a < b ? a : b);
    else
      return a < b ? a : b;
  }
};
struct Max {
  template <class C>
  DDL_REDUCE_TARGET static C apply(C a, C b, const Divide<C> &) {
    if constexpr (std::is_floating_point_v<C>)
      return a != a ? a : (a > b ? a : b);
    else
      return a > b ? a : b;
  }
};
struct Avg {
  template <class C>
  DDL_REDUCE_TARGET static C apply(C a, C b, const Divide<C> &div) {
    return div(add(a, b));
  }
};

template <class Codec, class Op>
DDL_REDUCE_TARGET void reduce_loop(void *dst, const void *a, const void *b, size_t n, int divisor) {
  using S = typename Codec::S;
  using C = typename Codec::C;
  const Divide<C> div(divisor < 1 ? 1 : divisor);
  for (size_t i = 0; i < n; ++i) {
    const C x = Codec::in(load_at<S>(a, i));
    const C y = Codec::in(load_at<S>(b, i));
    store_at<S>(dst, i, Codec::out(Op::apply(x, y, div)));
  }
}

template <class Codec>
DDL_REDUCE_TARGET void reduce_avg(void *dst, const void *a, const void *b, size_t n, int divisor) {
  // (a + b) / 1 is exactly a + b for every type: skip the division.
  if (divisor == 1)
    reduce_loop<Codec, Sum>(dst, a, b, n, 1);
  else
    reduce_loop<Codec, Avg>(dst, a, b, n, divisor);
}

template <class Codec>
DDL_REDUCE_TARGET void scale_loop(void *dst, const void *src, size_t n, int divisor) {
  using S = typename Codec::S;
  using C = typename Codec::C;
  if (divisor == 1) {
    // Copy the bits (a float16 signalling NaN stays as it is, unlike through a conversion).
    if (dst != src) std::memmove(dst, src, n * sizeof(S));
    return;
  }
  const Divide<C> div(divisor);
  for (size_t i = 0; i < n; ++i)
    store_at<S>(dst, i, Codec::out(div(Codec::in(load_at<S>(src, i)))));
}

}  // namespace
}  // namespace reduce_detail
}  // namespace ddl

// One row of a KernelTable (ops in ddl_op_t order) built from the templates above.
#define DDL_REDUCE_GENERIC_ROW(Codec)                                              \
  {                                                                                \
    &reduce_loop<Codec, Sum>, &reduce_loop<Codec, Prod>, &reduce_loop<Codec, Min>, \
        &reduce_loop<Codec, Max>, &reduce_avg<Codec>                               \
  }

// The AVX2 implementation (Haswell and later, Zen): float16 through F16C, bfloat16 through
// integer shifts, float32/float64 with explicit 256-bit intrinsics; the integer types use
// generic.h's templates compiled for AVX2 (GCC vectorizes those as well as hand code would).
//
// Only the functions below are built for AVX2 (target attribute), never the whole file or
// library: libddl.so must load and run on any x86-64, and reduce.cc calls into this table
// only after __builtin_cpu_supports says the CPU has avx2, fma and f16c.
#include "lib/reduce/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define DDL_REDUCE_TARGET __attribute__((target("avx2,fma,f16c")))
#include "lib/reduce/generic.h"

namespace ddl {
namespace reduce_detail {
namespace {

// --- Lanes: how N stored elements become one vector of float32 (or float64) and back. ---

struct F32Lanes {
  using S = float;
  using V = __m256;
  static constexpr size_t N = 8;
  DDL_REDUCE_TARGET static V load(const char *p) {
    return _mm256_loadu_ps(reinterpret_cast<const float *>(p));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) {
    _mm256_storeu_ps(reinterpret_cast<float *>(p), v);
  }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm256_set1_ps(static_cast<float>(d)); }
};

struct F64Lanes {
  using S = double;
  using V = __m256d;
  static constexpr size_t N = 4;
  DDL_REDUCE_TARGET static V load(const char *p) {
    return _mm256_loadu_pd(reinterpret_cast<const double *>(p));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) {
    _mm256_storeu_pd(reinterpret_cast<double *>(p), v);
  }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm256_set1_pd(static_cast<double>(d)); }
};

// float16: vcvtph2ps is exact; vcvtps2ph with an immediate rounding mode of nearest-even
// ignores MXCSR and matches f32_to_half (convert.h) bit for bit, NaN payloads included.
struct F16Lanes {
  using S = uint16_t;
  using V = __m256;
  static constexpr size_t N = 8;
  DDL_REDUCE_TARGET static V load(const char *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm256_set1_ps(static_cast<float>(d)); }
};

// bfloat16: the top half of a float32. 16 of them (one ymm) become two float vectors without
// any shuffle: the odd elements already sit in the high halves of the 32-bit lanes (mask off
// the low half), the even ones get there by a shift. Narrowing is f32_to_bf16 (convert.h)
// per lane: add 0x7fff plus the lowest kept bit (round to nearest even), set the quiet bit
// of NaNs; then the even results shift down and the odd ones are masked, and OR interleaves
// them back. Shuffles (vpmovzxwd, vpackusdw, vextracti128) all go to port 5 on Intel cores
// and capped the obvious widen/pack version at ~11 GB/s in L2; this one uses none.
struct Pair {
  __m256 even, odd;
};

DDL_REDUCE_TARGET inline __m256i bf16_round(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
}

struct BF16Lanes {
  using S = uint16_t;
  using V = Pair;
  static constexpr size_t N = 16;
  DDL_REDUCE_TARGET static V load(const char *p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    return {
        _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
        _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) {
    const __m256i even = _mm256_srli_epi32(bf16_round(v.even), 16);
    const __m256i odd =
        _mm256_and_si256(bf16_round(v.odd), _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm256_or_si256(even, odd));
  }
  DDL_REDUCE_TARGET static V splat(int d) {
    const __m256 v = _mm256_set1_ps(static_cast<float>(d));
    return {v, v};
  }
};

// --- Arithmetic on both vector types. MIN/MAX: vminps(a, b) returns b when either is NaN
// (and for -0/+0), i.e. exactly `a < b ? a : b`; the blend puts a NaN of a through as well,
// which is reduce.h's rule and what the portable Min/Max compute. ---

DDL_REDUCE_TARGET inline __m256 vadd(__m256 a, __m256 b) {
  return _mm256_add_ps(a, b);
}
DDL_REDUCE_TARGET inline __m256 vmul(__m256 a, __m256 b) {
  return _mm256_mul_ps(a, b);
}
DDL_REDUCE_TARGET inline __m256 vdiv(__m256 a, __m256 b) {
  return _mm256_div_ps(a, b);
}
DDL_REDUCE_TARGET inline __m256 vmin(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
DDL_REDUCE_TARGET inline __m256 vmax(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
DDL_REDUCE_TARGET inline __m256d vadd(__m256d a, __m256d b) {
  return _mm256_add_pd(a, b);
}
DDL_REDUCE_TARGET inline __m256d vmul(__m256d a, __m256d b) {
  return _mm256_mul_pd(a, b);
}
DDL_REDUCE_TARGET inline __m256d vdiv(__m256d a, __m256d b) {
  return _mm256_div_pd(a, b);
}
DDL_REDUCE_TARGET inline __m256d vmin(__m256d a, __m256d b) {
  return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}
DDL_REDUCE_TARGET inline __m256d vmax(__m256d a, __m256d b) {
  return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}

// A Pair (bfloat16's even and odd elements) does everything twice.
DDL_REDUCE_TARGET inline Pair vadd(Pair a, Pair b) {
  return {vadd(a.even, b.even), vadd(a.odd, b.odd)};
}
DDL_REDUCE_TARGET inline Pair vmul(Pair a, Pair b) {
  return {vmul(a.even, b.even), vmul(a.odd, b.odd)};
}
DDL_REDUCE_TARGET inline Pair vdiv(Pair a, Pair b) {
  return {vdiv(a.even, b.even), vdiv(a.odd, b.odd)};
}
DDL_REDUCE_TARGET inline Pair vmin(Pair a, Pair b) {
  return {vmin(a.even, b.even), vmin(a.odd, b.odd)};
}
DDL_REDUCE_TARGET inline Pair vmax(Pair a, Pair b) {
  return {vmax(a.even, b.even), vmax(a.odd, b.odd)};
}

struct VSum {
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V b, V) {
    return vadd(a, b);
  }
};
struct VProd {
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V b, V) {
    return vmul(a, b);
  }
};
struct VMin {
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V b, V) {
    return vmin(a, b);
  }
};
struct VMax {
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V b, V) {
    return vmax(a, b);
  }
};
struct VAvg {
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V b, V d) {
    return vdiv(vadd(a, b), d);
  }
};
struct VScale {  // scale_average: b is ignored (the caller passes src twice)
  template <class V>
  DDL_REDUCE_TARGET static V apply(V a, V, V d) {
    return vdiv(a, d);
  }
};

// Four vectors per iteration: enough independent loads in flight to keep up with L2 and
// memory, and a short loop. All of an iteration's loads come before its stores, though for
// the only overlap allowed (dst == a or dst == b, element for element) either order is fine.
template <class L, class Op>
DDL_REDUCE_TARGET void vec_loop(void *dst, const void *a, const void *b, size_t n, int divisor) {
  using V = typename L::V;
  constexpr size_t N = L::N;
  constexpr size_t W = sizeof(typename L::S);
  const V d = L::splat(divisor);
  char *pd = static_cast<char *>(dst);
  const char *pa = static_cast<const char *>(a);
  const char *pb = static_cast<const char *>(b);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const size_t o = i * W;
    const V r0 = Op::apply(L::load(pa + o), L::load(pb + o), d);
    const V r1 = Op::apply(L::load(pa + o + N * W), L::load(pb + o + N * W), d);
    const V r2 = Op::apply(L::load(pa + o + 2 * N * W), L::load(pb + o + 2 * N * W), d);
    const V r3 = Op::apply(L::load(pa + o + 3 * N * W), L::load(pb + o + 3 * N * W), d);
    L::store(pd + o, r0);
    L::store(pd + o + N * W, r1);
    L::store(pd + o + 2 * N * W, r2);
    L::store(pd + o + 3 * N * W, r3);
  }
  for (; i + N <= n; i += N)
    L::store(pd + i * W, Op::apply(L::load(pa + i * W), L::load(pb + i * W), d));
  if (i < n) {
    // The last n - i < N elements go through zero-padded buffers and the very same vector
    // code, so a tail element rounds exactly like a body element.
    alignas(32) char ta[N * W] = {}, tb[N * W] = {}, td[N * W];
    const size_t bytes = (n - i) * W;
    std::memcpy(ta, pa + i * W, bytes);
    std::memcpy(tb, pb + i * W, bytes);
    L::store(td, Op::apply(L::load(ta), L::load(tb), d));
    std::memcpy(pd + i * W, td, bytes);
  }
}

template <class L>
DDL_REDUCE_TARGET void vec_avg(void *dst, const void *a, const void *b, size_t n, int divisor) {
  if (divisor == 1)
    vec_loop<L, VSum>(dst, a, b, n, 1);
  else
    vec_loop<L, VAvg>(dst, a, b, n, divisor);
}

template <class L>
DDL_REDUCE_TARGET void vec_scale(void *dst, const void *src, size_t n, int divisor) {
  if (divisor == 1) {
    if (dst != src) std::memmove(dst, src, n * sizeof(typename L::S));
    return;
  }
  vec_loop<L, VScale>(dst, src, src, n, divisor);
}

#define DDL_REDUCE_VEC_ROW(L) \
  { &vec_loop<L, VSum>, &vec_loop<L, VProd>, &vec_loop<L, VMin>, &vec_loop<L, VMax>, &vec_avg<L> }

const KernelTable kAvx2 = {
    "avx2",
    {
        DDL_REDUCE_GENERIC_ROW(Native<int8_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint8_t>),
        DDL_REDUCE_GENERIC_ROW(Native<int32_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint32_t>),
        DDL_REDUCE_GENERIC_ROW(Native<int64_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint64_t>),
        DDL_REDUCE_VEC_ROW(F16Lanes),
        DDL_REDUCE_VEC_ROW(BF16Lanes),
        DDL_REDUCE_VEC_ROW(F32Lanes),
        DDL_REDUCE_VEC_ROW(F64Lanes),
    },
    {
        &scale_loop<Native<int8_t>>,
        &scale_loop<Native<uint8_t>>,
        &scale_loop<Native<int32_t>>,
        &scale_loop<Native<uint32_t>>,
        &scale_loop<Native<int64_t>>,
        &scale_loop<Native<uint64_t>>,
        &vec_scale<F16Lanes>,
        &vec_scale<BF16Lanes>,
        &vec_scale<F32Lanes>,
        &vec_scale<F64Lanes>,
    },
};

}  // namespace

const KernelTable *avx2_table() {
  return &kAvx2;
}

}  // namespace reduce_detail
}  // namespace ddl

#else  // not x86-64: no AVX2 code in this build

namespace ddl {
namespace reduce_detail {
const KernelTable *avx2_table() {
  return nullptr;
}
}  // namespace reduce_detail
}  // namespace ddl

#endif

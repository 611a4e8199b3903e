// The AVX-512 implementation (Skylake-SP and later, Zen 4): the AVX2 file's design with
// 512-bit vectors, and with masked loads/stores for the last partial vector instead of
// bounce buffers (a masked-off lane is neither read nor written, so it cannot fault).
// Needs AVX512F (arithmetic, vcvtph2ps/vcvtps2ph on zmm, vpmovdw), BW+VL (16-bit masked
// loads/stores on ymm) and DQ (vpmullq, for the integer templates). The integer types use
// generic.h's templates compiled for AVX-512 with 512-bit vectors preferred (GCC's default
// tuning would stay at 256 bits).
#include "lib/reduce/kernels.h"

#if defined(__x86_64__)

// GCC 12.1/12.2 report the intentionally undefined registers inside the AVX-512 intrinsic
// headers (_mm512_undefined_*) as "may be used uninitialized" once inlined (GCC PR105593,
// fixed in 12.3). The pragma covers only what the header defines.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define DDL_REDUCE_TARGET \
  __attribute__((         \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")))
#else  // clang: no prefer-vector-width in target strings
#include <immintrin.h>
#define DDL_REDUCE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#endif
#include "lib/reduce/generic.h"

namespace ddl {
namespace reduce_detail {
namespace {

struct F32Lanes {
  using S = float;
  using V = __m512;
  using M = __mmask16;
  static constexpr size_t N = 16;
  DDL_REDUCE_TARGET static V load(const char *p) { return _mm512_loadu_ps(p); }
  DDL_REDUCE_TARGET static V load(const char *p, M k) { return _mm512_maskz_loadu_ps(k, p); }
  DDL_REDUCE_TARGET static void store(char *p, V v) { _mm512_storeu_ps(p, v); }
  DDL_REDUCE_TARGET static void store(char *p, V v, M k) { _mm512_mask_storeu_ps(p, k, v); }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm512_set1_ps(static_cast<float>(d)); }
};

struct F64Lanes {
  using S = double;
  using V = __m512d;
  using M = __mmask8;
  static constexpr size_t N = 8;
  DDL_REDUCE_TARGET static V load(const char *p) { return _mm512_loadu_pd(p); }
  DDL_REDUCE_TARGET static V load(const char *p, M k) { return _mm512_maskz_loadu_pd(k, p); }
  DDL_REDUCE_TARGET static void store(char *p, V v) { _mm512_storeu_pd(p, v); }
  DDL_REDUCE_TARGET static void store(char *p, V v, M k) { _mm512_mask_storeu_pd(p, k, v); }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm512_set1_pd(static_cast<double>(d)); }
};

// float16: 16 halves (one ymm) <-> 16 floats; nearest-even rounding from the immediate.
struct F16Lanes {
  using S = uint16_t;
  using V = __m512;
  using M = __mmask16;
  static constexpr size_t N = 16;
  DDL_REDUCE_TARGET static V load(const char *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  DDL_REDUCE_TARGET static V load(const char *p, M k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v, M k) {
    _mm256_mask_storeu_epi16(p, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  DDL_REDUCE_TARGET static V splat(int d) { return _mm512_set1_ps(static_cast<float>(d)); }
};

// bfloat16: as in the AVX2 file, 32 elements (one zmm) as two float vectors, even and odd,
// with shifts and masks instead of shuffles.
struct Pair {
  __m512 even, odd;
};

DDL_REDUCE_TARGET inline __m512i bf16_round(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
}

struct BF16Lanes {
  using S = uint16_t;
  using V = Pair;
  using M = __mmask32;
  static constexpr size_t N = 32;
  DDL_REDUCE_TARGET static V widen(__m512i x) {
    return {
        _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
        _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  DDL_REDUCE_TARGET static __m512i narrow(V v) {
    const __m512i even = _mm512_srli_epi32(bf16_round(v.even), 16);
    const __m512i odd =
        _mm512_and_si512(bf16_round(v.odd), _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    return _mm512_or_si512(even, odd);
  }
  DDL_REDUCE_TARGET static V load(const char *p) { return widen(_mm512_loadu_si512(p)); }
  DDL_REDUCE_TARGET static V load(const char *p, M k) {
    return widen(_mm512_maskz_loadu_epi16(k, p));
  }
  DDL_REDUCE_TARGET static void store(char *p, V v) { _mm512_storeu_si512(p, narrow(v)); }
  DDL_REDUCE_TARGET static void store(char *p, V v, M k) {
    _mm512_mask_storeu_epi16(p, k, narrow(v));
  }
  DDL_REDUCE_TARGET static V splat(int d) {
    const __m512 v = _mm512_set1_ps(static_cast<float>(d));
    return {v, v};
  }
};

// MIN/MAX: vminps(a, b) is `a < b ? a : b`; the masked move lets a NaN in a win too
// (reduce.h's NaN rule, as in the AVX2 and portable code).
DDL_REDUCE_TARGET inline __m512 vadd(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}
DDL_REDUCE_TARGET inline __m512 vmul(__m512 a, __m512 b) {
  return _mm512_mul_ps(a, b);
}
DDL_REDUCE_TARGET inline __m512 vdiv(__m512 a, __m512 b) {
  return _mm512_div_ps(a, b);
}
DDL_REDUCE_TARGET inline __m512 vmin(__m512 a, __m512 b) {
  return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
DDL_REDUCE_TARGET inline __m512 vmax(__m512 a, __m512 b) {
  return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
DDL_REDUCE_TARGET inline __m512d vadd(__m512d a, __m512d b) {
  return _mm512_add_pd(a, b);
}
DDL_REDUCE_TARGET inline __m512d vmul(__m512d a, __m512d b) {
  return _mm512_mul_pd(a, b);
}
DDL_REDUCE_TARGET inline __m512d vdiv(__m512d a, __m512d b) {
  return _mm512_div_pd(a, b);
}
DDL_REDUCE_TARGET inline __m512d vmin(__m512d a, __m512d b) {
  return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}
DDL_REDUCE_TARGET inline __m512d vmax(__m512d a, __m512d b) {
  return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
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

// Two 64-byte vectors per iteration (the same 128 bytes of each input as the AVX2 loop).
template <class L, class Op>
DDL_REDUCE_TARGET void vec_loop(void *dst, const void *a, const void *b, size_t n, int divisor) {
  using V = typename L::V;
  using M = typename L::M;
  constexpr size_t N = L::N;
  constexpr size_t W = sizeof(typename L::S);
  const V d = L::splat(divisor);
  char *pd = static_cast<char *>(dst);
  const char *pa = static_cast<const char *>(a);
  const char *pb = static_cast<const char *>(b);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const size_t o = i * W;
    const V r0 = Op::apply(L::load(pa + o), L::load(pb + o), d);
    const V r1 = Op::apply(L::load(pa + o + N * W), L::load(pb + o + N * W), d);
    L::store(pd + o, r0);
    L::store(pd + o + N * W, r1);
  }
  for (; i + N <= n; i += N)
    L::store(pd + i * W, Op::apply(L::load(pa + i * W), L::load(pb + i * W), d));
  if (i < n) {
    const M k = static_cast<M>((1u << (n - i)) - 1u);  // n - i < N <= 32
    L::store(pd + i * W, Op::apply(L::load(pa + i * W, k), L::load(pb + i * W, k), d), k);
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

const KernelTable kAvx512 = {
    "avx512",
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

const KernelTable *avx512_table() {
  return &kAvx512;
}

}  // namespace reduce_detail
}  // namespace ddl

#else  // not x86-64: no AVX-512 code in this build

namespace ddl {
namespace reduce_detail {
const KernelTable *avx512_table() {
  return nullptr;
}
}  // namespace reduce_detail
}  // namespace ddl

#endif

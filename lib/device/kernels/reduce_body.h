// One thread's share of a reduction kernel, for nvcc (reduce_kernels.cu wraps it in
// __global__ functions) and for g++ (the stand-in driver of the tests runs the same code for
// every thread of a launch on its stream thread). The argument block, the kernel names and
// the split of the work (scalar head, 16-byte vector body, scalar tail) live here so that
// the launcher (lib/device/device_reduce.cc), the kernels and the stand-in cannot disagree.
#pragma once

#include "lib/device/kernels/reduce_math.h"

namespace ddl {
namespace kernels {

constexpr int kMaxInputs = 8;
constexpr int kVectorBytes = 16;

// The kernels' only parameter, passed by value (the driver copies it at launch). Pointers
// are device addresses. Elements [0, head) and [head + nvec * (16 / size), count) are
// reduced one by one; the nvec 16-byte vectors between them with one 16-byte load per input
// (every pointer is then 16-byte aligned at element `head`: the launcher checks). When
// `bytewise` is set some pointer is not aligned to the element size, nvec is 0 and every
// access goes byte by byte (a GPU faults on a misaligned typed access).
struct ReduceArgs {
  void *dst;
  const void *src[kMaxInputs];
  unsigned long long count;
  unsigned long long head;
  unsigned long long nvec;
  int nsrcs;    // 2..8
  int divisor;  // AVG's divisor (>= 1); 1 for the other ops
  int bytewise;
  int pad;
};

// The kernels, as X(name suffix, codec) and Y(name suffix, op number): the kernel for
// float16 and AVG is "ddl_reduce_float16_avg". The suffixes are those of
// lib/common/datatype.cc's names, in ddl_datatype_t and ddl_op_t order.
#define DDL_KERNEL_DATATYPES(X)                    \
  X(int8, ::ddl::kernels::NativeCodec<int8_t>)     \
  X(uint8, ::ddl::kernels::NativeCodec<uint8_t>)   \
  X(int32, ::ddl::kernels::NativeCodec<int32_t>)   \
  X(uint32, ::ddl::kernels::NativeCodec<uint32_t>) \
  X(int64, ::ddl::kernels::NativeCodec<int64_t>)   \
  X(uint64, ::ddl::kernels::NativeCodec<uint64_t>) \
  X(float16, ::ddl::kernels::Float16Codec)         \
  X(bfloat16, ::ddl::kernels::Bfloat16Codec)       \
  X(float32, ::ddl::kernels::NativeCodec<float>)   \
  X(float64, ::ddl::kernels::NativeCodec<double>)
#define DDL_KERNEL_OPS(Y)          \
  Y(sum, ::ddl::kernels::kOpSum)   \
  Y(prod, ::ddl::kernels::kOpProd) \
  Y(min, ::ddl::kernels::kOpMin)   \
  Y(max, ::ddl::kernels::kOpMax)   \
  Y(avg, ::ddl::kernels::kOpAvg)

template <class S>
DDL_HD S load_element(const void *base, unsigned long long i, int bytewise) {
  const unsigned char *p = static_cast<const unsigned char *>(base) + i * sizeof(S);
  if (!bytewise) return *reinterpret_cast<const S *>(p);
  S value;
  unsigned char *out = reinterpret_cast<unsigned char *>(&value);
  for (unsigned b = 0; b < sizeof(S); ++b) out[b] = p[b];
  return value;
}

template <class S>
DDL_HD void store_element(void *base, unsigned long long i, S value, int bytewise) {
  unsigned char *p = static_cast<unsigned char *>(base) + i * sizeof(S);
  if (!bytewise) {
    *reinterpret_cast<S *>(p) = value;
    return;
  }
  const unsigned char *in = reinterpret_cast<const unsigned char *>(&value);
  for (unsigned b = 0; b < sizeof(S); ++b) p[b] = in[b];
}

// 16 bytes as elements. On the device the load and store are single 128-bit accesses
// (ld.global.v4.u32): the union's uint4 member is what the compiler moves.
template <class S>
struct Vector {
  static constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(S));
#if defined(__CUDACC__)
  union {
    uint4 raw;
    S lane[kLanes];
  };
#else
  S lane[kLanes];
#endif
};

template <class S>
DDL_HD void load_vector(Vector<S> *v, const void *base, unsigned long long byte_offset) {
  const unsigned char *p = static_cast<const unsigned char *>(base) + byte_offset;
#if defined(__CUDA_ARCH__)
  v->raw = *reinterpret_cast<const uint4 *>(p);
#else
  std::memcpy(v->lane, p, kVectorBytes);
#endif
}

template <class S>
DDL_HD void store_vector(void *base, unsigned long long byte_offset, const Vector<S> &v) {
  unsigned char *p = static_cast<unsigned char *>(base) + byte_offset;
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4 *>(p) = v.raw;
#else
  std::memcpy(p, v.lane, kVectorBytes);
#endif
}

// One element i, input by input. The loop runs to kMaxInputs with a guard, unrolled, so
// that a.src is only ever indexed by constants: indexed by a variable, the kernel parameter
// block would be copied to local memory (a 112-byte stack frame in every kernel).
template <class Codec, int kOp>
DDL_HD void reduce_one(const ReduceArgs &a, unsigned long long i) {
  using S = typename Codec::S;
  using C = typename Codec::C;
  C acc = Codec::in(load_element<S>(a.src[0], i, a.bytewise));
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 1; k < kMaxInputs; ++k)
    if (k < a.nsrcs) acc = combine<kOp>(acc, Codec::in(load_element<S>(a.src[k], i, a.bytewise)));
  if (kOp == kOpAvg && a.divisor != 1) acc = divide(acc, a.divisor);
  store_element<S>(a.dst, i, Codec::out(acc), a.bytewise);
}

// The work of thread `thread` out of `nthreads` (grid-stride loops: any grid covers it all).
// All inputs' vectors are loaded before any arithmetic (the loop over inputs is unrolled to
// kMaxInputs with guards), so that up to eight 16-byte loads are in flight per thread.
template <class Codec, int kOp>
DDL_HD void reduce_thread(const ReduceArgs &a, unsigned long long thread,
                          unsigned long long nthreads) {
  using S = typename Codec::S;
  using C = typename Codec::C;
  constexpr int kLanes = Vector<S>::kLanes;
  const unsigned long long body = a.head * sizeof(S);
  for (unsigned long long v = thread; v < a.nvec; v += nthreads) {
    const unsigned long long offset = body + v * kVectorBytes;
#if defined(__CUDA_ARCH__)
    Vector<S> in[kMaxInputs];
#else
    Vector<S> in[kMaxInputs] = {};  // g++ cannot see that the guards match (maybe-uninitialized)
#endif
    load_vector(&in[0], a.src[0], offset);  // nsrcs >= 2 always
    load_vector(&in[1], a.src[1], offset);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 2; k < kMaxInputs; ++k)
      if (k < a.nsrcs) load_vector(&in[k], a.src[k], offset);
    Vector<S> out;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int lane = 0; lane < kLanes; ++lane) {
      C acc = Codec::in(in[0].lane[lane]);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int k = 1; k < kMaxInputs; ++k)
        if (k < a.nsrcs) acc = combine<kOp>(acc, Codec::in(in[k].lane[lane]));
      if (kOp == kOpAvg && a.divisor != 1) acc = divide(acc, a.divisor);
      out.lane[lane] = Codec::out(acc);
    }
    store_vector(a.dst, offset, out);
  }
  // The scalar elements: the head, then the tail after the vectors.
  const unsigned long long vector_elements = a.nvec * kLanes;
  const unsigned long long scalars = a.count - vector_elements;
  for (unsigned long long j = thread; j < scalars; j += nthreads)
    reduce_one<Codec, kOp>(a, j < a.head ? j : j + vector_elements);
}

}  // namespace kernels
}  // namespace ddl

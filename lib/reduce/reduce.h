// CPU reduction kernels: the inner loop of every reducing collective.
//
// One implementation per instruction set ("portable" C++ that GCC vectorizes for the
// baseline ISA, "avx2" with F16C, "avx512" with BW/VL/DQ); the best one this CPU runs is
// chosen once, on first use. DDL_REDUCE_ISA=portable|avx2|avx512 forces a lower one (a
// higher one than the CPU has falls back to the best available, with a warning).
//
// Semantics, identical on every ISA (the tests check every ISA against one reference):
//  - integers: SUM and PROD wrap modulo 2^bits (unsigned arithmetic, even for signed types);
//    AVG is the wrapped sum divided by avg_divisor with C's truncating division.
//  - float32/float64: IEEE arithmetic in the type itself; AVG is (a + b) / avg_divisor, a true
//    division (not a multiplication by 1/n), so it rounds twice: once for +, once for /.
//  - float16/bfloat16: widened to float32, combined (and divided) in float32, rounded back
//    once with round-to-nearest-even: dst = to16(op(to32(a), to32(b))).
//  - MIN/MAX of floating types propagate NaN: if a or b is NaN the result is NaN (NCCL's
//    fminf/fmaxf drop it instead; both are allowed, we prefer the one that does not hide a
//    diverged gradient and that gives the same answer whatever the operand order). Apart
//    from NaN, MIN(a, b) = a < b ? a : b and MAX(a, b) = a > b ? a : b, so min(-0, +0) is b.
//  - count 0 touches nothing (pointers may then be null). Pointers need no alignment, not
//    even to the element size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddl/ddl.h"

namespace ddl {

// dst[i] = a[i] op b[i] for i < count. dst may be the very same pointer as a or as b (in
// place); no other overlap. For DDL_AVG the result is (a[i] + b[i]) / avg_divisor: the
// collective's last step passes DDL_AVG with the number of ranks, earlier steps pass DDL_SUM.
// avg_divisor is read only for DDL_AVG and must then be >= 1. An invalid dtype/op or
// divisor is a bug in the caller (the C API validates first): it is logged and aborts.
void reduce(ddl_datatype_t dtype, ddl_op_t op, void *dst, const void *a, const void *b,
            size_t count, int avg_divisor);

// dst[i] = src[i] / divisor (AVG on one rank, or when a collective finishes without a reduce
// step), rounded as DDL_AVG rounds. dst may equal src; divisor >= 1.
void scale_average(ddl_datatype_t dtype, void *dst, const void *src, size_t count, int divisor);

// IEEE binary16 and bfloat16 <-> float32, round-to-nearest-even (see convert.h for NaNs).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// The implementation in use: "avx512", "avx2" or "portable".
const char *reduce_isa();

// --- For tests and benchmarks ------------------------------------------------------------
// Whether this build and CPU can run the named implementation.
bool reduce_isa_supported(const char *isa);
// Switches implementation; false (and no change) when unknown or unsupported here. nullptr
// redoes the default choice (best supported, then DDL_REDUCE_ISA). A reduce() running
// meanwhile on another thread finishes on the table it started with.
bool set_reduce_isa(const char *isa);

}  // namespace ddl

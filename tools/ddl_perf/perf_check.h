// Check mode: inputs of small per-rank, per-index integers whose results are exact in every
// datatype (float16 and bfloat16 included), and a count of the result elements that differ.
//
// Values are 0..3 (fewer for types and rank counts where sums could leave the exactly
// representable range); for prod they are 1 or 2, with about nranks/4 twos per element, so
// products stay small powers of two. avg is the exact sum divided by nranks, rounded to the
// datatype (integer division for integer types); float results may differ from it by the
// one rounding the library is allowed, nothing more.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddl/ddl.h"
#include "perf_options.h"

namespace ddl_perf {

// What one call of the collective looks like from one rank.
struct CheckShape {
  Collective collective;
  ddl_datatype_t dtype;
  ddl_op_t op;  // ignored by broadcast and allgather
  int rank;
  int nranks;
  int root;      // broadcast
  size_t count;  // the count argument of the call (per-rank count for allgather/rs)
};

// Elements of the send and receive buffers (nccl-tests' sendcount / recvcount).
size_t send_elements(const CheckShape &shape);
size_t recv_elements(const CheckShape &shape);

// Fills `recv` with a value that no correct result holds, then the rank's input into `send`
// (which may lie inside `recv` for in-place calls: the order makes that work).
void prepare_check(const CheckShape &shape, void *send, void *recv);

// The number of elements of `recv` that differ from the expected result.
uint64_t count_wrong(const CheckShape &shape, const void *recv);

// Conversions of the 16-bit float formats (round to nearest even), also used by the tests.
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

}  // namespace ddl_perf

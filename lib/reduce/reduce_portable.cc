// The portable implementation: generic.h's templates built for the baseline ISA (SSE2 on
// x86-64, whatever the compiler targets elsewhere). Always present; the reference the other
// ISAs are tested against.
#define DDL_REDUCE_TARGET
#include "lib/reduce/generic.h"

namespace ddl {
namespace reduce_detail {
namespace {

const KernelTable kPortable = {
    "portable",
    {
        DDL_REDUCE_GENERIC_ROW(Native<int8_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint8_t>),
        DDL_REDUCE_GENERIC_ROW(Native<int32_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint32_t>),
        DDL_REDUCE_GENERIC_ROW(Native<int64_t>),
        DDL_REDUCE_GENERIC_ROW(Native<uint64_t>),
        DDL_REDUCE_GENERIC_ROW(Half),
        DDL_REDUCE_GENERIC_ROW(BHalf),
        DDL_REDUCE_GENERIC_ROW(Native<float>),
        DDL_REDUCE_GENERIC_ROW(Native<double>),
    },
    {
        &scale_loop<Native<int8_t>>,
        &scale_loop<Native<uint8_t>>,
        &scale_loop<Native<int32_t>>,
        &scale_loop<Native<uint32_t>>,
        &scale_loop<Native<int64_t>>,
        &scale_loop<Native<uint64_t>>,
        &scale_loop<Half>,
        &scale_loop<BHalf>,
        &scale_loop<Native<float>>,
        &scale_loop<Native<double>>,
    },
};

}  // namespace

const KernelTable *portable_table() {
  return &kPortable;
}

}  // namespace reduce_detail
}  // namespace ddl

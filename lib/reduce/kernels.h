// The dispatch table that each ISA's translation unit fills (internal to lib/reduce).
#pragma once

#include <cstddef>

#include "ddl/ddl.h"

namespace ddl {
namespace reduce_detail {

// dst = a op b (divisor: see reduce()); dst = src / divisor.
using ReduceFn = void (*)(void *dst, const void *a, const void *b, size_t count, int divisor);
using ScaleFn = void (*)(void *dst, const void *src, size_t count, int divisor);

struct KernelTable {
  const char *name;
  ReduceFn reduce[DDL_DATATYPE_COUNT][DDL_OP_COUNT];  // indexed by ddl_datatype_t, ddl_op_t
  ScaleFn scale[DDL_DATATYPE_COUNT];
};

// Each returns its table, or nullptr when the build has no such code (not x86-64). They do
// not check the CPU: reduce.cc does, before it calls through a table.
const KernelTable *portable_table();
const KernelTable *avx2_table();
const KernelTable *avx512_table();

}  // namespace reduce_detail
}  // namespace ddl

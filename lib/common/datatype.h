// Facts about datatypes and reduction operators.
#pragma once

#include <cstddef>

#include "ddl/ddl.h"

namespace ddl {

inline bool valid_datatype(int dtype) {
  return dtype >= 0 && dtype < DDL_DATATYPE_COUNT;
}
inline bool valid_op(int op) {
  return op >= 0 && op < DDL_OP_COUNT;
}

// 0 for an invalid value.
size_t datatype_size(ddl_datatype_t dtype);
// "float32", "sum"...; "invalid" for an out-of-range value.
const char *datatype_name(ddl_datatype_t dtype);
const char *op_name(ddl_op_t op);
// The reverse of the names above (also "float"/"half"/"bf16"/"int"/"double" as in
// nccl-tests); false when unknown.
bool datatype_from_name(const char *name, ddl_datatype_t *dtype);
bool op_from_name(const char *name, ddl_op_t *op);

}  // namespace ddl

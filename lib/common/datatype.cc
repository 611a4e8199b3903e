#include "lib/common/datatype.h"

#include <strings.h>

namespace ddl {
namespace {

const char *const kOpNames[DDL_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

struct Alias {
  const char *name;
  ddl_datatype_t dtype;
};
// nccl-tests' spellings (-d float, half, bfloat16, double, int, uint8...).
const Alias kDatatypeAliases[] = {
    {"char", DDL_INT8},      {"int", DDL_INT32},     {"uint", DDL_UINT32},   {"half", DDL_FLOAT16},
    {"fp16", DDL_FLOAT16},   {"bf16", DDL_BFLOAT16}, {"float", DDL_FLOAT32}, {"fp32", DDL_FLOAT32},
    {"double", DDL_FLOAT64}, {"fp64", DDL_FLOAT64},
};

}  // namespace

const char *datatype_name(int dtype) {
  return valid_datatype(dtype) ? kDatatypes[dtype].name : "invalid";
}

const char *op_name(int op) {
  return valid_op(op) ? kOpNames[op] : "invalid";
}

bool datatype_from_name(const char *name, ddl_datatype_t *dtype) {
  for (int i = 0; i < DDL_DATATYPE_COUNT; ++i) {
    if (strcasecmp(name, kDatatypes[i].name) == 0) {
      *dtype = static_cast<ddl_datatype_t>(i);
      return true;
    }
  }
  for (const Alias &alias : kDatatypeAliases) {
    if (strcasecmp(name, alias.name) == 0) {
      *dtype = alias.dtype;
      return true;
    }
  }
  return false;
}

bool op_from_name(const char *name, ddl_op_t *op) {
  for (int i = 0; i < DDL_OP_COUNT; ++i) {
    if (strcasecmp(name, kOpNames[i]) == 0) {
      *op = static_cast<ddl_op_t>(i);
      return true;
    }
  }
  return false;
}

}  // namespace ddl

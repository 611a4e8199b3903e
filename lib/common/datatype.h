// Facts about datatypes and reduction operators.
#pragma once

#include <cstddef>
#include <cstring>

#include "ddl/ddl.h"

namespace ddl {

inline bool valid_datatype(int dtype) {
  return dtype >= 0 && dtype < DDL_DATATYPE_COUNT;
}
inline bool valid_op(int op) {
  return op >= 0 && op < DDL_OP_COUNT;
}

// Each datatype's name and size, by its value.
struct DatatypeInfo {
  const char *name;
  size_t size;
};
inline constexpr DatatypeInfo kDatatypes[DDL_DATATYPE_COUNT] = {
    {"int8", 1},   {"uint8", 1},   {"int32", 4},    {"uint32", 4},  {"int64", 8},
    {"uint64", 8}, {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8},
};

// These take the raw integer: values from C callers or from the network may lie outside
// the enums' ranges, and converting such a value to the enum type is undefined behaviour in
// C++ (ddl_datatype_t's values are 0..15, ddl_op_t's 0..7). Enum arguments convert implicitly.
// 0 for an invalid value. Inline: every call asks it several times (3 % of an 8 B allreduce
// on 2 ranks as a call into the library).
inline size_t datatype_size(int dtype) {
  return valid_datatype(dtype) ? kDatatypes[dtype].size : 0;
}
// "float32", "sum"...; "invalid" for an out-of-range value.
const char *datatype_name(int dtype);
const char *op_name(int op);

// The integer a C caller passed as an enum, read from the object's bytes: no load of the enum
// type happens, so an out-of-range value is not undefined behaviour (UBSan's -fsanitize=enum).
template <typename Enum>
int raw_enum_value(const Enum &value) {
  static_assert(sizeof(Enum) == sizeof(int), "ddl's C enums are int-sized (the ABI)");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}
// The reverse of the names above (also "float"/"half"/"bf16"/"int"/"double" as in
// nccl-tests); false when unknown.
bool datatype_from_name(const char *name, ddl_datatype_t *dtype);
bool op_from_name(const char *name, ddl_op_t *op);

}  // namespace ddl

// datatype_from_name / op_from_name (lib/common/datatype.h): the names that ddl_perf's -d/-o
// and the Python bindings hand in. Checked: a name is accepted exactly when it is one of the
// documented spellings (any case), and accepted names map to valid values whose canonical
// name maps back to the same value.
#include <strings.h>

#include <string>

#include "fuzz_util.h"
#include "lib/common/datatype.h"

namespace {

const char *const kTypeNames[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                  "uint64", "float16", "bfloat16", "float32", "float64",
                                  "char",   "int",     "uint",     "half",    "fp16",
                                  "bf16",   "float",   "fp32",     "double",  "fp64"};
const char *const kOpNames[] = {"sum", "prod", "min", "max", "avg"};

template <size_t N>
bool listed(const char *name, const char *const (&names)[N]) {
  for (const char *n : names)
    if (strcasecmp(n, name) == 0) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The API takes C strings: the name ends at the first NUL.
  const std::string name(reinterpret_cast<const char *>(data), size);
  const char *c = name.c_str();

  ddl_datatype_t dtype = static_cast<ddl_datatype_t>(15);
  bool ok = ddl::datatype_from_name(c, &dtype);
  FUZZ_CHECK(ok == listed(c, kTypeNames), "datatype_from_name('%s') = %d", c, ok);
  if (ok) {
    FUZZ_CHECK(ddl::valid_datatype(dtype), "'%s' -> invalid datatype %d", c, dtype);
    FUZZ_CHECK(ddl::datatype_size(dtype) > 0, "'%s' -> size 0", c);
    ddl_datatype_t again = DDL_DATATYPE_COUNT;
    FUZZ_CHECK(ddl::datatype_from_name(ddl::datatype_name(dtype), &again) && again == dtype,
               "'%s' does not round-trip through '%s'", c, ddl::datatype_name(dtype));
  } else {
    FUZZ_CHECK(dtype == static_cast<ddl_datatype_t>(15), "output written on failure");
  }

  ddl_op_t op = static_cast<ddl_op_t>(7);
  ok = ddl::op_from_name(c, &op);
  FUZZ_CHECK(ok == listed(c, kOpNames), "op_from_name('%s') = %d", c, ok);
  if (ok) {
    FUZZ_CHECK(ddl::valid_op(op), "'%s' -> invalid op %d", c, op);
    ddl_op_t again = DDL_OP_COUNT;
    FUZZ_CHECK(ddl::op_from_name(ddl::op_name(op), &again) && again == op,
               "'%s' does not round-trip", c);
  }

  // The other direction with raw enum values from the input, valid and not. Only 0..15:
  // these enums have no fixed underlying type, so in C++ a value outside the range of their
  // enumerators' bits (0..15) is undefined behaviour the moment it is loaded (UBSan's enum
  // check fires in datatype.cc; ddl_op_t's range is 0..7). C callers can pass any int.
  if (size >= 1) {
    int32_t raw = data[0] & 15, raw_op = data[0] & 7;
    const char *tn = ddl::datatype_name(static_cast<ddl_datatype_t>(raw));
    const char *on = ddl::op_name(static_cast<ddl_op_t>(raw_op));
    FUZZ_CHECK(tn && on, "NULL name");
    bool valid = raw >= 0 && raw < DDL_DATATYPE_COUNT;
    FUZZ_CHECK(valid == (std::string(tn) != "invalid"), "datatype_name(%d) = %s", raw, tn);
    FUZZ_CHECK((ddl::datatype_size(static_cast<ddl_datatype_t>(raw)) != 0) == valid,
               "datatype_size(%d)", raw);
    FUZZ_CHECK((raw_op < DDL_OP_COUNT) == (std::string(on) != "invalid"), "op_name(%d) = %s",
               raw_op, on);
  }
  return 0;
}

// Parsing of sizes, integers and names used by the environment variables and tools.
#include <criterion/criterion.h>

#include "lib/common/datatype.h"
#include "lib/common/params.h"

using namespace ddl;

Test(params, parse_bytes_accepts_suffixes_and_refuses_garbage) {
  uint64_t v = 0;
  cr_assert(parse_bytes("4096", &v) && v == 4096);
  cr_assert(parse_bytes("64K", &v) && v == 65536);
  cr_assert(parse_bytes("2M", &v) && v == 2u << 20);
  cr_assert(parse_bytes("1G", &v) && v == 1u << 30);
  cr_assert(parse_bytes("8b", &v) && v == 8);
  cr_assert_not(parse_bytes("", &v));
  cr_assert_not(parse_bytes("K", &v));
  cr_assert_not(parse_bytes("12Q", &v));
  cr_assert_not(parse_bytes("-1", &v));
  cr_assert_not(parse_bytes("99999999999999999999", &v));
  cr_assert_not(parse_bytes("17179869184G", &v));  // overflows 64 bits
}

Test(params, parse_int_checks_range) {
  int64_t v = 0;
  cr_assert(parse_int("42", 0, 100, &v) && v == 42);
  cr_assert_not(parse_int("101", 0, 100, &v));
  cr_assert_not(parse_int("4x", 0, 100, &v));
  cr_assert_not(parse_int("", 0, 100, &v));
  cr_assert_not(parse_int(std::string("42\0junk", 7), 0, 100, &v));
  cr_assert_not(parse_int(" 42", 0, 100, &v));
  cr_assert_not(parse_int("+42", 0, 100, &v));
  cr_assert(parse_int("-5", -10, 10, &v) && v == -5);
}

Test(params, datatype_and_op_names_round_trip) {
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d) {
    ddl_datatype_t back;
    cr_assert(datatype_from_name(datatype_name(static_cast<ddl_datatype_t>(d)), &back));
    cr_assert_eq(back, d);
  }
  ddl_datatype_t d;
  cr_assert(datatype_from_name("half", &d) && d == DDL_FLOAT16);
  cr_assert(datatype_from_name("float", &d) && d == DDL_FLOAT32);
  cr_assert_not(datatype_from_name("complex", &d));
  ddl_op_t op;
  cr_assert(op_from_name("max", &op) && op == DDL_MAX);
  cr_assert_not(op_from_name("xor", &op));
}

// The public header compiles as C++ too, and the version macros match the library's.
#include <criterion/criterion.h>

#include "ddl/ddl.h"

Test(header, compiles_as_cxx_and_reports_version) {
  int major = -1, minor = -1, patch = -1;
  cr_assert_eq(ddl_get_version(&major, &minor, &patch), DDL_SUCCESS);
  cr_assert_eq(major, DDL_VERSION_MAJOR);
  cr_assert_eq(ddl_get_version(nullptr, &minor, &patch), DDL_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(ddl_datatype_name(DDL_BFLOAT16), "bfloat16");
  cr_assert_str_eq(ddl_op_name(DDL_AVG), "avg");
  cr_assert_str_eq(ddl_datatype_name(static_cast<ddl_datatype_t>(42)), "invalid");
  cr_assert_eq(ddl_datatype_size(DDL_FLOAT16), 2u);
  cr_assert_eq(ddl_datatype_size(static_cast<ddl_datatype_t>(-1)), 0u);
}

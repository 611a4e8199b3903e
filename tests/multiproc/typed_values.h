// Test data for reducing collectives: small per-rank values whose reductions are exact in
// every datatype (float16 included), and a float64 reference to compare with.
#pragma once

#include <cstddef>

#include "ddl/ddl.h"

namespace ddltest {

void store_value(ddl_datatype_t dtype, void *buf, size_t i, double value);
double load_value(ddl_datatype_t dtype, const void *buf, size_t i);

// What `rank` contributes at index i (depends on op so that PROD stays small).
double input_value(ddl_datatype_t dtype, ddl_op_t op, int rank, size_t i);
// The reduction over ranks 0..nranks-1 of input_value at index i, as the type stores it
// (integer results wrap like the type does).
double expected_value(ddl_datatype_t dtype, ddl_op_t op, int nranks, size_t i);
// Exact, except AVG of floating types: within one unit of the type's last place.
bool value_matches(ddl_datatype_t dtype, ddl_op_t op, double got, double expected);

// Fills buf[0..count) with rank's inputs.
void fill_inputs(ddl_datatype_t dtype, ddl_op_t op, int rank, void *buf, size_t count,
                 size_t index_base = 0);

}  // namespace ddltest

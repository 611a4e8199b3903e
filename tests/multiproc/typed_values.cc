#include "typed_values.h"

#include <cmath>
#include <cstdint>

#include "lib/reduce/reduce.h"

namespace ddltest {

void store_value(ddl_datatype_t dtype, void *buf, size_t i, double v) {
  switch (dtype) {
    case DDL_INT8:
      static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(v);
      break;
    case DDL_UINT8:
      static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DDL_INT32:
      static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DDL_UINT32:
      static_cast<uint32_t *>(buf)[i] = static_cast<uint32_t>(v);
      break;
    case DDL_INT64:
      static_cast<int64_t *>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DDL_UINT64:
      static_cast<uint64_t *>(buf)[i] = static_cast<uint64_t>(v);
      break;
    case DDL_FLOAT16:
      static_cast<uint16_t *>(buf)[i] = ddl::float_to_half(static_cast<float>(v));
      break;
    case DDL_BFLOAT16:
      static_cast<uint16_t *>(buf)[i] = ddl::float_to_bfloat16(static_cast<float>(v));
      break;
    case DDL_FLOAT32:
      static_cast<float *>(buf)[i] = static_cast<float>(v);
      break;
    case DDL_FLOAT64:
      static_cast<double *>(buf)[i] = v;
      break;
    default:
      break;
  }
}

double load_value(ddl_datatype_t dtype, const void *buf, size_t i) {
  switch (dtype) {
    case DDL_INT8:
      return static_cast<const int8_t *>(buf)[i];
    case DDL_UINT8:
      return static_cast<const uint8_t *>(buf)[i];
    case DDL_INT32:
      return static_cast<const int32_t *>(buf)[i];
    case DDL_UINT32:
      return static_cast<const uint32_t *>(buf)[i];
    case DDL_INT64:
      return static_cast<double>(static_cast<const int64_t *>(buf)[i]);
    case DDL_UINT64:
      return static_cast<double>(static_cast<const uint64_t *>(buf)[i]);
    case DDL_FLOAT16:
      return ddl::half_to_float(static_cast<const uint16_t *>(buf)[i]);
    case DDL_BFLOAT16:
      return ddl::bfloat16_to_float(static_cast<const uint16_t *>(buf)[i]);
    case DDL_FLOAT32:
      return static_cast<const float *>(buf)[i];
    case DDL_FLOAT64:
      return static_cast<const double *>(buf)[i];
    default:
      return NAN;
  }
}

namespace {

bool is_unsigned(ddl_datatype_t d) {
  return d == DDL_UINT8 || d == DDL_UINT32 || d == DDL_UINT64;
}
bool is_float(ddl_datatype_t d) {
  return d >= DDL_FLOAT16;
}

// Wraps an exact integer result the way the type stores it.
double as_type(ddl_datatype_t dtype, int64_t v) {
  unsigned char storage[8];
  switch (dtype) {
    case DDL_INT8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DDL_UINT8:
      return static_cast<uint8_t>(v);
    case DDL_INT32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DDL_UINT32:
      return static_cast<uint32_t>(v);
    case DDL_UINT64:
      return static_cast<double>(static_cast<uint64_t>(v));
    default:
      store_value(dtype, storage, 0, static_cast<double>(v));
      return load_value(dtype, storage, 0);
  }
}

}  // namespace

double input_value(ddl_datatype_t dtype, ddl_op_t op, int rank, size_t i) {
  const unsigned k = static_cast<unsigned>(rank) * 7u + static_cast<unsigned>(i % 1009) * 3u;
  if (op == DDL_PROD) {  // 1, 2 and (signed) -1: products stay exact
    switch (k % 3) {
      case 0:
        return 2;
      case 1:
        return 1;
      default:
        return is_unsigned(dtype) ? 1 : -1;
    }
  }
  return is_unsigned(dtype) ? static_cast<double>(k % 4) : static_cast<double>(k % 7) - 3.0;
}

double expected_value(ddl_datatype_t dtype, ddl_op_t op, int nranks, size_t i) {
  int64_t acc = static_cast<int64_t>(input_value(dtype, op, 0, i));
  for (int r = 1; r < nranks; ++r) {
    const int64_t v = static_cast<int64_t>(input_value(dtype, op, r, i));
    switch (op) {
      case DDL_SUM:
      case DDL_AVG:
        acc += v;
        break;
      case DDL_PROD:
        acc *= v;
        break;
      case DDL_MIN:
        acc = v < acc ? v : acc;
        break;
      case DDL_MAX:
        acc = v > acc ? v : acc;
        break;
      default:
        break;
    }
  }
  if (op == DDL_AVG) {
    if (is_float(dtype)) return static_cast<double>(acc) / nranks;
    return as_type(dtype, acc / nranks);
  }
  return as_type(dtype, acc);
}

bool value_matches(ddl_datatype_t dtype, ddl_op_t op, double got, double expected) {
  if (!(op == DDL_AVG && is_float(dtype))) return got == expected;
  double ulp = 1e-15;
  if (dtype == DDL_FLOAT16) ulp = 1.0 / 1024;
  if (dtype == DDL_BFLOAT16) ulp = 1.0 / 128;
  if (dtype == DDL_FLOAT32) ulp = 1.0 / (1 << 23);
  return std::fabs(got - expected) <= ulp * std::fmax(1.0, std::fabs(expected));
}

void fill_inputs(ddl_datatype_t dtype, ddl_op_t op, int rank, void *buf, size_t count,
                 size_t index_base) {
  for (size_t i = 0; i < count; ++i)
    store_value(dtype, buf, i, input_value(dtype, op, rank, index_base + i));
}

}  // namespace ddltest

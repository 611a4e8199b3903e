#include "perf_check.h"

#include <cmath>
#include <cstring>

#include "lib/common/datatype.h"

namespace ddl_perf {
namespace {

// Loads and stores one element as a double; one pair per datatype.
struct TypeCodec {
  double (*load)(const void *buffer, size_t index);
  void (*store)(void *buffer, size_t index, double value);
  double largest_exact_sum;  // sums up to this are exact (and do not overflow)
  double epsilon;            // relative rounding step of the type (0 for integers)
};

template <typename T>
double load_as(const void *buffer, size_t index) {
  return static_cast<double>(static_cast<const T *>(buffer)[index]);
}
template <typename T>
void store_as(void *buffer, size_t index, double value) {
  static_cast<T *>(buffer)[index] = static_cast<T>(value);
}
double load_half(const void *buffer, size_t index) {
  return half_to_float(static_cast<const uint16_t *>(buffer)[index]);
}
void store_half(void *buffer, size_t index, double value) {
  static_cast<uint16_t *>(buffer)[index] = float_to_half(static_cast<float>(value));
}
double load_bfloat16(const void *buffer, size_t index) {
  return bfloat16_to_float(static_cast<const uint16_t *>(buffer)[index]);
}
void store_bfloat16(void *buffer, size_t index, double value) {
  static_cast<uint16_t *>(buffer)[index] = float_to_bfloat16(static_cast<float>(value));
}

const TypeCodec &codec(ddl_datatype_t dtype) {
  static const TypeCodec kCodecs[DDL_DATATYPE_COUNT] = {
      {load_as<int8_t>, store_as<int8_t>, 127, 0},
      {load_as<uint8_t>, store_as<uint8_t>, 255, 0},
      {load_as<int32_t>, store_as<int32_t>, 2147483647.0, 0},
      {load_as<uint32_t>, store_as<uint32_t>, 4294967295.0, 0},
      {load_as<int64_t>, store_as<int64_t>, 9007199254740992.0, 0},
      {load_as<uint64_t>, store_as<uint64_t>, 9007199254740992.0, 0},
      {load_half, store_half, 2048, 1.0 / 1024},
      {load_bfloat16, store_bfloat16, 256, 1.0 / 128},
      {load_as<float>, store_as<float>, 16777216.0, 1.0 / 8388608},
      {load_as<double>, store_as<double>, 9007199254740992.0, 1.0 / 4503599627370496.0},
  };
  return kCodecs[dtype];
}

// The largest input value such that nranks of them still sum exactly.
int largest_value(ddl_datatype_t dtype, int nranks) {
  double limit = codec(dtype).largest_exact_sum / nranks;
  return limit >= 3 ? 3 : (limit >= 1 ? static_cast<int>(limit) : 1);
}

// Input element `index` (in the collective's global numbering) of rank `rank`.
double input_value(const CheckShape &shape, int rank, uint64_t index) {
  if (collective_reduces(shape.collective) && shape.op == DDL_PROD) {
    return (index + static_cast<uint64_t>(rank)) % 4 == 0 ? 2 : 1;
  }
  // A cheap integer hash, so that misplaced blocks and shifted offsets show up.
  uint64_t h = (index + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(rank) + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<double>(h %
                             static_cast<uint64_t>(largest_value(shape.dtype, shape.nranks) + 1));
}

// The exact result of reducing element `index` over ranks 0..ranks-1 (all by default),
// rounded to the datatype.
double reduced_value(const CheckShape &shape, uint64_t index, int ranks = 0) {
  if (ranks == 0) ranks = shape.nranks;
  double acc = input_value(shape, 0, index);
  for (int r = 1; r < ranks; ++r) {
    double v = input_value(shape, r, index);
    switch (shape.op) {
      case DDL_PROD:
        acc *= v;
        break;
      case DDL_MIN:
        acc = v < acc ? v : acc;
        break;
      case DDL_MAX:
        acc = v > acc ? v : acc;
        break;
      default:  // sum, avg
        acc += v;
    }
  }
  if (shape.op == DDL_AVG) {
    acc = codec(shape.dtype).epsilon == 0 ? std::floor(acc / shape.nranks) : acc / shape.nranks;
  }
  return acc;
}

bool matches(const CheckShape &shape, double expected, double got) {
  if (got == expected) return true;
  double epsilon = codec(shape.dtype).epsilon;
  if (shape.op != DDL_AVG || epsilon == 0 || !collective_reduces(shape.collective)) return false;
  // avg on floats: the exact quotient, rounded once to the type, plus the library's rounding.
  return std::fabs(got - expected) <= 2 * epsilon * std::fabs(expected);
}

}  // namespace

size_t send_elements(const CheckShape &shape) {
  const Collective c = shape.collective;
  const bool all =
      c == Collective::kReduceScatter || c == Collective::kAlltoall || c == Collective::kScatter;
  return all ? shape.count * static_cast<size_t>(shape.nranks) : shape.count;
}

size_t recv_elements(const CheckShape &shape) {
  const Collective c = shape.collective;
  const bool all =
      c == Collective::kAllgather || c == Collective::kAlltoall || c == Collective::kGather;
  return all ? shape.count * static_cast<size_t>(shape.nranks) : shape.count;
}

void prepare_check(const CheckShape &shape, void *send, void *recv) {
  // 0xFF bytes: NaN in the float types, -1 / max in the integers: never a correct result.
  std::memset(recv, 0xFF, recv_elements(shape) * ddl::datatype_size(shape.dtype));
  const TypeCodec &types = codec(shape.dtype);
  size_t n = send_elements(shape);
  switch (shape.collective) {
    case Collective::kBroadcast:
      if (shape.rank == shape.root) {
        for (size_t i = 0; i < n; ++i) types.store(send, i, input_value(shape, shape.root, i));
      }
      break;
    case Collective::kScatter:
      if (shape.rank == shape.root) {
        for (size_t i = 0; i < n; ++i) types.store(send, i, input_value(shape, shape.root, i));
      }
      break;
    case Collective::kAllgather:
    case Collective::kGather: {
      uint64_t first = static_cast<uint64_t>(shape.rank) * shape.count;
      for (size_t i = 0; i < n; ++i)
        types.store(send, i, input_value(shape, shape.rank, first + i));
      break;
    }
    default:  // allreduce, reduce_scatter, reduce, alltoall, sendrecv: numbered from 0
      for (size_t i = 0; i < n; ++i) types.store(send, i, input_value(shape, shape.rank, i));
  }
}

uint64_t count_wrong(const CheckShape &shape, const void *recv) {
  const TypeCodec &types = codec(shape.dtype);
  size_t n = recv_elements(shape);
  uint64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    double expected = 0;
    switch (shape.collective) {
      case Collective::kBroadcast:
        expected = input_value(shape, shape.root, i);
        break;
      case Collective::kAllgather:
        expected = input_value(shape, static_cast<int>(i / shape.count), i);
        break;
      case Collective::kReduceScatter:
        expected = reduced_value(shape, static_cast<uint64_t>(shape.rank) * shape.count + i);
        break;
      case Collective::kAllreduce:
        expected = reduced_value(shape, i);
        break;
      case Collective::kReduce:
        if (shape.rank != shape.root) return 0;  // only the root's buffer is written
        expected = reduced_value(shape, i);
        break;
      case Collective::kScan:
        expected = reduced_value(shape, i, shape.rank + 1);
        break;
      case Collective::kExscan:
        if (shape.rank == 0) return 0;  // rank 0's buffer is not written
        expected = reduced_value(shape, i, shape.rank);
        break;
      case Collective::kGather:
        if (shape.rank != shape.root) return 0;
        expected = input_value(shape, static_cast<int>(i / shape.count), i);
        break;
      case Collective::kScatter:
        expected =
            input_value(shape, shape.root, static_cast<uint64_t>(shape.rank) * shape.count + i);
        break;
      case Collective::kAlltoall:  // block j came from rank j, which sent its block `rank`
        expected = input_value(shape, static_cast<int>(i / shape.count),
                               static_cast<uint64_t>(shape.rank) * shape.count + i % shape.count);
        break;
      case Collective::kSendRecv:  // from the previous rank around the ring
        expected = input_value(shape, (shape.rank + shape.nranks - 1) % shape.nranks, i);
        break;
      case Collective::kBarrier:  // no elements: the loop does not run
        break;
    }
    // Round the expectation the way storing it in the datatype would.
    alignas(8) unsigned char scratch[8];
    types.store(scratch, 0, expected);
    double representable = types.load(scratch, 0);
    if (!matches(shape, representable, types.load(recv, i))) ++wrong;
  }
  return wrong;
}

uint16_t float_to_half(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t magnitude = f & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (magnitude > 0x7F800000u ? 0x200u : 0));
  }
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow
  if (magnitude < 0x38800000u) {  // a half subnormal (or zero)
    // Scaled by 2^24, one unit is the smallest half subnormal; nearbyint rounds to even.
    float scaled = std::fabs(value) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float half_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  float value;
  if (exponent == 0) {
    value = static_cast<float>(mantissa) / 16777216.0f;  // subnormal: mantissa * 2^-24
    return sign ? -value : value;
  }
  uint32_t f = exponent == 0x1F ? (sign | 0x7F800000u | (mantissa << 13))
                                : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  std::memcpy(&value, &f, sizeof(value));
  return value;
}

uint16_t float_to_bfloat16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  f += 0x7FFFu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(f >> 16);
}

float bfloat16_to_float(uint16_t bits) {
  uint32_t f = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &f, sizeof(value));
  return value;
}

}  // namespace ddl_perf

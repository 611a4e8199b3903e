// What the device tests that check collectives' results share (test_device_collectives.cc,
// test_device_counts.cc): the stand-in driver's run options, and poisoned outputs.
#pragma once

#include <stdlib.h>

#include <cstring>

#include "harness.h"
#include "typed_values.h"

namespace ddltest {

// What an output holds before the call: an element the call must not write still reads so.
constexpr double kPoison = -77;

inline bool contains(const char *text, const char *needle) {
  return std::strstr(text, needle) != nullptr;
}

// Every rank loads the stand-in driver (FAKE_CUDA), stages through `stage_bytes`-byte chunks
// (nullptr: ddl's default) and, with delay_us, makes its copies that slow.
inline RunOptions with_fake(const char *stage_bytes, const char *delay_us = nullptr) {
  RunOptions options;
  options.before_init = [stage_bytes, delay_us](int) {
    setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
    if (stage_bytes) setenv("DDL_CUDA_STAGE_BYTES", stage_bytes, 1);
    if (delay_us) setenv("FAKE_CUDA_DELAY_US", delay_us, 1);
  };
  return options;
}

inline void poison(ddl_datatype_t dtype, void *buf, size_t count) {
  for (size_t i = 0; i < count; ++i) store_value(dtype, buf, i, kPoison);
}

// kPoison as the type holds it (unsigned types wrap it), what an untouched element reads.
inline double poisoned(ddl_datatype_t dtype) {
  unsigned char bytes[16];
  poison(dtype, bytes, 1);
  return load_value(dtype, bytes, 0);
}

}  // namespace ddltest

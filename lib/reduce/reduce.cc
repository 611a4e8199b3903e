// Choosing an implementation, and the entry points that call through it.
//
// The choice is made once, on the first call, and kept in one atomic pointer to a table of
// function pointers: a reduce() call costs two bounds checks, one load and one indirect call,
// whatever the count. CPU features come from __builtin_cpu_supports, which also checks that
// the OS saves the wider registers (XCR0), so a VM or kernel without AVX-512 state support
// gets the AVX2 code.
#include "lib/reduce/reduce.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/reduce/convert.h"
#include "lib/reduce/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ddl {
namespace {

using reduce_detail::KernelTable;

enum Isa { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kIsaCount = 3 };
const char *const kIsaNames[kIsaCount] = {"portable", "avx2", "avx512"};

const KernelTable *table_of(int isa) {
  switch (isa) {
    case kPortable:
      return reduce_detail::portable_table();
    case kAvx2:
      return reduce_detail::avx2_table();
    case kAvx512:
      return reduce_detail::avx512_table();
    default:
      return nullptr;
  }
}

bool cpu_has(int isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();  // in case we run before the constructors that would have done it
  // F16C straight from CPUID (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does
  // not know "f16c". The avx2 test already covers the OS saving the ymm registers.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (isa) {
    case kPortable:
      return true;
    case kAvx2:
      return avx2;
    case kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    default:
      return false;
  }
#else
  return isa == kPortable;
#endif
}

bool isa_supported(int isa) {
  return table_of(isa) != nullptr && cpu_has(isa);
}

int isa_from_name(const char *name) {
  if (name == nullptr) return -1;
  for (int i = 0; i < kIsaCount; ++i)
    if (std::strcmp(name, kIsaNames[i]) == 0) return i;
  return -1;
}

// The best ISA this build and CPU run, lowered by DDL_REDUCE_ISA if that asks.
const KernelTable *choose_default() {
  int best = kPortable;
  for (int isa = kIsaCount - 1; isa > kPortable; --isa) {
    if (isa_supported(isa)) {
      best = isa;
      break;
    }
  }
  const std::string env = env_string("DDL_REDUCE_ISA");
  if (!env.empty()) {
    const int want = isa_from_name(env.c_str());
    if (want < 0) {
      DDL_WARN("DDL_REDUCE_ISA=%s is not portable, avx2 or avx512; using %s", env.c_str(),
               kIsaNames[best]);
    } else if (!isa_supported(want)) {
      DDL_WARN("DDL_REDUCE_ISA=%s: this CPU or build cannot run it; using %s", env.c_str(),
               kIsaNames[best]);
    } else {
      best = want;  // lower than (or equal to) the best one: always allowed
    }
  }
  DDL_DEBUG("reduction kernels: %s", kIsaNames[best]);
  return table_of(best);
}

std::atomic<const KernelTable *> g_table{nullptr};

inline const KernelTable *active_table() {
  const KernelTable *t = g_table.load(std::memory_order_acquire);
  if (__builtin_expect(t == nullptr, 0)) {
    // Racing first calls compute the same answer; whichever store lands is fine.
    t = choose_default();
    g_table.store(t, std::memory_order_release);
  }
  return t;
}

// A bad dtype/op/divisor here means a ddl bug (the C API checks user input first). The
// interface cannot return an error, and carrying on would produce wrong sums silently.
[[noreturn]] void bad_call(const char *fn, int dtype, int op, int divisor) {
  DDL_LOG(LogLevel::kError, "internal error: %s called with dtype %d, op %d, divisor %d", fn, dtype,
          op, divisor);
  std::abort();
}

}  // namespace

void reduce(ddl_datatype_t dtype, ddl_op_t op, void *dst, const void *a, const void *b,
            size_t count, int avg_divisor) {
  if (!valid_datatype(dtype) || !valid_op(op) || (op == DDL_AVG && avg_divisor < 1))
    bad_call("ddl::reduce", dtype, op, avg_divisor);
  if (count == 0) return;
  active_table()->reduce[dtype][op](dst, a, b, count, avg_divisor);
}

void scale_average(ddl_datatype_t dtype, void *dst, const void *src, size_t count, int divisor) {
  if (!valid_datatype(dtype) || divisor < 1)
    bad_call("ddl::scale_average", dtype, DDL_AVG, divisor);
  if (count == 0) return;
  active_table()->scale[dtype](dst, src, count, divisor);
}

float half_to_float(uint16_t h) {
  return reduce_detail::half_to_f32(h);
}
uint16_t float_to_half(float f) {
  return reduce_detail::f32_to_half(f);
}
float bfloat16_to_float(uint16_t b) {
  return reduce_detail::bf16_to_f32(b);
}
uint16_t float_to_bfloat16(float f) {
  return reduce_detail::f32_to_bf16(f);
}

const char *reduce_isa() {
  return active_table()->name;
}

bool reduce_isa_supported(const char *isa) {
  const int i = isa_from_name(isa);
  return i >= 0 && isa_supported(i);
}

bool set_reduce_isa(const char *isa) {
  if (isa == nullptr) {
    g_table.store(choose_default(), std::memory_order_release);
    return true;
  }
  const int i = isa_from_name(isa);
  if (i < 0 || !isa_supported(i)) return false;
  g_table.store(table_of(i), std::memory_order_release);
  return true;
}

}  // namespace ddl

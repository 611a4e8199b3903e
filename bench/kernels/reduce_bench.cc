// reduce_bench: throughput of ddl::reduce() per datatype x op x ISA, beside memcpy on the
// same buffers, for a size that fits in L2 and one that does not.
//
//   reduce_bench [--quick] [--sizes 256K,64M] [--reps N] [--isa NAME] [--dtype NAME]
//                [--op NAME] [--inplace] [--divisor N] [--wall]
//
// Convention (printed with the table): GB/s = 3 x buffer bytes / time, i.e. a and b read
// plus dst written, 1 GB = 1e9 bytes; memcpy GB/s = 2 x buffer bytes / time (read + write).
// "buffer" is the size of each of a, b and dst. Each sample repeats the call until it has
// run for a minimum time; the table shows the median sample. Every result is compared with
// the portable implementation's (the run fails on a mismatch), so --quick doubles as a
// smoke test of every kernel on this CPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <time.h>

#include "lib/common/datatype.h"
#include "lib/common/params.h"
#include "lib/reduce/reduce.h"

using namespace ddl;

namespace {

bool g_wall_clock = false;  // --wall

struct Options {
  std::vector<uint64_t> sizes = {256 << 10, 64 << 20};
  int reps = 7;
  double min_sample_s = 2e-3;
  std::string isa, dtype, op;
  bool in_place = false;
  int divisor = 4;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(
      stderr,
      "reduce_bench: %s\n"
      "usage: reduce_bench [--quick] [--sizes 256K,64M] [--reps N] [--isa portable|avx2|avx512]\n"
      "                    [--dtype NAME] [--op sum|prod|min|max|avg] [--inplace] [--divisor N] "
      "[--wall]\n",
      why);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--quick") {
      o.sizes = {32 << 10, 1 << 20};
      o.reps = 3;
      o.min_sample_s = 0;
    } else if (arg == "--sizes") {
      o.sizes.clear();
      std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        uint64_t bytes = 0;
        if (!parse_bytes(list.substr(start, comma - start), &bytes) || bytes == 0)
          usage("bad --sizes");
        o.sizes.push_back(bytes);
        start = comma + 1;
      }
    } else if (arg == "--reps") {
      int64_t n = 0;
      if (!parse_int(value(), 1, 1000, &n)) usage("bad --reps");
      o.reps = static_cast<int>(n);
    } else if (arg == "--divisor") {
      int64_t n = 0;
      if (!parse_int(value(), 1, 1 << 20, &n)) usage("bad --divisor");
      o.divisor = static_cast<int>(n);
    } else if (arg == "--isa") {
      o.isa = value();
    } else if (arg == "--dtype") {
      o.dtype = value();
    } else if (arg == "--op") {
      o.op = value();
    } else if (arg == "--inplace") {
      o.in_place = true;
    } else if (arg == "--wall") {
      g_wall_clock = true;
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  return o;
}

// Thread CPU time by default: on a shared machine a preempted sample would otherwise count
// another process's time slice. The kernel is single-threaded and does not sleep, so on an
// idle machine both clocks agree (memory stalls count as CPU time). --wall for wall clock.
double now_s() {
  timespec t;
  clock_gettime(g_wall_clock ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Median seconds per call of fn over `reps` samples; a sample repeats fn until min_s passed.
// `before` runs outside the timing, before every call (in-place runs restore dst with it).
template <class Fn, class Before>
double time_per_call(const Options &o, Fn fn, Before before) {
  before();
  fn();  // warm up: page faults, caches, first-use dispatch
  std::vector<double> samples;
  for (int r = 0; r < o.reps; ++r) {
    double spent = 0;
    long calls = 0;
    do {
      before();
      const double t0 = now_s();
      fn();
      spent += now_s() - t0;
      ++calls;
    } while (spent < o.min_sample_s);
    samples.push_back(spent / calls);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// Benign inputs: floats in [0.5, 2) (no NaN, so results compare bytewise; no overflow or
// subnormals, whose microcode assists would measure something else); integers random.
void fill(ddl_datatype_t dt, uint8_t *p, size_t count, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < count; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = static_cast<uint32_t>(x >> 32);
    const float f = 0.5f + 1.5f * static_cast<float>(r >> 8) / 16777216.0f;
    switch (dt) {
      case DDL_FLOAT16: {
        const uint16_t h = float_to_half(f);
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      case DDL_BFLOAT16: {
        const uint16_t h = float_to_bfloat16(f);
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      case DDL_FLOAT32:
        std::memcpy(p + 4 * i, &f, 4);
        break;
      case DDL_FLOAT64: {
        const double d = f;
        std::memcpy(p + 8 * i, &d, 8);
        break;
      }
      default: {
        const size_t es = datatype_size(dt);
        const uint64_t v = x ^ (x >> 29);
        std::memcpy(p + es * i, &v, es);
      }
    }
  }
}

uint8_t *alloc(size_t bytes) {
  void *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    std::fprintf(stderr, "reduce_bench: out of memory (%zu bytes)\n", bytes);
    std::exit(1);
  }
  std::memset(p, 0, bytes);  // fault the pages in before any timing
  return static_cast<uint8_t *>(p);
}

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lluM", (unsigned long long)(bytes >> 20));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%lluK", (unsigned long long)(bytes >> 10));
  else
    std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)bytes);
  return buf;
}

}  // namespace

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  std::vector<const char *> isas;
  for (const char *isa : {"portable", "avx2", "avx512"})
    if (reduce_isa_supported(isa) && (o.isa.empty() || o.isa == isa)) isas.push_back(isa);
  if (isas.empty()) usage("no such ISA on this CPU/build");
  std::vector<ddl_datatype_t> dtypes;
  for (int t = 0; t < DDL_DATATYPE_COUNT; ++t) {
    ddl_datatype_t dt = static_cast<ddl_datatype_t>(t), want;
    if (o.dtype.empty() || (datatype_from_name(o.dtype.c_str(), &want) && want == dt))
      dtypes.push_back(dt);
  }
  std::vector<ddl_op_t> ops;
  for (int k = 0; k < DDL_OP_COUNT; ++k) {
    ddl_op_t op = static_cast<ddl_op_t>(k), want;
    if (o.op.empty() || (op_from_name(o.op.c_str(), &want) && want == op)) ops.push_back(op);
  }
  if (dtypes.empty() || ops.empty()) usage("no such datatype or op");

  const uint64_t max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  uint8_t *a = alloc(max_bytes), *b = alloc(max_bytes), *d = alloc(max_bytes);
  uint8_t *ref = alloc(max_bytes), *init = o.in_place ? alloc(max_bytes) : nullptr;

  std::printf("# reduce_bench: ddl::reduce() throughput, %s; default ISA here: %s\n",
              o.in_place ? "in place (dst == a)" : "out of place (dst, a, b distinct)",
              reduce_isa());
  std::printf(
      "# GB/s = 3 x buffer bytes (read a + read b + write dst) / time; memcpy GB/s = 2 x buffer\n"
      "# bytes (read + write) / time; 1 GB = 1e9 B; buffer = bytes of each of a, b, dst.\n"
      "# median of %d samples%s, %s; avg divides by %d.\n",
      o.reps, o.min_sample_s > 0 ? " of >= 2 ms each" : " of one call each",
      g_wall_clock ? "wall clock" : "thread CPU time", o.divisor);
  std::printf("%8s  %-9s %-5s", "buffer", "dtype", "op");
  for (const char *isa : isas) std::printf(" %9s", isa);
  std::printf(" %9s\n", "memcpy");

  int failures = 0;
  for (uint64_t size : o.sizes) {
    const double memcpy_s = time_per_call(
        o, [&] { std::memcpy(d, a, size); }, [] {});
    const double memcpy_gbs = 2.0 * static_cast<double>(size) / memcpy_s / 1e9;
    for (ddl_datatype_t dt : dtypes) {
      const size_t es = datatype_size(dt), count = size / es, bytes = count * es;
      fill(dt, a, count, 1);
      fill(dt, b, count, 2);
      if (o.in_place) std::memcpy(init, a, bytes);
      for (ddl_op_t op : ops) {
        std::printf("%8s  %-9s %-5s", human(size).c_str(), datatype_name(dt), op_name(op));
        // The portable result, to check every ISA against.
        if (!o.in_place) {
          set_reduce_isa("portable");
          reduce(dt, op, ref, a, b, count, o.divisor);
        }
        for (const char *isa : isas) {
          set_reduce_isa(isa);
          uint8_t *dst = o.in_place ? a : d;
          const double s = time_per_call(
              o, [&] { reduce(dt, op, dst, a, b, count, o.divisor); },
              [&] {
                if (o.in_place) std::memcpy(a, init, bytes);
              });
          std::printf(" %9.2f", 3.0 * static_cast<double>(bytes) / s / 1e9);
          std::fflush(stdout);
          if (!o.in_place && std::memcmp(d, ref, bytes) != 0) {
            std::fprintf(stderr, "\nreduce_bench: %s %s %s differs from portable\n", isa,
                         datatype_name(dt), op_name(op));
            ++failures;
          }
        }
        std::printf(" %9.2f\n", memcpy_gbs);
      }
      if (o.in_place) std::memcpy(a, init, bytes);
    }
  }
  set_reduce_isa(nullptr);
  std::free(a);
  std::free(b);
  std::free(d);
  std::free(ref);
  std::free(init);
  if (failures) {
    std::fprintf(stderr, "reduce_bench: %d mismatches\n", failures);
    return 1;
  }
  return 0;
}

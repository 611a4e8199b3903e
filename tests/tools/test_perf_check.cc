// ddl_perf's building blocks in process: option parsing, sizes, bus factors, the table's
// columns, the 16-bit float conversions, and that check mode's expectations are exact for
// every datatype, op and collective (a reference "library" computed here must get 0 wrong,
// and one corrupted element must count as 1 wrong).
#include <criterion/criterion.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lib/common/datatype.h"
#include "perf_check.h"
#include "perf_driver.h"
#include "perf_options.h"
#include "perf_report.h"

using namespace ddl_perf;

namespace {

ParseOutcome parse(std::vector<std::string> args, PerfOptions *options, std::string *error) {
  args.insert(args.begin(), "ddl_perf");
  std::vector<char *> argv;
  for (std::string &arg : args) argv.push_back(&arg[0]);
  argv.push_back(nullptr);
  return parse_perf_options(static_cast<int>(args.size()), argv.data(), options, error);
}

double load(const void *buffer, size_t i, ddl_datatype_t dtype) {
  switch (dtype) {
    case DDL_INT8:
      return static_cast<const int8_t *>(buffer)[i];
    case DDL_UINT8:
      return static_cast<const uint8_t *>(buffer)[i];
    case DDL_INT32:
      return static_cast<const int32_t *>(buffer)[i];
    case DDL_UINT32:
      return static_cast<const uint32_t *>(buffer)[i];
    case DDL_INT64:
      return static_cast<double>(static_cast<const int64_t *>(buffer)[i]);
    case DDL_UINT64:
      return static_cast<double>(static_cast<const uint64_t *>(buffer)[i]);
    case DDL_FLOAT16:
      return half_to_float(static_cast<const uint16_t *>(buffer)[i]);
    case DDL_BFLOAT16:
      return bfloat16_to_float(static_cast<const uint16_t *>(buffer)[i]);
    case DDL_FLOAT32:
      return static_cast<const float *>(buffer)[i];
    default:
      return static_cast<const double *>(buffer)[i];
  }
}

void store(void *buffer, size_t i, ddl_datatype_t dtype, double v) {
  switch (dtype) {
    case DDL_INT8:
      static_cast<int8_t *>(buffer)[i] = static_cast<int8_t>(v);
      break;
    case DDL_UINT8:
      static_cast<uint8_t *>(buffer)[i] = static_cast<uint8_t>(v);
      break;
    case DDL_INT32:
      static_cast<int32_t *>(buffer)[i] = static_cast<int32_t>(v);
      break;
    case DDL_UINT32:
      static_cast<uint32_t *>(buffer)[i] = static_cast<uint32_t>(v);
      break;
    case DDL_INT64:
      static_cast<int64_t *>(buffer)[i] = static_cast<int64_t>(v);
      break;
    case DDL_UINT64:
      static_cast<uint64_t *>(buffer)[i] = static_cast<uint64_t>(v);
      break;
    case DDL_FLOAT16:
      static_cast<uint16_t *>(buffer)[i] = float_to_half(static_cast<float>(v));
      break;
    case DDL_BFLOAT16:
      static_cast<uint16_t *>(buffer)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DDL_FLOAT32:
      static_cast<float *>(buffer)[i] = static_cast<float>(v);
      break;
    default:
      static_cast<double *>(buffer)[i] = v;
  }
}

// A reference collective the way the library is specified: reduce rank by rank in order,
// in float32 for the 16-bit types (rounded at every step), avg = sum / n.
void reference(Collective collective, ddl_datatype_t dtype, ddl_op_t op, int nranks, int root,
               size_t count, std::vector<std::vector<unsigned char>> &send, int rank,
               std::vector<unsigned char> *recv) {
  const CheckShape shape{collective, dtype, op, rank, nranks, root, count};
  const size_t n = recv_elements(shape);
  const bool rooted_result = collective == Collective::kReduce || collective == Collective::kGather;
  if (rooted_result && rank != root) return;                   // nothing is written off the root
  if (collective == Collective::kExscan && rank == 0) return;  // nor on an exscan's rank 0
  // The ranks a reduction covers: 0..rank for a scan, 0..rank-1 for an exscan, else all.
  const int reduced = collective == Collective::kScan     ? rank + 1
                      : collective == Collective::kExscan ? rank
                                                          : nranks;
  for (size_t i = 0; i < n; ++i) {
    double value = 0;
    if (collective == Collective::kBroadcast) {
      value = load(send[root].data(), i, dtype);
    } else if (collective == Collective::kAllgather || collective == Collective::kGather) {
      value = load(send[i / count].data(), i % count, dtype);
    } else if (collective == Collective::kAlltoall) {
      value = load(send[i / count].data(), rank * count + i % count, dtype);
    } else if (collective == Collective::kScatter) {
      value = load(send[root].data(), rank * count + i, dtype);
    } else if (collective == Collective::kSendRecv) {
      value = load(send[(rank + nranks - 1) % nranks].data(), i, dtype);
    } else {
      size_t at = collective == Collective::kReduceScatter ? rank * count + i : i;
      value = load(send[0].data(), at, dtype);
      for (int r = 1; r < reduced; ++r) {
        double v = load(send[r].data(), at, dtype);
        value = op == DDL_PROD  ? value * v
                : op == DDL_MIN ? std::min(value, v)
                : op == DDL_MAX ? std::max(value, v)
                                : value + v;
        alignas(8) unsigned char step[8];
        store(step, 0, dtype, value);  // round once per step
        value = load(step, 0, dtype);
      }
      if (op == DDL_AVG) {
        bool integer = dtype <= DDL_UINT64;
        value = integer ? std::floor(value / nranks) : value / nranks;
      }
    }
    store(recv->data(), i, dtype, value);
  }
}

}  // namespace

Test(perf_options, nccl_flags) {
  PerfOptions o;
  std::string error;
  cr_assert_eq(parse({"-b", "8", "-e", "1M",   "-f", "4",   "-n", "7",         "-w", "2",
                      "-c", "0", "-d", "half", "-o", "max", "-C", "allgather", "-J", "/tmp/x.json"},
                     &o, &error),
               ParseOutcome::kRun, "%s", error.c_str());
  cr_assert_eq(o.min_bytes, 8u);
  cr_assert_eq(o.max_bytes, 1u << 20);
  cr_assert_eq(o.step_factor, 4.0);
  cr_assert_eq(o.iters, 7);
  cr_assert_eq(o.warmup_iters, 2);
  cr_assert(!o.check);
  cr_assert(o.datatypes == std::vector<ddl_datatype_t>{DDL_FLOAT16});
  cr_assert(o.ops == std::vector<ddl_op_t>{DDL_MAX});
  cr_assert(o.collective == Collective::kAllgather);
  cr_assert_eq(o.json_path, std::string("/tmp/x.json"));

  PerfOptions all;
  cr_assert_eq(parse({"-d", "all", "-o", "all", "-d", "bfloat16"}, &all, &error),
               ParseOutcome::kRun);
  cr_assert(all.datatypes == std::vector<ddl_datatype_t>{DDL_BFLOAT16});
  cr_assert_eq(all.ops.size(), static_cast<size_t>(DDL_OP_COUNT));
  cr_assert_eq(parse({"--help"}, &all, &error), ParseOutcome::kHelp);
}

Test(perf_options, errors_say_what_is_wrong) {
  struct Case {
    std::vector<std::string> args;
    const char *message;
  };
  const Case cases[] = {
      {{"-b", "12Q"}, "-b wants a size in bytes"},
      {{"-e", "0"}, "-e wants a size in bytes"},
      {{"-b", "1M", "-e", "1K"}, "is larger than -e"},
      {{"-f", "1"}, "-f wants a step factor greater than 1"},
      {{"-n", "0"}, "-n wants a number of iterations (at least 1)"},
      {{"-c", "2"}, "-c wants 0 or 1"},
      {{"-d", "float8"}, "unknown datatype 'float8'"},
      {{"-o", "xor"}, "unknown op 'xor'"},
      {{"-C", "alltoallw"}, "unknown collective 'alltoallw'"},
      {{"-z"}, "unknown option -z"},
      {{"--bogus"}, "unknown option --bogus"},
      {{"-b"}, "option -b needs a value"},
      {{"extra"}, "unexpected argument 'extra'"},
  };
  for (const Case &c : cases) {
    PerfOptions o;
    std::string error;
    cr_assert_eq(parse(c.args, &o, &error), ParseOutcome::kError, "for %s", c.message);
    cr_assert(error.find(c.message) != std::string::npos, "want '%s', got '%s'", c.message,
              error.c_str());
  }
}

Test(perf_options, sizes_and_bus_factors) {
  PerfOptions o;
  o.min_bytes = 8;
  o.max_bytes = 64;
  cr_assert(perf_sizes(o) == std::vector<uint64_t>({8, 16, 32, 64}));
  o.min_bytes = 1024;
  o.max_bytes = 4096;
  o.step_bytes = 1024;
  cr_assert(perf_sizes(o) == std::vector<uint64_t>({1024, 2048, 3072, 4096}));
  cr_assert_float_eq(bus_factor(Collective::kAllreduce, 4), 1.5, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kAllgather, 4), 0.75, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kReduceScatter, 2), 0.5, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kBroadcast, 8), 1.0, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kAlltoall, 4), 0.75, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kGather, 2), 0.5, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kScatter, 2), 0.5, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kReduce, 8), 1.0, 1e-12);
  cr_assert_float_eq(bus_factor(Collective::kSendRecv, 8), 1.0, 1e-12);
}

Test(perf_report, columns_are_nccl_tests) {
  PerfOptions o;
  PerfReport report(o, "ddl_perf", "ddl 0.1.0", 2);
  char *text = nullptr;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  report.print_header(out, {});
  SizeResult row;
  row.bytes = 8;
  row.count = 2;
  row.out_of_place = {true, 10.36, 0.0, 0.0, 0};
  row.in_place = {true, 12345.6, 0.0, 0.0, -1};
  report.add_row(out, row);
  report.print_footer(out);
  std::fclose(out);
  std::string s(text);
  free(text);
  const char *columns =
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
      "time   algbw   busbw #wrong\n";
  cr_assert(s.find(columns) != std::string::npos, "%s", s.c_str());
  const char *line =
      "           8             2     float     sum      -1    10.36    0.00    0.00      0    "
      "12346    0.00    0.00    N/A\n";
  cr_assert(s.find(line) != std::string::npos, "%s", s.c_str());
  // The footer's figures say what they count and in which unit; the header has a legend.
  cr_assert(s.find("# Out of bounds values : 0 OK (wrong elements, all sizes and ranks)\n"
                   "# Avg bus bandwidth    : 0 GB/s (mean busbw of every row and mode)\n") !=
                std::string::npos,
            "%s", s.c_str());
  cr_assert(s.find("# legend (as nccl-tests): size = bytes each rank reduces; time in us per "
                   "call") != std::string::npos,
            "%s", s.c_str());
}

namespace {

std::string footer_of(const PerfOptions &o, const std::vector<SizeResult> &rows) {
  PerfReport report(o, "ddl_perf", "ddl 0.1.0", 2);
  for (const SizeResult &row : rows) report.add_row(nullptr, row);
  char *text = nullptr;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  report.print_footer(out);
  std::fclose(out);
  std::string s(text);
  free(text);
  return s;
}

}  // namespace

// No reassuring "0 OK" or "0 GB/s" where nothing stands behind the figures.
Test(perf_report, the_footer_says_n_a_when_nothing_was_checked_or_measured) {
  SizeResult measured;
  measured.out_of_place = {true, 10.0, 1.0, 1.0, -1};  // timed, not checked
  PerfOptions unchecked;
  unchecked.check = false;
  std::string s = footer_of(unchecked, {measured});
  cr_assert(s.find("# Out of bounds values : N/A (not checked: -c 0)\n") != std::string::npos, "%s",
            s.c_str());
  cr_assert(s.find("# Avg bus bandwidth    : 1 GB/s") != std::string::npos, "%s", s.c_str());

  PerfOptions checked;
  s = footer_of(checked, {SizeResult()});  // a row the library refused in both modes
  cr_assert(s.find("# Out of bounds values : N/A (nothing was checked: every row is N/A)\n") !=
                std::string::npos,
            "%s", s.c_str());
  cr_assert(s.find("# Avg bus bandwidth    : N/A (nothing was measured)\n") != std::string::npos,
            "%s", s.c_str());
}

// The legend's busbw factor is the one the table uses, as a formula in n and as a number.
Test(perf_report, legend_names_the_bus_factor_of_each_collective) {
  const Collective all[] = {
      Collective::kAllreduce,     Collective::kBroadcast, Collective::kAllgather,
      Collective::kReduceScatter, Collective::kAlltoall,  Collective::kSendRecv,
      Collective::kReduce,        Collective::kGather,    Collective::kScatter};
  for (Collective c : all) {
    for (int n : {2, 3, 8}) {
      const std::string formula = bus_factor_formula(c);
      const double from_formula = formula == "2(n-1)/n"  ? 2.0 * (n - 1) / n
                                  : formula == "(n-1)/n" ? (n - 1.0) / n
                                  : formula == "1"       ? 1.0
                                                         : -1.0;
      cr_assert_float_eq(from_formula, bus_factor(c, n), 1e-12, "%s: %s", collective_name(c),
                         formula.c_str());
      char number[32];
      std::snprintf(number, sizeof(number), "(= %.3g)", bus_factor(c, n));
      const std::string legend = perf_legend(c, n);
      cr_assert(legend.find("busbw = algbw * " + formula + " " + number + " in GB/s") !=
                    std::string::npos,
                "%s", legend.c_str());
    }
  }
  cr_assert(perf_legend(Collective::kAlltoall, 2).find("size = bytes each rank sends in all") !=
            std::string::npos);
  cr_assert(perf_legend(Collective::kBarrier, 2).find("time in us per barrier") !=
            std::string::npos);
}

namespace {

// Records the count of every call, and each barrier (which starts a timed loop) as SIZE_MAX;
// refuses (as a library that does not support the form) calls of `refuse_from` elements or
// more. Rank 1 of 2, so that nothing is printed.
class RecordingBackend : public CollectiveBackend {
 public:
  int rank() const override { return 1; }
  int nranks() const override { return 2; }
  std::string library() const override { return "recorder"; }
  std::string unsupported(Collective, ddl_datatype_t, ddl_op_t) const override { return ""; }
  bool run(Collective, const void *, void *, size_t count, ddl_datatype_t, ddl_op_t, int) override {
    calls.push_back(count);
    return count < refuse_from;
  }
  void *library_alloc(size_t) override { return nullptr; }
  void library_free(void *) override {}
  void barrier() override { calls.push_back(SIZE_MAX); }
  double max_across_ranks(double value) override { return value; }
  uint64_t sum_across_ranks(uint64_t value) override { return value; }

  std::vector<size_t> calls;
  size_t refuse_from = SIZE_MAX;
};

PerfOptions four_sizes() {
  PerfOptions o;
  o.min_bytes = 8;
  o.max_bytes = 512;
  o.step_factor = 4;  // 8, 32, 128, 512 B: 2, 8, 32, 128 floats
  o.warmup_iters = 2;
  o.iters = 3;
  o.check = false;
  return o;
}

std::string calls_text(const std::vector<size_t> &calls) {
  std::string text;
  for (size_t c : calls) text += c == SIZE_MAX ? "| " : std::to_string(c) + " ";
  return text;
}

}  // namespace

Test(perf_driver, warms_up_at_the_largest_and_smallest_size_then_at_each_size) {
  PerfOptions o = four_sizes();
  RecordingBackend backend;
  cr_assert_eq(run_perf(o, backend, "test"), 0);
  // nccl-tests' warm-up first: -w calls at the largest size, then at the smallest ...
  std::vector<size_t> want = {128, 128, 2, 2};
  // ... then every size, out of place and in place: -w calls, the barrier, -n timed calls.
  for (size_t count : {2, 8, 32, 128}) {
    for (int mode = 0; mode < 2; ++mode) {
      want.insert(want.end(), 2, count);
      want.push_back(SIZE_MAX);
      want.insert(want.end(), 3, count);
    }
  }
  cr_assert(backend.calls == want, "calls: %s", calls_text(backend.calls).c_str());
}

// A form the library refuses is N/A, and not tried again at larger sizes: its error is logged
// a few times, not at every size.
Test(perf_driver, a_refused_form_is_not_tried_again_at_larger_sizes) {
  PerfOptions o = four_sizes();
  RecordingBackend none;
  none.refuse_from = 0;  // device buffers, say: every size refused
  cr_assert_eq(run_perf(o, none, "test"), 0);
  // The warm-up's first call at each end, then the first in-place call; nothing else.
  std::vector<size_t> want = {128, 2, 2};
  cr_assert(none.calls == want, "calls: %s", calls_text(none.calls).c_str());

  RecordingBackend small;
  small.refuse_from = 32;  // too large from 32 elements on
  cr_assert_eq(run_perf(o, small, "test"), 0);
  want = {128, 2, 2};  // the warm-up: refused at the largest size, not at the smallest
  for (size_t count : {2, 8}) {
    for (int mode = 0; mode < 2; ++mode) {
      want.insert(want.end(), 2, count);
      want.push_back(SIZE_MAX);
      want.insert(want.end(), 3, count);
    }
  }
  want.insert(want.end(), {32, 32});  // refused once per mode; 128 not tried
  cr_assert(small.calls == want, "calls: %s", calls_text(small.calls).c_str());
}

Test(float16, conversions_round_trip_and_round_to_even) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
    if (!nan) cr_assert_eq(float_to_half(half_to_float(h)), h, "half 0x%04x", bits);
    bool bnan = (h & 0x7F80) == 0x7F80 && (h & 0x7F);
    if (!bnan) cr_assert_eq(float_to_bfloat16(bfloat16_to_float(h)), h, "bf16 0x%04x", bits);
  }
  cr_assert_eq(float_to_half(1.0f), 0x3C00);
  cr_assert_eq(float_to_half(65504.0f), 0x7BFF);
  cr_assert_eq(float_to_half(65520.0f), 0x7C00);                 // rounds up to infinity
  cr_assert_eq(half_to_float(float_to_half(2049.0f)), 2048.0f);  // tie: to even
  cr_assert_eq(half_to_float(float_to_half(2051.0f)), 2052.0f);
  cr_assert_eq(half_to_float(float_to_half(5.9604645e-8f)), 5.9604645e-8f);  // smallest subnormal
  cr_assert(std::isnan(half_to_float(float_to_half(NAN))));
  cr_assert_eq(float_to_bfloat16(1.0f), 0x3F80);
  cr_assert_eq(bfloat16_to_float(float_to_bfloat16(257.0f)), 256.0f);
  cr_assert_eq(bfloat16_to_float(float_to_bfloat16(259.0f)), 260.0f);
}

Test(perf_check, expectations_are_exact_for_every_type_op_and_collective) {
  const Collective collectives[] = {
      Collective::kAllreduce,     Collective::kBroadcast, Collective::kAllgather,
      Collective::kReduceScatter, Collective::kAlltoall,  Collective::kSendRecv,
      Collective::kReduce,        Collective::kGather,    Collective::kScatter,
      Collective::kScan,          Collective::kExscan};
  for (int nranks : {1, 2, 3, 8}) {
    for (Collective collective : collectives) {
      for (int t = 0; t < DDL_DATATYPE_COUNT; ++t) {
        for (int o = 0; o < DDL_OP_COUNT; ++o) {
          auto dtype = static_cast<ddl_datatype_t>(t);
          auto op = static_cast<ddl_op_t>(o);
          const bool scan = collective == Collective::kScan || collective == Collective::kExscan;
          if (scan && op == DDL_AVG) continue;  // not an op of theirs
          const size_t count = 37;              // odd, so that blocks do not line up with anything
          int root = nranks - 1;
          std::vector<std::vector<unsigned char>> send(nranks);
          std::vector<std::vector<unsigned char>> recv(nranks);
          for (int rank = 0; rank < nranks; ++rank) {
            CheckShape shape{collective, dtype, op, rank, nranks, root, count};
            size_t size = ddl::datatype_size(dtype);
            send[rank].resize(send_elements(shape) * size);
            recv[rank].resize(recv_elements(shape) * size);
            // Broadcast is in place: the root's data is in its receive buffer.
            unsigned char *in =
                collective == Collective::kBroadcast ? recv[rank].data() : send[rank].data();
            prepare_check(shape, in, recv[rank].data());
            if (collective == Collective::kBroadcast) send[rank] = recv[rank];
          }
          for (int rank = 0; rank < nranks; ++rank) {
            CheckShape shape{collective, dtype, op, rank, nranks, root, count};
            reference(collective, dtype, op, nranks, root, count, send, rank, &recv[rank]);
            cr_assert_eq(count_wrong(shape, recv[rank].data()), 0u, "%s %s %s, %d ranks, rank %d",
                         collective_name(collective), ddl::datatype_name(dtype), ddl::op_name(op),
                         nranks, rank);
            // One wrong element must be seen (where the rank's buffer holds a result).
            const bool rooted_result =
                collective == Collective::kReduce || collective == Collective::kGather;
            if (rooted_result && rank != root) continue;
            if (collective == Collective::kExscan && rank == 0) continue;
            size_t last = recv_elements(shape) - 1;
            store(recv[rank].data(), last, dtype, load(recv[rank].data(), last, dtype) + 1);
            cr_assert_eq(count_wrong(shape, recv[rank].data()), 1u, "%s %s %s: corruption missed",
                         collective_name(collective), ddl::datatype_name(dtype), ddl::op_name(op));
          }
        }
      }
    }
  }
}

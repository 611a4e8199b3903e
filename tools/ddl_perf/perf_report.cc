#include "perf_report.h"

#include <cerrno>

#include "lib/common/datatype.h"

namespace ddl_perf {
namespace {

// nccl-tests prints fewer decimals as times grow, to keep the column 7 wide.
std::string format_time(double us) {
  char text[32];
  std::snprintf(text, sizeof(text), us >= 10000 ? "%7.0f" : (us >= 100 ? "%7.1f" : "%7.2f"), us);
  return text;
}

void print_mode(FILE *out, const ModeResult &mode) {
  if (!mode.measured) {
    std::fprintf(out, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  std::string wrong = mode.wrong < 0 ? "N/A" : std::to_string(mode.wrong);
  std::fprintf(out, "  %s  %6.2f  %6.2f  %5s", format_time(mode.time_us).c_str(), mode.algbw,
               mode.busbw, wrong.c_str());
}

void json_mode(FILE *out, const char *name, const ModeResult &mode) {
  if (!mode.measured) {
    std::fprintf(out, "\"%s\": null", name);
    return;
  }
  std::fprintf(out, "\"%s\": {\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, ", name,
               mode.time_us, mode.algbw, mode.busbw);
  if (mode.wrong < 0) {
    std::fprintf(out, "\"wrong\": null}");
  } else {
    std::fprintf(out, "\"wrong\": %lld}", static_cast<long long>(mode.wrong));
  }
}

// JSON string contents: the names printed here are plain ASCII, but paths may not be.
std::string json_escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// What the size column counts, for the legend line.
const char *size_meaning(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kScan:
    case Collective::kExscan:
      return "bytes each rank reduces";
    case Collective::kBroadcast:
      return "bytes the root sends";
    case Collective::kAllgather:
      return "bytes each rank gathers (count per rank x ranks)";
    case Collective::kReduceScatter:
      return "bytes each rank reduces (count per rank x ranks)";
    case Collective::kAlltoall:
      return "bytes each rank sends in all";
    case Collective::kGather:
      return "bytes the root gathers (count per rank x ranks)";
    case Collective::kScatter:
      return "bytes the root scatters (count per rank x ranks)";
    case Collective::kSendRecv:
      return "bytes each rank sends";
    case Collective::kBarrier:
      break;
  }
  return "0";
}

}  // namespace

const char *bus_factor_formula(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "2(n-1)/n";
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter:
      return "(n-1)/n";
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
    case Collective::kScan:
    case Collective::kExscan:
      return "1";
    case Collective::kBarrier:
      break;
  }
  return "0";
}

std::string perf_legend(Collective collective, int nranks) {
  if (collective == Collective::kBarrier) {
    return "legend (as nccl-tests): time in us per barrier (mean of -n iterations, slowest "
           "rank); no data: size, algbw and busbw are 0";
  }
  char text[512];
  std::snprintf(text, sizeof(text),
                "legend (as nccl-tests): size = %s; time in us per call (mean of -n iterations, "
                "slowest rank); algbw = size / time and busbw = algbw * %s (= %.3g) in GB/s; "
                "#wrong = wrong elements, all ranks",
                size_meaning(collective), bus_factor_formula(collective),
                bus_factor(collective, nranks));
  return text;
}

double bus_factor(Collective collective, int nranks) {
  double n = nranks;
  switch (collective) {
    case Collective::kAllreduce:
      return 2 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
    case Collective::kScan:
    case Collective::kExscan:
      return 1;
    case Collective::kBarrier:
      return 0;
  }
  return 1;
}

PerfReport::PerfReport(const PerfOptions &options, std::string tool, std::string library,
                       int nranks)
    : options_(options), tool_(std::move(tool)), library_(std::move(library)), nranks_(nranks) {}

void PerfReport::print_header(FILE *out, const std::vector<std::string> &notes) const {
  std::fprintf(out, "# %s: %s, %s, %d ranks\n", tool_.c_str(), collective_name(options_.collective),
               library_.c_str(), nranks_);
  char step[64];
  if (options_.step_bytes) {
    std::snprintf(step, sizeof(step), "%llu(bytes)",
                  static_cast<unsigned long long>(options_.step_bytes));
  } else {
    std::snprintf(step, sizeof(step), "%g(factor)", options_.step_factor);
  }
  std::fprintf(out,
               "# minBytes %llu maxBytes %llu step: %s warmup iters: %d iters: %d "
               "validation: %d\n",
               static_cast<unsigned long long>(options_.min_bytes),
               static_cast<unsigned long long>(options_.max_bytes), step, options_.warmup_iters,
               options_.iters, options_.check ? 1 : 0);
  for (const std::string &note : notes) std::fprintf(out, "# %s\n", note.c_str());
  std::fprintf(out, "# %s\n#\n", perf_legend(options_.collective, nranks_).c_str());
  // The titles sit where nccl-tests puts them, over the 32-character-wide columns of each mode.
  // "#wrong" is one wider than its %5s column: " %6s" keeps the width.
  std::fprintf(out, "#%62s%s%23s%s\n", "", "out-of-place", "", "in-place");
  const char *columns = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n";
  std::fprintf(out, columns, "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
               "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, columns, "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
               "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(out);
}

void PerfReport::add_row(FILE *out, const SizeResult &row) {
  rows_.push_back(row);
  if (!out) return;
  bool reduces = collective_reduces(options_.collective);
  int root = collective_rooted(options_.collective) ? options_.root : -1;
  std::fprintf(out, "%12llu  %12llu  %8s  %6s  %6d", static_cast<unsigned long long>(row.bytes),
               static_cast<unsigned long long>(row.count), nccl_type_name(row.dtype),
               reduces ? ddl::op_name(row.op) : "none", root);
  print_mode(out, row.out_of_place);
  print_mode(out, row.in_place);
  std::fprintf(out, "\n");
  std::fflush(out);
}

uint64_t PerfReport::total_wrong() const {
  uint64_t wrong = 0;
  for (const SizeResult &row : rows_) {
    for (const ModeResult *mode : {&row.out_of_place, &row.in_place}) {
      if (mode->measured && mode->wrong > 0) wrong += static_cast<uint64_t>(mode->wrong);
    }
  }
  return wrong;
}

double PerfReport::average_busbw() const {
  double sum = 0;
  int n = 0;
  for (const SizeResult &row : rows_) {
    for (const ModeResult *mode : {&row.out_of_place, &row.in_place}) {
      if (!mode->measured) continue;
      sum += mode->busbw;
      ++n;
    }
  }
  return n ? sum / n : 0;
}

void PerfReport::print_footer(FILE *out) const {
  // nccl-tests' two lines, with what their figures count and in which unit; N/A where nothing
  // stands behind them (nothing checked, or every row N/A) rather than a reassuring 0.
  size_t measured = 0, checked = 0;
  for (const SizeResult &row : rows_) {
    for (const ModeResult *mode : {&row.out_of_place, &row.in_place}) {
      measured += mode->measured ? 1 : 0;
      checked += mode->measured && mode->wrong >= 0 ? 1 : 0;
    }
  }
  const uint64_t wrong = total_wrong();
  if (!options_.check) {
    std::fprintf(out, "# Out of bounds values : N/A (not checked: -c 0)\n");
  } else if (checked == 0) {
    std::fprintf(out, "# Out of bounds values : N/A (nothing was checked: every row is N/A)\n");
  } else {
    std::fprintf(out, "# Out of bounds values : %llu %s (wrong elements, all sizes and ranks)\n",
                 static_cast<unsigned long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  }
  if (measured == 0) {
    std::fprintf(out, "# Avg bus bandwidth    : N/A (nothing was measured)\n");
  } else {
    std::fprintf(out, "# Avg bus bandwidth    : %g GB/s (mean busbw of every row and mode)\n",
                 average_busbw());
  }
  std::fprintf(out, "#\n");
  std::fflush(out);
}

bool PerfReport::write_json(const std::string &path) const {
  FILE *out = std::fopen(path.c_str(), "w");
  if (!out) return false;
  std::fprintf(out, "{\n  \"tool\": \"%s\",\n  \"library\": \"%s\",\n", json_escape(tool_).c_str(),
               json_escape(library_).c_str());
  std::fprintf(out, "  \"collective\": \"%s\",\n  \"nranks\": %d,\n  \"bus_factor\": %.6f,\n",
               collective_name(options_.collective), nranks_,
               bus_factor(options_.collective, nranks_));
  std::fprintf(out, "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %s,\n", options_.iters,
               options_.warmup_iters, options_.check ? "true" : "false");
  std::fprintf(out, "  \"results\": [");
  for (size_t i = 0; i < rows_.size(); ++i) {
    const SizeResult &row = rows_[i];
    bool reduces = collective_reduces(options_.collective);
    std::fprintf(out,
                 "%s\n    {\"size\": %llu, \"count\": %llu, \"type\": \"%s\", \"redop\": \"%s\", "
                 "\"root\": %d, ",
                 i ? "," : "", static_cast<unsigned long long>(row.bytes),
                 static_cast<unsigned long long>(row.count), ddl::datatype_name(row.dtype),
                 reduces ? ddl::op_name(row.op) : "none",
                 collective_rooted(options_.collective) ? options_.root : -1);
    json_mode(out, "out_of_place", row.out_of_place);
    std::fprintf(out, ", ");
    json_mode(out, "in_place", row.in_place);
    std::fprintf(out, "}");
  }
  std::fprintf(out, "\n  ],\n  \"out_of_bounds\": %llu,\n  \"avg_busbw_gbs\": %.6f\n}\n",
               static_cast<unsigned long long>(total_wrong()), average_busbw());
  bool ok = std::ferror(out) == 0;
  int saved_errno = errno;
  ok = std::fclose(out) == 0 && ok;
  if (!ok && errno == 0) errno = saved_errno;
  return ok;
}

}  // namespace ddl_perf

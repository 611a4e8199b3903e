// nccl-tests' table (and the same results as JSON), shared by ddl_perf and bench/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "perf_options.h"

namespace ddl_perf {

struct ModeResult {
  bool measured = false;  // false: N/A (the library does not support this mode)
  double time_us = 0;
  double algbw = 0;  // GB/s (10^9 bytes)
  double busbw = 0;
  int64_t wrong = -1;  // -1: not checked
};

struct SizeResult {
  uint64_t bytes = 0;
  uint64_t count = 0;  // elements of the whole result
  ddl_datatype_t dtype = DDL_FLOAT32;
  ddl_op_t op = DDL_SUM;
  ModeResult out_of_place;
  ModeResult in_place;
};

// busbw / algbw for `collective` on `nranks` ranks (nccl-tests' doc/PERFORMANCE.md), and the
// same as a formula in n ("2(n-1)/n", "(n-1)/n", "1"; "0" for the barrier).
double bus_factor(Collective collective, int nranks);
const char *bus_factor_formula(Collective collective);

// The header's one-line legend of the columns (without the leading "# "): what size counts
// for this collective, the units, and busbw's factor.
std::string perf_legend(Collective collective, int nranks);

class PerfReport {
 public:
  PerfReport(const PerfOptions &options, std::string tool, std::string library, int nranks);

  // The '#' lines above the table; `notes` are printed as extra '#' lines first.
  void print_header(FILE *out, const std::vector<std::string> &notes) const;
  // Records a row and prints it (when `out` is not null: only rank 0 prints, but every rank
  // keeps the rows, so that every rank knows the exit status).
  void add_row(FILE *out, const SizeResult &row);
  // "# Out of bounds values : N OK|FAILED (...)" (N/A with -c 0) and
  // "# Avg bus bandwidth    : X GB/s (...)".
  void print_footer(FILE *out) const;
  // The options, every row and the footer's numbers as JSON. False (with errno) on failure.
  bool write_json(const std::string &path) const;

  uint64_t total_wrong() const;
  double average_busbw() const;

 private:
  const PerfOptions &options_;
  std::string tool_;
  std::string library_;
  int nranks_;
  std::vector<SizeResult> rows_;
};

}  // namespace ddl_perf

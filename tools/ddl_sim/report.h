// ddl_sim's output: nccl-tests' columns per size with where the time went, and the same as
// JSON in ddl_perf -J's shape (so bench/plot.py draws it beside measured runs).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/ddl_sim/options.h"
#include "tools/ddl_sim/simulator.h"

namespace ddl_sim {

// The slowest tier's bandwidth bound of a call of `bytes` (nccl-tests' size) on the cluster:
// the bytes each host must push through its NICs (at their line rate), or each rank through
// its port into the host, over that rate; 0 when no bound is known for the collective.
double tier_bound_seconds(const Cluster &cluster, ddl::Collective collective, double bytes);

class Report {
 public:
  Report(const Options &options, const Cluster &cluster) : options_(options), cluster_(cluster) {}

  void header(FILE *out) const;
  void row(FILE *out, size_t bytes, size_t count, const SimResult &result);
  bool write_json(const std::string &path) const;

 private:
  struct Row {
    size_t bytes, count;
    SimResult result;
    double bound;
  };
  const Options &options_;
  const Cluster &cluster_;
  std::vector<Row> rows_;
};

}  // namespace ddl_sim

// ddl_sim's command line.
#pragma once

#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "tools/ddl_sim/cluster.h"

namespace ddl_sim {

enum class Mode { kSizes, kCheckModels, kEfficiency, kGoal, kTrace, kDescribe };

struct Options {
  Mode mode = Mode::kSizes;
  Cluster cluster;
  ddl::Collective collective = ddl::Collective::kAllreduce;
  size_t elem_size = 4;
  std::string dtype = "float32";
  size_t min_bytes = 4096, max_bytes = 64u << 20;
  double factor = 2;
  std::string algorithm;  // "": the cost models' choice
  std::string json_path;
  std::string goal_path;
  std::string trace_path;
  // --efficiency: the job, and the host counts to project it on (the cluster's by default).
  double parameters = 25.6e6;
  double compute_seconds = 0.1;
  double bucket_bytes = 25.0 * 1024 * 1024;
  std::vector<int> host_counts;
};

// Parses argv; false with *error set (or with help printed and *error empty for --help).
bool parse_options(int argc, char **argv, Options *options, std::string *error);

// nccl-tests' sizes: the call's bytes -> the count a builder takes, and the bus factor.
size_t count_for_bytes(ddl::Collective collective, size_t bytes, size_t elem_size, int nranks);
double bus_factor(ddl::Collective collective, int nranks);

}  // namespace ddl_sim

// The table of algorithms: names, descriptions and cost models for logs and ddl_perf, and
// the choice of algorithm per call (DDL_ALGO / ddl_perf -a override the models).
#pragma once

#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl {

using ScheduleBuilder = void (*)(const CollectiveArgs &args, Schedule *schedule);
// Predicted seconds for the call (alpha-beta-gamma model).
using CostModel = double (*)(const CollectiveArgs &args);

struct AlgorithmInfo {
  const char *name;
  Collective collective;
  const char *description;
  ScheduleBuilder build;
  CostModel cost;
};

const std::vector<AlgorithmInfo> &algorithm_table();

// Whether `name` is an algorithm of some collective ("" counts: automatic choice).
bool known_algorithm(const std::string &name);
// "ring, rd, rhd, tree, hier, chain, dissemination" for error messages.
std::string algorithm_names();

// The algorithm for args: args.algorithm when it names one for this collective (a name for
// another collective only, like "rd" for a broadcast, falls back to the models), else the
// cheapest by the cost models. `why` gets one line for the logs.
const AlgorithmInfo &choose_algorithm(const CollectiveArgs &args, std::string *why);

// Builds this rank's schedule with the chosen algorithm.
Status build_schedule(const CollectiveArgs &args, Schedule *schedule, std::string *why = nullptr);

}  // namespace ddl

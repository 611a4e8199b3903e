// The table of algorithms: names and descriptions for logs and ddl_perf, and the choice of
// algorithm per collective.
#pragma once

#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl {

using ScheduleBuilder = void (*)(const CollectiveArgs &args, Schedule *schedule);

struct AlgorithmInfo {
  const char *name;
  Collective collective;
  const char *description;
  ScheduleBuilder build;
};

const std::vector<AlgorithmInfo> &algorithm_table();

// Builds this rank's schedule for args with the algorithm chosen for the collective.
// Rejects argument combinations no algorithm can express (e.g. more messages than tags).
Status build_schedule(const CollectiveArgs &args, Schedule *schedule);

}  // namespace ddl

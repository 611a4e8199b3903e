// A schedule prepared for execution: the reverse of its dependencies (who waits for whom)
// and the steps that can start at once. Built once per distinct collective call and cached
// by the communicator, so the hot path does no allocation proportional to the schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/algorithms/schedule.h"

namespace ddl {

struct Plan {
  Schedule schedule;
  std::vector<uint32_t> dependents;        // flattened lists, indexed by dependents_begin
  std::vector<uint32_t> dependents_begin;  // steps.size() + 1 offsets
  std::vector<uint32_t> dep_counts;
  std::vector<uint32_t> initial_ready;
};

void make_plan(Schedule schedule, Plan *plan);

}  // namespace ddl

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
  // Where call signatures can ride on data (see Executor::post_signature): this rank starts
  // with a send to the next rank of the ring; the previous rank starts with a send to this
  // one, so no separate signature message comes from it.
  bool sends_right_at_once = false;
  bool left_sends_at_once = false;
};

// Whether `schedule` starts with a send to `peer` (a step without dependencies).
bool sends_at_once_to(const Schedule &schedule, int peer);

void make_plan(Schedule schedule, Plan *plan);

}  // namespace ddl

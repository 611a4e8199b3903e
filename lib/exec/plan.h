// A schedule prepared for execution: the reverse of its dependencies (who waits for whom)
// and the steps that can start at once. Built once per distinct collective call and cached
// by the communicator, so the hot path does no allocation proportional to the schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"

namespace ddl {

struct AtOnceMessage {
  uint32_t step = 0;
  uint32_t tag = 0;
  size_t count = 0;  // elements
};
constexpr uint32_t kNoStep = ~0u;

struct Plan {
  Schedule schedule;
  std::string why;                         // how its algorithm was chosen, for the log
  std::vector<uint32_t> dependents;        // flattened lists, indexed by dependents_begin
  std::vector<uint32_t> dependents_begin;  // steps.size() + 1 offsets
  std::vector<uint32_t> dep_counts;
  std::vector<uint32_t> initial_ready;
  // Where call signatures and data share messages (see Executor::post_signature): the
  // messages this rank sends to the next rank of the ring at once (steps without
  // dependencies), and those the previous rank sends to this one at once, in the sender's
  // step order. `step` is the sending step here, the receiving step for the previous rank's.
  std::vector<AtOnceMessage> to_right_at_once;
  std::vector<AtOnceMessage> from_left_at_once;
};

// The messages `schedule` sends to `peer` at once, in step order; `step` is the sending step.
std::vector<AtOnceMessage> sent_at_once_to(const Schedule &schedule, int peer);
// The step of `schedule` that receives the message with `tag` from `peer`, or kNoStep.
uint32_t receiving_step(const Schedule &schedule, int peer, uint32_t tag);

void make_plan(Schedule schedule, Plan *plan);

}  // namespace ddl

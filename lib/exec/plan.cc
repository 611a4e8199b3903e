#include "lib/exec/plan.h"

#include <utility>

namespace ddl {

void make_plan(Schedule schedule, Plan *plan) {
  plan->schedule = std::move(schedule);
  const std::vector<Step> &steps = plan->schedule.steps;
  const size_t n = steps.size();
  plan->dep_counts.assign(n, 0);
  plan->dependents_begin.assign(n + 1, 0);
  plan->initial_ready.clear();
  for (size_t i = 0; i < n; ++i) {
    plan->dep_counts[i] = static_cast<uint32_t>(steps[i].deps.size());
    for (uint32_t d : steps[i].deps) ++plan->dependents_begin[d + 1];
    if (steps[i].deps.empty()) plan->initial_ready.push_back(static_cast<uint32_t>(i));
  }
  for (size_t i = 0; i < n; ++i) plan->dependents_begin[i + 1] += plan->dependents_begin[i];
  plan->dependents.assign(plan->dependents_begin[n], 0);
  std::vector<uint32_t> fill(plan->dependents_begin.begin(), plan->dependents_begin.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (uint32_t d : steps[i].deps) plan->dependents[fill[d]++] = static_cast<uint32_t>(i);
}

std::vector<AtOnceMessage> sent_at_once_to(const Schedule &schedule, int peer) {
  std::vector<AtOnceMessage> messages;
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const Step &step = schedule.steps[i];
    if (step.kind == StepKind::kSend && step.peer == peer && step.deps.empty())
      messages.push_back({static_cast<uint32_t>(i), step.tag, step.count});
  }
  return messages;
}

uint32_t receiving_step(const Schedule &schedule, int peer, uint32_t tag) {
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const Step &step = schedule.steps[i];
    if ((step.kind == StepKind::kRecv || step.kind == StepKind::kRecvReduce) && step.peer == peer &&
        step.tag == tag)
      return static_cast<uint32_t>(i);
  }
  return kNoStep;
}

}  // namespace ddl

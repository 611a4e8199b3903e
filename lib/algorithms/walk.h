// The walk the schedule checkers share (the symbolic verifier and the scale check): every
// rank's schedule of one call as one graph, checked for the structure a walk relies on, then
// every step run once, in an order its dependencies and its messages allow. What a step does
// to data is the checker's (a visitor); who waits on whom is the walk's. Part of
// ddl_schedule_tools, beside every_rank.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl {

// Names rank r's step i in errors (the collective, the algorithm, the step).
using StepName = std::function<std::string(int rank, uint32_t step)>;

// Who waits on whom in one rank's schedule, compressed: step i's dependents are
// dependents[first[i]] .. dependents[first[i + 1]]. Dependencies must point backwards.
struct DependentRows {
  std::vector<uint32_t> first, dependents;
};
DependentRows dependent_rows(const std::vector<Step> &steps);

// One rank's receives (or sends), (match_key(peer, tag), step) sorted by key: what matches a
// message. ddl_sim keeps these per rank instead of every rank's whole schedule.
using MatchIndex = std::vector<std::pair<uint64_t, uint32_t>>;
MatchIndex match_index(const std::vector<Step> &steps, bool receives);
// The step of `key` in `index`, or -1.
int64_t find_match(const MatchIndex &index, uint64_t key);

// Who waits on whom in every rank's schedule, and which receive each send feeds.
class ScheduleGraph {
 public:
  // Checks what the walk relies on: dependencies point backwards; a message or a peer copy
  // names another rank of the call; a message's tag is within the transport's range; one
  // message per (sender, receiver, tag); every send meets a receive of its size and every
  // receive a send. The first violation is the error, named by `name`.
  Status build(const std::vector<Schedule> &by_rank, const StepName &name);

  // The step on the peer that a send feeds, or that a receive waits for.
  uint32_t partner(int rank, uint32_t step) const {
    return partner_[static_cast<size_t>(rank)][step];
  }
  // The steps of `rank` that list `step` among their dependencies: [begin, end).
  const uint32_t *dependents_begin(int rank, uint32_t step) const {
    const DependentRows &rows = rows_[static_cast<size_t>(rank)];
    return rows.dependents.data() + rows.first[step];
  }
  const uint32_t *dependents_end(int rank, uint32_t step) const {
    const DependentRows &rows = rows_[static_cast<size_t>(rank)];
    return rows.dependents.data() + rows.first[step + 1];
  }

 private:
  Status check_rank(const std::vector<Schedule> &by_rank, int r, const StepName &name) const;

  std::vector<std::vector<uint32_t>> partner_;
  std::vector<DependentRows> rows_;
};

// What a checker does with each step the walk runs: `local` for a copy, reduction or peer
// copy; `message` for a send and its receive together. An error stops the walk.
struct StepVisitor {
  std::function<Status(int rank, uint32_t step)> local;
  std::function<Status(int from, uint32_t send, int to, uint32_t receive)> message;
};

// Runs every step once, under rendezvous semantics, the strictest a transport may have: a
// step once its dependencies are done; a send together with its receive once both are ready
// (schedules that complete so cannot deadlock on eager or rendezvous transports alike). A
// step that never runs is the error, named by `name`.
Status walk_schedules(const std::vector<Schedule> &by_rank, const ScheduleGraph &graph,
                      const StepName &name, const StepVisitor &visit);

}  // namespace ddl

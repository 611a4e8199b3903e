// GOAL export: a collective's per-rank schedules in the text format of LogGOPSim's GOAL
// schedules (github.com/spcl/LogGOPSim: `num_ranks N`, then per rank `rank r { ... }` with
// labelled operations `lN: send Bb to P tag T`, `lN: recv Bb from P tag T`, `lN: calc C` and
// dependencies `lA requires lB`), so that ddl's real schedules can be replayed in LogGOPSim
// (txt2bin, then LogGOPSim -f) or ATLAHS.
//
// Each step becomes one operation: sends and receives as themselves (bytes, peer, the
// step's tag); a receive-and-reduce as a receive then a calc for the reduction; local copies
// and reductions as calcs; single copies across a host (kPeerRead/kPeerWrite, which GOAL has
// no word for) as calcs of the copy's time. Calc costs are in nanoseconds from the cluster's
// rates. Dependencies are the schedule's, each `requires` (the step starts after the other
// completes).
#pragma once

#include <ostream>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "tools/ddl_sim/cluster.h"

namespace ddl_sim {

void write_goal(const Cluster &cluster, const std::vector<ddl::Schedule> &by_rank, size_t elem_size,
                std::ostream &out);

}  // namespace ddl_sim

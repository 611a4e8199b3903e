// The schedule verifier: runs every rank's schedule of one collective symbolically, with
// no processes and no data. Each element carries the set of ranks whose contributions it
// holds and the index it came from, so a wrong offset, a contribution counted twice or
// missed, and a wrong final result are all caught. It also checks the schedules' hygiene:
// dependencies point backwards; ranges stay inside their buffers; tags are unique and
// within the transport's range; every send meets a receive of the same size; no deadlock;
// steps that touch overlapping memory (one of them writing) are ordered by dependencies,
// so the executor may run ready steps in any order; an out-of-place input is never written;
// final_reduce marks exactly the reductions that complete an element.
#pragma once

#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl {

// The largest communicator the verifier runs (hier's 16 x 16 x 4 tiers).
constexpr int kMaxVerifiedRanks = 1024;

// args.rank is ignored; by_rank[r] is rank r's schedule. Up to kMaxVerifiedRanks ranks.
Status verify_schedules(const CollectiveArgs &args, const std::vector<Schedule> &by_rank);

// With each rank's own view of the call (all_args[r].rank == r): the v forms' counts differ
// by rank. The sizes must agree (what r sends to j is what j expects from r).
Status verify_schedules(const std::vector<CollectiveArgs> &all_args,
                        const std::vector<Schedule> &by_rank);

// Builds every rank's schedule with build_schedule() and verifies them. The form with one
// CollectiveArgs fills in the rank; its layout stays empty (layout_of makes the blocks of the
// calls with one count), so it cannot verify the v forms, whose counts differ by rank.
Status verify_collective(const CollectiveArgs &args);
Status verify_collective(const std::vector<CollectiveArgs> &all_args);

}  // namespace ddl

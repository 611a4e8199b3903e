// The schedules of one call checked at thousands of ranks, where the symbolic verifier
// (verifier.h: a set of ranks per element, every race checked) would need gigabytes per
// rank. Each input element holds a 64-bit pseudo-random value of (rank, index); a reduction
// adds them (mod 2^64), so an output element holds the expected sum exactly when it combines
// every expected contribution once and nothing else: a missed, doubled or misplaced
// contribution changes the sum (but for a chance of 2^-64). Checked besides: dependencies point
// backwards, ranges stay inside their buffers, tags are within the transport's range and
// unique per pair, every send meets a receive of its size, nothing reduces undefined data, and
// the schedules complete under rendezvous semantics (a message moves only once both its send
// and its receive are ready), else the error names a step that never ran.
//
// Out of place only (the symbolic verifier covers in place up to kMaxVerifiedRanks); sums
// (AVG's final division is not applied); the v forms excluded (one count for every rank).
#pragma once

#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl {

// Builds every rank's schedule with build_schedule() (args.rank ignored) and checks them.
Status check_schedules_at_scale(const CollectiveArgs &args);

// Checks the given schedules (by_rank[r]: rank r's) of the call.
Status check_schedules_at_scale(const CollectiveArgs &args, std::vector<Schedule> by_rank);

}  // namespace ddl

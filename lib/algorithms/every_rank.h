// Every rank's schedule of one call, built in this process: what the verifier, the scale check
// and ddl_sim walk. With walk.h, verifier.h and scale_check.h it forms the library
// ddl_schedule_tools (lib/algorithms/CMakeLists.txt), which tests and tools link and
// libddl.so does not carry.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lib/algorithms/registry.h"

namespace ddl {

// Builds the schedule of args for every rank (args.rank set to each) on as many threads as
// there are cores (at thousands of ranks building is much of a check or a projection) and
// hands each to take(rank, schedule) on the thread that built it: take must only touch what
// belongs to that rank. *why: how rank 0's algorithm was chosen. The first rank whose build
// fails is the error, naming it.
Status for_every_rank_schedule(const CollectiveArgs &args,
                               const std::function<void(int rank, Schedule &&schedule)> &take,
                               std::string *why = nullptr);

// Every rank's schedule of args, in rank order.
Status build_every_schedule(const CollectiveArgs &args, std::vector<Schedule> *by_rank);

}  // namespace ddl

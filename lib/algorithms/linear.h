// Gather and scatter, linear: every rank sends its block straight to the root (gather), or
// the root sends each rank its block (scatter), all messages in flight at once. The root's
// link carries every block once, which is the bound for large blocks; for small ones a tree
// would save latency on many ranks (not built: n-1 messages posted together cost the root
// one latency and a small overhead each). The v forms take the root's counts and
// displacements from BlockLayout.
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_linear_gather(const CollectiveArgs &args, Schedule *schedule);
void build_linear_scatter(const CollectiveArgs &args, Schedule *schedule);

}  // namespace ddl

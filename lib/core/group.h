// ddl_group_start / ddl_group_end (NCCL's semantics): collectives called between them on
// one thread are recorded, then issued together at the outermost end, with consecutive small
// allreduces of one communicator, datatype and op fused into buffers of at most
// DDL_FUSION_BYTES.
#pragma once

#include <memory>

#include "lib/common/status.h"
#include "lib/core/collectives.h"
#include "lib/core/progress.h"

namespace ddl {

// How deep the calling thread is in ddl_group_start / ddl_group_end (group.cc).
extern thread_local int t_group_depth;
// Whether the calling thread is between ddl_group_start and its ddl_group_end. Inline: every
// call asks.
inline bool in_group() {
  return t_group_depth > 0;
}
void group_start();
// Issues what the group recorded; waits for its blocking calls (their first failure).
Status group_end();
// Records a checked call of the open group. `request`: the nonblocking call's, or null for a
// blocking call (the group then waits for it at its end).
void group_record(ddl_comm *comm, const CollectiveCall &call,
                  std::shared_ptr<RequestState> request);

// The communicator's progress queue, started on first use (by the caller's thread, which
// owns the communicator for the length of its call).
ProgressQueue &progress_of(ddl_comm *comm);

// A request for `call` on comm, not yet queued (its deadline counts the jobs queued ahead).
std::shared_ptr<RequestState> new_request(ddl_comm *comm, const CollectiveCall &call);

}  // namespace ddl

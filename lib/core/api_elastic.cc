// The C ABI of fault tolerance: ddl_comm_revoke, _agree, _failed_ranks, _shrink, _grow.
#include <algorithm>
#include <vector>

#include "ddl/ddl.h"
#include "lib/core/comm.h"
#include "lib/core/comm_call.h"
#include "lib/core/elastic.h"
#include "lib/core/progress.h"

using ddl::CommCall;
using ddl::Status;

ddl_result_t ddl_comm_revoke(ddl_comm_t comm) {
  CommCall guard(comm, "ddl_comm_revoke");
  if (!guard.ok()) return guard.fail();
  // Parked sends and receives go to the progress thread, as queued ones: their waiters no
  // longer poll the transport that the notices go through.
  ddl::hand_over_parked(comm);
  ddl::revoke_comm(comm);
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_agree(ddl_comm_t comm, ddl_agree_op_t op, uint64_t *value) {
  CommCall guard(comm, "ddl_comm_agree");
  if (!guard.ok()) return guard.fail();
  const int raw_op = static_cast<int>(op);
  if (!value || (raw_op != DDL_AGREE_AND && raw_op != DDL_AGREE_OR))
    return guard.finish(ddl::invalid_argument(
        "rank %d: ddl_comm_agree: %s", comm->rank,
        !value ? "value is NULL" : "op must be DDL_AGREE_AND or DDL_AGREE_OR"));
  Status s = ddl::wait_for_queued(comm);
  if (s.ok())
    s = ddl::agree_comm(comm, raw_op == DDL_AGREE_AND ? ddl::AgreeOp::kAnd : ddl::AgreeOp::kOr,
                        value);
  if (!s.ok()) s.prefix(ddl::strprintf("rank %d: ddl_comm_agree: ", comm->rank));
  return guard.finish(s);
}

ddl_result_t ddl_comm_failed_ranks(ddl_comm_t comm, int *ranks, int capacity, int *count) {
  CommCall guard(comm, "ddl_comm_failed_ranks");
  if (!guard.ok()) return guard.fail();
  if (!count || capacity < 0 || (capacity > 0 && !ranks))
    return guard.finish(ddl::invalid_argument("rank %d: ddl_comm_failed_ranks: %s", comm->rank,
                                              !count         ? "count is NULL"
                                              : capacity < 0 ? "capacity is negative"
                                                             : "ranks is NULL"));
  const std::vector<int> &failed = comm->agreed_failed;
  *count = static_cast<int>(failed.size());
  std::copy_n(failed.begin(), std::min<size_t>(failed.size(), static_cast<size_t>(capacity)),
              ranks);
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_shrink(ddl_comm_t comm, const int *exclude, int nexclude,
                             ddl_comm_t *newcomm) {
  if (!newcomm)
    return ddl::fail_without_comm(ddl::invalid_argument("ddl_comm_shrink: newcomm is NULL"));
  *newcomm = nullptr;
  CommCall guard(comm, "ddl_comm_shrink");
  if (!guard.ok()) return guard.fail();
  std::vector<int> excluded;
  Status s;
  if (nexclude < 0 || (nexclude > 0 && !exclude))
    s = ddl::invalid_argument("%s", nexclude < 0 ? "nexclude is negative" : "exclude is NULL");
  for (int i = 0; s.ok() && i < nexclude; ++i) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      s = ddl::invalid_argument("exclude[%d] = %d is not a rank of the %d", i, exclude[i],
                                comm->nranks);
    else if (exclude[i] == comm->rank)
      s = ddl::invalid_argument("exclude[%d] = %d is this rank: excluded ranks must not call", i,
                                exclude[i]);
    else
      excluded.push_back(exclude[i]);
  }
  // A failed comm's queued calls fail at once; a healthy one's run first, as for split.
  if (s.ok()) s = ddl::wait_for_queued(comm);
  if (s.ok()) s = ddl::shrink_comm(comm, excluded, newcomm);
  if (!s.ok()) s.prefix(ddl::strprintf("rank %d: ddl_comm_shrink: ", comm->rank));
  return guard.finish(s);
}

ddl_result_t ddl_comm_grow(ddl_comm_t comm, int new_size, const char *root_addr,
                           ddl_comm_t *newcomm) {
  if (!newcomm)
    return ddl::fail_without_comm(ddl::invalid_argument("ddl_comm_grow: newcomm is NULL"));
  *newcomm = nullptr;
  CommCall guard(comm, "ddl_comm_grow");
  if (!guard.ok()) return guard.fail();
  Status s = root_addr ? ddl::wait_for_queued(comm)
                       : ddl::invalid_argument(
                             "root_addr is NULL: name the host:port that "
                             "rank 0 serves the new ranks' rendezvous at");
  if (s.ok()) s = ddl::grow_comm(comm, new_size, root_addr, newcomm);
  if (!s.ok()) s.prefix(ddl::strprintf("rank %d: ddl_comm_grow: ", comm->rank));
  return guard.finish(s);
}

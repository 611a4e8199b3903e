// The caller's count and displacement arrays of a v form, and their copy into the call
// (CollectiveCall::layout), for the C entry points (api.cc).
#pragma once

#include <cstddef>

#include "lib/common/status.h"
#include "lib/core/collectives.h"

struct ddl_comm;

namespace ddl {

// The caller's count and displacement arrays of a v form (NULL where not given).
struct CountArrays {
  const size_t *send_counts = nullptr, *send_displs = nullptr;
  const size_t *recv_counts = nullptr, *recv_displs = nullptr;
};

// Copies the arrays a v form reads on this rank into call->layout: they are the caller's
// only for the length of the call, also for the nonblocking forms. A reduce_scatterv's one
// array also sets call->count (this rank's own entry).
Status read_counts(const ddl_comm *comm, const CountArrays &arrays, CollectiveCall *call);

}  // namespace ddl

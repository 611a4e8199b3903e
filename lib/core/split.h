// ddl_comm_split: groups of ranks as communicators of their own (MPI_Comm_split and
// ncclCommSplit semantics).
#pragma once

#include "lib/common/status.h"

struct ddl_comm;

namespace ddl {

// Collective over `parent`: the ranks that pass the same color >= 0 form a new
// communicator, ranked by (key, parent rank); DDL_SPLIT_NOCOLOR gives *out = nullptr. The new
// communicator is a whole one (own rendezvous, transports, shared memory, sequence numbers,
// mismatch and failure detection); its ranks meet through the parent's bootstrap, and its
// rendezvous is served by its rank 0 with a fresh random job token.
Status split_comm(ddl_comm *parent, int color, int key, ddl_comm **out);

}  // namespace ddl

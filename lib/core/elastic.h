// Going on after a failure (ddl.h, "Fault tolerance"): revoke a communicator, agree over its
// live ranks, shrink it to them, grow it with new processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/core/agreement.h"

struct ddl_comm;

namespace ddl {

// Fails every later call on comm, here and (through failure notices) on every other rank, so
// that nobody waits out a deadline for a rank that left for a shrink.
void revoke_comm(ddl_comm *comm);
// *value becomes the AND (or OR) of the values of the live ranks; comm->agreed_failed the
// ranks the agreement found failed (then comm is revoked).
Status agree_comm(ddl_comm *comm, AgreeOp op, uint64_t *value);
// The live ranks (less `exclude`) agree on who they are and build a communicator of them,
// ranked in their old order; a member that dies meanwhile is agreed away again.
Status shrink_comm(ddl_comm *comm, const std::vector<int> &exclude, ddl_comm **out);
// A communicator of comm's ranks (same ranks) and new_size - nranks new ones, which join with
// ddl_comm_init at root_addr (served by comm's rank 0) and the job's token.
Status grow_comm(ddl_comm *comm, int new_size, const std::string &root_addr, ddl_comm **out);

}  // namespace ddl

// ddl_send and ddl_recv: messages between two ranks, outside the collectives' sequence.
//
// Messages of one pair of ranks are matched in the order they were posted (NCCL's rule): the
// k-th send from a to b carries tag kPointToPointTagBase + k (mod kPointToPointTagSpan), and
// b's k-th receive from a expects it. Both sides count, so no message of its own tells the
// peer what is coming; counts that disagree fail on the receiver (its size check) and the
// receiver tells everyone, as for mismatched collectives. The messages leave straight from
// the caller's buffer: shared memory's cells inside a host, UCX across hosts (rendezvous for
// large ones: no copy into a bounce buffer).
//
// A batch (a group's sends and receives, or consecutive queued ddl_isend/ddl_irecv) is
// posted all at once and waited for together, so that the sends and receives of an exchange
// never wait for each other. Every wait has the communicator's deadline and watches for dead
// peers, notices and ddl_comm_abort, like a collective's.
#pragma once

#include <vector>

#include "lib/core/collectives.h"

namespace ddl {

// Runs checked sends and receives (call.collective kSend or kRecv) on comm as one batch.
// A failure leaves the communicator failed, as a collective's does.
Status run_point_to_point(ddl_comm *comm, const std::vector<CollectiveCall> &calls);

}  // namespace ddl

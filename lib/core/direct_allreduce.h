// The single-copy allreduce of a job whose ranks all share one host.
//
// Copying through shared-memory cells moves every byte twice (into a cell, out of it). Here
// each rank owns one block of the buffer: piece by piece it reads that block straight out of
// every peer's input (process_vm_readv, transports/shm/cma.h) into a cache-sized landing
// buffer and reduces it into its own output. After a barrier, each rank copies every other
// block straight from its owner's output into its own. Open MPI's vader (CMA) and NCCL's
// P2P read mode make the same trade.
//
// Ranks only ever read each other's memory. A rank that fails and returns early may reuse
// its buffers at once; peers that still read them get garbage or EFAULT, but only in a call
// that fails for them too (they never see that rank at the last barrier). Writing into
// peers' outputs measured faster in place (the lines are already in cache) but would let a
// slow peer scribble over memory its owner had reused after a failure.
//
// Around the copies, small exchanges over the shm transport: the ranks' buffer addresses
// (an allgather that also checks the call signatures), and barriers, as no rank may return
// while a peer still reads its input or output.
#pragma once

#include <string>

#include "lib/core/collectives.h"
#include "lib/exec/executor.h"

namespace ddl {

// Whether this allreduce goes the single-copy way: the communicator can (ddl_comm::cma),
// and DDL_ALGO=direct forces it or, unforced, the buffer is large enough to pay for the
// exchanges around the copies.
bool direct_allreduce_applies(const ddl_comm *comm, const CollectiveCall &call);
// Why it does, for the log.
std::string why_direct_allreduce(const ddl_comm *comm);

// Runs it. `exec` is the call as the executor would get it (buffers, type, op, sequence
// number, signature, deadline). *found_failure: this rank found a problem every rank should
// hear of (a mismatch, a dead peer).
Status run_direct_allreduce(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                            bool *found_failure);

}  // namespace ddl

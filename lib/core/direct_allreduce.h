// The single-copy allreduce of a job whose ranks all share one host.
//
// Copying through shared-memory cells moves every byte twice (into a cell, out of it). Here
// each rank owns one block of the buffer. Piece by piece it reads that block straight out
// of every peer's input (process_vm_readv, lib/transports/shm/cma.h) into a cache-sized landing
// buffer, reduces it into its own output, and writes the reduced piece, still in cache,
// straight into every peer's output (process_vm_writev). Peers' ddl_mem_alloc buffers are
// mapped instead and read and written with plain loads and stores. Open MPI's vader (CMA)
// and NCCL's P2P mode make the same trade.
//
// Writing the result into the peers (rather than having them read it back, then copy it)
// saves a pass over memory and a barrier: on 2 ranks, 32-128 MB, 3.9 GB/s against 2.9 in
// place, 7.4 against 4.4 with ddl_mem_alloc buffers in place (ddl_perf busbw).
// The addresses, the write gates and the final barrier around the copies are
// lib/core/peer_buffers.h's, shared with hier's single-copy host tier.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/collectives.h"
#include "lib/exec/executor.h"

namespace ddl {

// Whether this call can go the single-copy way: an allreduce when every rank is on this host
// and the communicator can (ddl_comm::cma); a broadcast or allgather(v) as direct_copy.h says.
bool direct_collective_possible(const ddl_comm *comm, const CollectiveCall &call);
// Whether it can and should, unforced (the dispatch, lib/core/dispatch.h): the allreduce's buffer
// large enough to pay for the exchanges around the copies; a broadcast or allgather(v) as
// direct_copy.h decides.
bool direct_collective_applies(const ddl_comm *comm, const CollectiveCall &call);
// Why it does, for the log.
std::string why_direct(const ddl_comm *comm, const CollectiveCall &call);

// Runs it once run_host_collective (lib/core/collectives.h) has prepared it.
class DirectRunner : public CallRunner {
 public:
  Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec, uint64_t call_number,
             bool *found_failure) override;
};

}  // namespace ddl

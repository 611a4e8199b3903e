// The single-copy broadcast and allgather of a job whose ranks all share one host.
//
// Through the shm transport's cells every byte is copied twice (into a cell by the sender,
// out of it by the receiver), in 32 KB pieces with a handshake for each. Here every rank
// reads what it needs straight out of its peers' buffers with one kernel copy
// (process_vm_readv, lib/transports/shm/cma.h), as Open MPI's vader does for large messages:
//  - broadcast: every rank but the root reads the root's whole buffer;
//  - allgather: every rank reads each peer's block into its place (starting with the next
//    rank, so that the ranks do not all read the same peer at once).
//
// Around the copies, the shared slots' handshake (lib/core/flat_collectives.h): every rank
// publishes its buffer's address in its slot and waits for its peers' (which also checks
// that every rank makes the same call), and after the copies says it has finished. A rank
// whose buffer others read (the root; every rank of an allgather) returns only once every
// peer has finished, so the caller never reuses memory a peer still reads. Nothing is
// written into a peer, so no write gate is needed: a peer that reads the buffer of a rank
// that has left gets garbage or EFAULT only in a call that fails for it too.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/collectives.h"
#include "lib/exec/executor.h"

namespace ddl {

// Whether this broadcast or allgather(v) can go the single-copy way: every rank on this host
// with the slots and cross-memory attach (ddl_comm::flat, ddl_comm::cma), and something to read.
bool direct_copy_possible(const ddl_comm *comm, const CollectiveCall &call);
// Whether it can and should, unforced (the dispatch, lib/core/dispatch.h): the copy must be large
// enough to pay for the system call; with ranks sharing cores only a broadcast beyond the slots'
// capacity.
bool direct_copy_applies(const ddl_comm *comm, const CollectiveCall &call);
// Why it does, for the log.
std::string why_direct_copy(const ddl_comm *comm, const CollectiveCall &call);

// Runs it as call number `call_number` (ddl_comm::calls). `exec` is the call as the
// executor would get it. *found_failure: this rank found a problem every rank should hear of.
Status run_direct_copy(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                       uint64_t call_number, bool *found_failure);

}  // namespace ddl

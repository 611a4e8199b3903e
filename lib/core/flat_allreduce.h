// The allreduce of a few kilobytes, when every rank shares this host: through shared slots
// (transports/shm/flat_slots.h) instead of messages. Every rank publishes its input in its
// slot, waits until every peer has published the same call, checks that their stamps say
// the same call, and reduces all contributions in rank order into its output.
//
// One cache line per rank carries a small allreduce, and no schedule runs: no plan lookup,
// no steps, no requests. Each rank reads P - 1 contributions, so the reads grow with the
// ranks, which is why it stops at a few kilobytes, where the schedules' pipelining wins.
//
// A barrier is the same call with nothing to reduce: every rank publishes its stamp and
// waits for everyone's.
//
// Mismatched calls fail on both sides: a slotted peer's stamp differs, or a peer that went
// another way sends messages whose stamps differ (the shm transport compares them while
// this rank waits), and its failure notice reaches the others.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/collectives.h"
#include "lib/exec/executor.h"

namespace ddl {

// Whether this call goes through the slots: the communicator has them (every rank on this
// host, shared memory up), and it is a barrier (an allreduce of nothing, whatever DDL_ALGO
// says), or an allreduce that DDL_ALGO=flat forces or, unforced, a small one.
bool flat_allreduce_applies(const ddl_comm *comm, const CollectiveCall &call);
// Why it does, for the log.
std::string why_flat_allreduce(const ddl_comm *comm);

// Runs it as call number `call_number` (ddl_comm::calls). `exec` is the call as the
// executor would get it. *found_failure: this rank found a problem every rank should hear of.
Status run_flat_allreduce(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                          uint64_t call_number, bool *found_failure);

}  // namespace ddl

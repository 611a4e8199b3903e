// Small collectives of a job whose ranks all share this host: through shared slots
// (lib/transports/shm/flat_slots.h) instead of messages. Every rank publishes its contribution
// in its slot, waits until every peer has published the same call, checks that their stamps
// say the same call, and builds its result from the slots:
//  - allreduce: every contribution reduced in rank order into the output;
//  - reduce-scatter: the same, for this rank's block only;
//  - allgather: every contribution copied to its place;
//  - broadcast: the root publishes the buffer, the others copy it (and publish only stamps);
//  - barrier: nothing to publish or build.
//
// A small allreduce costs one cache line written per rank and one read per peer, and no
// schedule runs: no plan lookup, no steps, no requests. Each rank reads P - 1 contributions,
// so the reads grow with the ranks, which is why it stops at a few kilobytes, where the
// schedules' pipelining wins.
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

// Whether this call can go through the slots: the communicator has them (every rank on this
// host, shared memory up), the collective's shares have sizes every rank knows, and what each
// rank publishes fits a slot.
bool flat_collective_possible(const ddl_comm *comm, const CollectiveCall &call);
// Whether it can and should, unforced (the dispatch, lib/core/dispatch.h): what a rank reads is
// small enough, or the ranks share cores (the slots' single handshake wins for all they hold); a
// barrier always.
bool flat_collective_applies(const ddl_comm *comm, const CollectiveCall &call);
// Why it does, for the log.
std::string why_flat_collective(const ddl_comm *comm, const CollectiveCall &call);

// Runs it once run_host_collective (lib/core/collectives.h) has prepared it.
class FlatRunner : public CallRunner {
 public:
  Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec, uint64_t call_number,
             bool *found_failure) override;
};

// The slots' handshake, for other one-host paths that need one (the single-copy broadcast
// and allgather, lib/core/direct_copy.h): publishes `bytes` (<= FlatSlots::kCapacity) of
// `data` in this rank's slot for call `call_number` (once every peer has finished reading
// what it held before), then waits until every peer has published the same call, with the
// same stamp. Afterwards FlatSlots::data() gives what each peer published.
Status flat_join(ddl_comm *comm, const ExecArgs &exec, uint64_t call_number, const void *data,
                 size_t bytes, bool *found_failure);
// This rank is done with call `call_number` (slots and whatever they pointed to); returns
// once every peer is too: a barrier that costs one line written and one read per peer.
Status flat_leave(ddl_comm *comm, const ExecArgs &exec, uint64_t call_number, bool *found_failure);

}  // namespace ddl

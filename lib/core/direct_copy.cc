#include "lib/core/direct_copy.h"

#include <cstring>

#include "lib/core/call_checks.h"
#include "lib/core/flat_collectives.h"
#include "lib/transports/shm/cma.h"
#include "lib/transports/shm/flat_slots.h"

namespace ddl {
namespace {

// What a rank reads from its peers (the root's buffer; the P - 1 other blocks), from which
// one kernel copy beats the alternatives when every rank has a core: the slots' two
// copies up to here, the cells' two copies with a handshake per 32 KB above.
constexpr size_t kDirectMinRead = 16 << 10;

// Where a rank's buffer is, as published in its slot: the broadcast's buffer (read only at
// the root), the allgather's input block, and its size (an allgatherv's blocks differ: a
// reader checks the size it expects against it before it reads).
struct PublishedBuffer {
  uint64_t address = 0;
  uint64_t bytes = 0;
};

// Broadcast: reads the root's buffer (not at the root).
Status read_broadcast(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                      uint64_t call_number) {
  if (comm->rank == call.root) return Status::Ok();
  PublishedBuffer root;
  std::memcpy(&root, comm->flat->data(call.root, call_number), sizeof root);
  const size_t bytes = call_bytes(call);
  Status s = cma_read(comm->pids[call.root], reinterpret_cast<const void *>(root.address),
                      exec.output, bytes);
  return s.ok() ? s : s.prefix(strprintf("reading root %d's buffer (%zu B): ", call.root, bytes));
}

// Allgather(v): each peer's block into its place, then this rank's own (out of place).
Status read_allgather(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                      uint64_t call_number, int *failed_peer) {
  char *output = static_cast<char *>(exec.output);
  for (int k = 1; k < comm->nranks; ++k) {
    const int peer = (comm->rank + k) % comm->nranks;
    const BlockAt block = gathered_block(call, peer);
    PublishedBuffer theirs;
    std::memcpy(&theirs, comm->flat->data(peer, call_number), sizeof theirs);
    *failed_peer = peer;
    if (theirs.bytes != block.bytes)
      return invalid_usage(
          "rank %d sends %llu B but this rank expects %zu B (counts that disagree between the "
          "ranks)",
          peer, static_cast<unsigned long long>(theirs.bytes), block.bytes);
    Status s = cma_read(comm->pids[peer], reinterpret_cast<const void *>(theirs.address),
                        output + block.offset, block.bytes);
    if (!s.ok()) return s.prefix(strprintf("reading rank %d's block (%zu B): ", peer, block.bytes));
  }
  const BlockAt mine = gathered_block(call, comm->rank);
  if (exec.input != output + mine.offset) std::memcpy(output + mine.offset, exec.input, mine.bytes);
  return Status::Ok();
}

// What a rank would read by single copy, alike on every rank (every rank must choose the same
// way): the broadcast's buffer; all blocks of an allgather(v) less one rank's share of them.
// 0 where the single copy cannot take the call (no slots or cross-memory attach, another
// collective, nothing to read).
size_t direct_read_bytes(const ddl_comm *comm, const CollectiveCall &call) {
  const Collective c = call.collective;
  if (!comm->cma || !comm->flat) return 0;
  if (c == Collective::kBroadcast) return call_bytes(call);
  if (c == Collective::kAllgather || c == Collective::kAllgatherv)
    return gathered_read_bytes(comm, call);
  return 0;
}

}  // namespace

bool direct_copy_possible(const ddl_comm *comm, const CollectiveCall &call) {
  return direct_read_bytes(comm, call) > 0;
}

bool direct_copy_applies(const ddl_comm *comm, const CollectiveCall &call) {
  // Computed once: an allgatherv's sums every rank's count.
  const size_t read = direct_read_bytes(comm, call);
  if (read == 0) return false;
  // With ranks sharing cores, the slots' single handshake wins for all they hold, and an
  // allgather keeps the ring: on 4 ranks and 2 cores the single copy measured 11-36% slower
  // than the ring at 128 KB-32 MB (each rank's P - 1 kernel copies pin every page they read;
  // bench/one-host.md, loaded machine), while the broadcast's single copy led from 512 KB.
  if (comm->oversubscribed)
    return call.collective == Collective::kBroadcast && read > FlatSlots::kCapacity;
  return read >= kDirectMinRead;
}

std::string why_direct_copy(const ddl_comm *comm, const CollectiveCall &call) {
  (void)call;
  if (comm->oversubscribed)
    return strprintf(
        "direct (single copy, every rank on this host, > %zu B with ranks sharing "
        "cores)",
        FlatSlots::kCapacity);
  return strprintf("direct (single copy, every rank on this host, >= %zu B read per rank)",
                   kDirectMinRead);
}

Status run_direct_copy(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                       uint64_t call_number, bool *found_failure) {
  PublishedBuffer mine;
  mine.address = reinterpret_cast<uintptr_t>(exec.input);
  mine.bytes = call.collective == Collective::kBroadcast ? call_bytes(call)
                                                         : gathered_block(call, comm->rank).bytes;
  // Joining checks every rank's call stamp: ranks that disagree about the call fail here,
  // before anyone reads another's memory.
  DDL_RETURN_IF_ERROR(flat_join(comm, exec, call_number, &mine, sizeof mine, found_failure));
  int failed_peer = call.root;
  Status s = call.collective == Collective::kBroadcast
                 ? read_broadcast(comm, call, exec, call_number)
                 : read_allgather(comm, call, exec, call_number, &failed_peer);
  if (!s.ok()) return explain_peer_failure(comm, exec, failed_peer, s, found_failure);
  // Nobody reads a broadcast's non-root buffers: those ranks need not wait for the others.
  if (call.collective == Collective::kBroadcast && comm->rank != call.root) {
    comm->flat->finish(call_number);
    return Status::Ok();
  }
  return flat_leave(comm, exec, call_number, found_failure);
}

}  // namespace ddl

// Shared slots for the smallest collectives of a host: every rank publishes its contribution
// in a slot of its own and reads every peer's slot directly.
//
// An allreduce of a few bytes through messages costs a handoff per step of the schedule and
// the bookkeeping around it. Here it costs one cache line written (the flag, the call's
// stamp and up to 32 bytes of data share it) and one read per peer; the reduction is done
// by every rank, in rank order, so every rank gets the same bits. Open MPI's coll/sm and
// NCCL's LL protocol rest on the same idea: a flag in the line that carries the data.
//
// Each rank owns two slots and alternates between them by call parity, plus a line where it
// says which call it has finished reading. A rank may overwrite a slot only when every peer
// has finished reading what it last wrote there; within a run of slotted calls that is
// known for free (a peer that posted call k has finished call k - 1), otherwise it reads the
// peers' "finished" lines (slots_reusable).
//
// Calls are numbered by ddl_comm::calls (1, 2, ...; it never wraps), the flag a slot shows.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "lib/transports/transport.h"

namespace ddl {

class FlatSlots {
 public:
  // Payload bytes one slot holds: the largest contribution a slotted collective can take.
  static constexpr size_t kCapacity = 64 << 10;
  // Bytes of shared memory per rank (the region holds one such block per rank, zero-filled).
  static size_t bytes_per_rank();

  // `region`: one block of bytes_per_rank() per rank, shared by the host's ranks, which are
  // all the communicator's ranks (rank r owns block r).
  FlatSlots(char *region, int rank);

  // Whether this rank may write its slot for `call` now, as far as it knows without looking
  // at its peers; if not, the call whose reading every peer must have finished.
  bool slot_known_free(uint64_t call, uint64_t *needed) const;
  // Whether `peer` has finished reading call `needed` (its "finished" line).
  bool peer_finished(int peer, uint64_t needed) const;
  // Every peer has: remembered, so that the next calls need not look again.
  void peers_finished(uint64_t needed);
  // Publishes this rank's contribution to `call` (bytes <= kCapacity): data, then stamp,
  // then the flag (release), so that a peer that sees the flag sees the rest.
  void publish(uint64_t call, const CallStamp &stamp, const void *data, size_t bytes);
  // Whether `peer` has published its contribution to `call` (acquire).
  bool published(int peer, uint64_t call) const;
  // A published contribution: its stamp and data (valid until this rank calls finish()).
  const CallStamp &stamp(int peer, uint64_t call) const;
  const char *data(int peer, uint64_t call) const;
  // This rank has read everything it needed of `call`, which every peer has published.
  void finish(uint64_t call);

 private:
  struct Slot;
  struct Finished;
  static size_t slot_stride();  // a Slot, rounded up to keep the prefetcher off the next
  Slot *slot(int rank, uint64_t call) const;
  Finished *finished(int rank) const;

  char *region_;
  int rank_;
  uint64_t last_written_[2] = {0, 0};  // by parity: the call this rank last published there
  uint64_t known_finished_ = 0;        // every peer has finished reading calls up to this one
};

}  // namespace ddl

// Single copy between the ranks of one host: for one call, every rank publishes where its
// buffers are, and its peers on the host read its input and write its output directly.
//
// Two users: the direct allreduce of a job on one host (direct_allreduce.h), and any plan
// with kPeerRead / kPeerWrite steps, such as hier's host tier in a job across hosts. Around
// the copies, the same three things:
//  - publish: this rank opens its write gate, then an allgather over the communicator tells
//    every rank where everyone's buffers are (it carries the call signatures, so ranks that
//    disagree about the call fail here, before anyone touches another's memory);
//  - the copies: a peer's ddl_mem_alloc buffers are mapped and copied with plain loads and
//    stores, anything else goes through the kernel (process_vm_readv / writev,
//    lib/transports/shm/cma.h); writes go through the peer's gate
//    (lib/transports/shm/write_gates.h), so that nothing lands in a rank that has already
//    left the call;
//  - finish: a barrier, as no rank may return while a peer still reads its input or writes
//    its output; or, on failure, leave: the gate closes and the rank waits for writers in
//    flight. Reads need no gate: a peer that reads a departed rank's memory gets garbage or
//    EFAULT only in a call that fails for it too (it never sees that rank at the barrier).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/exec/executor.h"
#include "lib/transports/shm/shared_buffers.h"

struct ddl_comm;

namespace ddl {

class PeerBuffers : public PeerMemory {
 public:
  // Publishes this rank's buffers (`exec.input`, `exec.output`, of the given sizes) for call
  // number `call_number` (ddl_comm::calls) and learns its host peers'. *found_failure: this
  // rank found a problem every rank should hear of (a mismatch, a dead peer).
  Status publish(ddl_comm *comm, const ExecArgs &exec, size_t input_bytes, size_t output_bytes,
                 uint64_t call_number, bool *found_failure);
  // After this rank's copies: waits until every rank is done with everyone's memory.
  Status finish(const ExecArgs &exec, bool *found_failure);
  // Leaves the call with `error` instead (see above).
  Status leave_with(Status error);

  Status read(int peer, size_t offset, void *into, size_t bytes) override;
  Status write(int peer, size_t offset, const void *from, size_t bytes) override;
  // A host peer's input, mapped here, or null (then read() goes through the kernel).
  const char *mapped_input(int peer) const { return views_[peer].input; }

 private:
  // Where one rank's buffers are, as published: addresses in its process, and where they
  // lie in ddl_mem_alloc allocations, if they do.
  struct Addresses {
    uint64_t input = 0;
    uint64_t output = 0;
    SharedRef input_ref, output_ref;
  };
  // A peer's buffers as mapped here, or null.
  struct View {
    const char *input = nullptr;
    char *output = nullptr;
  };

  void map_peers(size_t input_bytes, size_t output_bytes);

  ddl_comm *comm_ = nullptr;
  uint64_t call_ = 0;
  std::vector<Addresses> addresses_;  // by rank
  std::vector<View> views_;           // by rank
};

// Runs `plan` (Schedule::peer_memory) as call number `call_number` with its peers' buffers
// published around it.
Status run_with_peer_buffers(ddl_comm *comm, const Plan &plan, ExecArgs exec, uint64_t call_number,
                             bool *found_failure);

}  // namespace ddl

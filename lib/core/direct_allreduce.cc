#include "lib/core/direct_allreduce.h"

#include <algorithm>
#include <cstdint>

#include "lib/algorithms/blocks.h"
#include "lib/common/datatype.h"
#include "lib/core/comm.h"
#include "lib/core/direct_copy.h"
#include "lib/core/peer_buffers.h"
#include "lib/reduce/reduce.h"

namespace ddl {
namespace {

// Below this the exchanges cost more than the copies save: on 2 ranks (ddl_perf, ring
// against direct) they tie at 32-64 KB and direct leads from 128 KB. When ranks share cores
// the barriers cost more and each rank makes P-1 kernel copies per piece: on 4 ranks and 2
// cores the ring is ahead up to 1 MB and they tie from 4 MB (with ddl_mem_alloc buffers
// direct leads from 128 KB there too, but a rank cannot know its peers' buffers when it
// chooses). DDL_ALGO=direct uses it at any size.
constexpr size_t kDirectMinBytes = 128 << 10;
constexpr size_t kDirectMinBytesOversubscribed = 4 << 20;
// A piece read from a peer and reduced stays in the core's cache (it lives there twice: the
// landing buffer, the output). 128 KB measured best on 2 ranks at 64 MB, against 16 KB to
// 1 MB: smaller pieces pay more system calls, larger ones fall out of L2.
constexpr size_t kPieceBytes = 128 << 10;

// This rank's block, piece by piece: each peer's part of a piece is read into a cache-sized
// landing buffer (or straight out of its mapped ddl_mem_alloc buffer) and combined into this
// rank's output, then the piece goes into every peer's output.
Status reduce_and_push_block(ddl_comm *comm, const ExecArgs &exec, PeerBuffers *peers,
                             const Extent &block, int *failed_peer) {
  const ddl_datatype_t dtype = exec.dtype;
  const size_t elem = datatype_size(dtype);
  const size_t piece_elems = std::max<size_t>(1, kPieceBytes / elem);
  if (comm->scratch.size() < piece_elems * elem) comm->scratch.resize(piece_elems * elem);
  char *landing = reinterpret_cast<char *>(comm->scratch.data());
  const char *input = static_cast<const char *>(exec.input);
  char *output = static_cast<char *>(exec.output);
  for (size_t done = 0; done < block.count; done += piece_elems) {
    const size_t elems = std::min(piece_elems, block.count - done);
    const size_t offset = (block.offset + done) * elem, bytes = elems * elem;
    // output = this rank's part (op) each peer's part, peers in rank order. The input is
    // read by the first reduce only, so in place it is read before it is overwritten.
    int combined = 1;
    for (int peer = 0; peer < comm->nranks; ++peer) {
      if (peer == comm->rank) continue;
      const char *theirs = peers->mapped_input(peer);
      if (theirs) {
        theirs += offset;
      } else {
        Status s = peers->read(peer, offset, landing, bytes);
        if (!s.ok()) {
          *failed_peer = peer;
          return s;
        }
        theirs = landing;
      }
      ++combined;
      const ddl_op_t op = exec.op == DDL_AVG && combined < comm->nranks ? DDL_SUM : exec.op;
      reduce(dtype, op, output + offset, combined == 2 ? input + offset : output + offset, theirs,
             elems, comm->nranks);
    }
    // Starting with the next rank: the ranks do not all write into the same peer at once.
    for (int k = 1; k < comm->nranks; ++k) {
      const int peer = (comm->rank + k) % comm->nranks;
      Status s = peers->write(peer, offset, output + offset, bytes);
      if (!s.ok()) {
        *failed_peer = peer;
        return s;
      }
    }
  }
  return Status::Ok();
}

size_t direct_min_bytes(const ddl_comm *comm) {
  return comm->oversubscribed ? kDirectMinBytesOversubscribed : kDirectMinBytes;
}

}  // namespace

bool direct_collective_possible(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective != Collective::kAllreduce) return direct_copy_possible(comm, call);
  return comm->cma && comm->hosts == 1 && call.count > 0;
}

bool direct_collective_applies(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective != Collective::kAllreduce) return direct_copy_applies(comm, call);
  return direct_collective_possible(comm, call) && call_bytes(call) >= direct_min_bytes(comm);
}

std::string why_direct(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective != Collective::kAllreduce) return why_direct_copy(comm, call);
  return strprintf("direct (single copy, every rank on this host, >= %zu B%s)",
                   direct_min_bytes(comm), comm->oversubscribed ? " with ranks sharing cores" : "");
}

// *found_failure: this rank found a problem every rank should hear of (a mismatch, a dead
// peer).
Status DirectRunner::run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                         uint64_t call_number, bool *found_failure) {
  *found_failure = false;
  if (call.collective != Collective::kAllreduce)
    return run_direct_copy(comm, call, exec, call_number, found_failure);
  // The exchange carries this allreduce's signature: ranks that disagree about the call
  // fail there, before anyone touches another's memory.
  const size_t bytes = call_bytes(call);
  PeerBuffers &peers = comm->peer_buffers;
  DDL_RETURN_IF_ERROR(peers.publish(comm, exec, bytes, bytes, call_number, found_failure));
  const BlockSplit split(call.count, comm->nranks);
  int failed_peer = -1;
  Status s = reduce_and_push_block(comm, exec, &peers, split.block(comm->rank), &failed_peer);
  if (!s.ok())
    return peers.leave_with(explain_peer_failure(comm, exec, failed_peer, s, found_failure));
  return peers.finish(exec, found_failure);
}

}  // namespace ddl

#include "lib/core/direct_allreduce.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "lib/algorithms/blocks.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/process_liveness.h"
#include "lib/core/direct_copy.h"
#include "lib/reduce/reduce.h"
#include "transports/shm/shared_buffers.h"

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
// How long a rank that leaves a call early waits for peers still writing into its output.
constexpr int kLeaveWaitMs = 2000;
// The barrier's messages travel in the same call as the address exchange: their tags start
// above anything that exchange uses.
constexpr uint32_t kBarrierTagOffset = 1u << 23;

// Where one rank's buffers are, as published to the others: addresses in its process, and
// where they lie in ddl_mem_alloc allocations, if they do.
struct BufferAddresses {
  uint64_t input = 0;
  uint64_t output = 0;
  SharedRef input_ref, output_ref;
};

// A peer's buffers as this rank reads and writes them: mapped here (its allocations), or
// null to go through the kernel.
struct PeerView {
  const char *input = nullptr;
  char *output = nullptr;
};

// Maps what peers publish from ddl_mem_alloc. A mapping that fails costs speed, not the call:
// that peer is read through the kernel.
std::vector<PeerView> map_peers(ddl_comm *comm, const std::vector<BufferAddresses> &peers,
                                size_t bytes) {
  std::vector<PeerView> views(comm->nranks);
  std::vector<std::pair<pid_t, SharedRef>> refs;
  for (int peer = 0; peer < comm->nranks; ++peer) {
    const BufferAddresses &theirs = peers[peer];
    if (peer == comm->rank || theirs.input_ref.fd < 0 || theirs.output_ref.fd < 0) continue;
    refs.emplace_back(comm->pids[peer], theirs.input_ref);
    refs.emplace_back(comm->pids[peer], theirs.output_ref);
  }
  comm->peer_maps.make_room(refs);
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    const BufferAddresses &theirs = peers[peer];
    if (theirs.input_ref.fd < 0 || theirs.output_ref.fd < 0) continue;
    char *input = nullptr;
    Status s = comm->peer_maps.map(comm->pids[peer], theirs.input_ref, bytes, &input);
    views[peer].input = input;
    if (s.ok())
      s = comm->peer_maps.map(comm->pids[peer], theirs.output_ref, bytes, &views[peer].output);
    if (!s.ok()) {
      DDL_DEBUG("reading rank %d through the kernel: mapping its buffers failed: %s", peer,
                s.message().c_str());
      views[peer] = PeerView();
    }
  }
  return views;
}

Status make_plans(ddl_comm *comm) {
  CollectiveArgs args;
  args.nranks = comm->nranks;
  args.rank = comm->rank;
  args.elem_size = 1;
  args.collective = Collective::kAllgather;
  args.count = sizeof(BufferAddresses);
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args, 0, &comm->direct_exchange, nullptr));
  args.collective = Collective::kBarrier;
  args.count = 0;
  return make_comm_plan(comm, args, kBarrierTagOffset, &comm->direct_barrier, nullptr);
}

// Writes a reduced piece of this rank's block into `peer`'s output, through its gate.
Status push_piece(ddl_comm *comm, int peer, const BufferAddresses &theirs, const PeerView &view,
                  const char *piece, size_t offset, size_t bytes, uint64_t call_number) {
  if (!comm->gates->begin_write(peer, call_number))
    return remote_error("rank %d left the call before this rank wrote its result", peer);
  Status s = Status::Ok();
  if (view.output)
    std::memcpy(view.output + offset, piece, bytes);
  else
    s = cma_write(comm->pids[peer], reinterpret_cast<char *>(theirs.output) + offset, piece, bytes);
  comm->gates->end_write(peer);
  return s.ok() ? s
                : s.prefix(strprintf("writing into rank %d's output (%zu B at offset %zu): ", peer,
                                     bytes, offset));
}

// This rank's block, piece by piece: each peer's part of a piece is read into a cache-sized
// landing buffer and combined into this rank's output, then the piece goes into every
// peer's output.
Status reduce_and_push_block(ddl_comm *comm, const ExecArgs &exec,
                             const std::vector<BufferAddresses> &peers,
                             const std::vector<PeerView> &views, const Extent &block,
                             uint64_t call_number, int *failed_peer) {
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
      const char *theirs = views[peer].input ? views[peer].input + offset : landing;
      if (!views[peer].input) {
        Status s =
            cma_read(comm->pids[peer], reinterpret_cast<const char *>(peers[peer].input) + offset,
                     landing, bytes);
        if (!s.ok()) {
          *failed_peer = peer;
          return s.prefix(
              strprintf("reading rank %d's input (%zu B at offset %zu): ", peer, bytes, offset));
        }
      }
      ++combined;
      const ddl_op_t op = exec.op == DDL_AVG && combined < comm->nranks ? DDL_SUM : exec.op;
      reduce(dtype, op, output + offset, combined == 2 ? input + offset : output + offset, theirs,
             elems, comm->nranks);
    }
    // Starting with the next rank: the ranks do not all write into the same peer at once.
    for (int k = 1; k < comm->nranks; ++k) {
      const int peer = (comm->rank + k) % comm->nranks;
      Status s = push_piece(comm, peer, peers[peer], views[peer], output + offset, offset, bytes,
                            call_number);
      if (!s.ok()) {
        *failed_peer = peer;
        return s;
      }
    }
  }
  return Status::Ok();
}

// This rank leaves the call with `error`: its gate closes, and it returns only once no
// peer writes into its output any more (a peer that died writes nothing). A peer still
// announced as writing long after is stuck mid-copy (stopped, swapped out): the error says
// so rather than wait forever.
Status leave_with(ddl_comm *comm, uint64_t call_number, Status error) {
  comm->gates->close();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLeaveWaitMs);
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    while (comm->gates->writing(peer, call_number) && process_is_alive(comm->pids[peer])) {
      if (std::chrono::steady_clock::now() >= until)
        return error.prefix(strprintf(
            "rank %d was still writing into this rank's output after %d ms (its memory may "
            "still change): ",
            peer, kLeaveWaitMs));
      sched_yield();
    }
  }
  return error;
}

size_t direct_min_bytes(const ddl_comm *comm) {
  return comm->oversubscribed ? kDirectMinBytesOversubscribed : kDirectMinBytes;
}

}  // namespace

bool direct_collective_applies(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective != Collective::kAllreduce) return direct_copy_applies(comm, call);
  if (!comm->cma || call.collective != Collective::kAllreduce || call.count == 0) return false;
  const std::string &forced = comm->config.algorithm;
  if (!forced.empty()) return forced == "direct";
  return call.count * datatype_size(static_cast<ddl_datatype_t>(call.dtype)) >=
         direct_min_bytes(comm);
}

std::string why_direct(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective != Collective::kAllreduce) return why_direct_copy(comm, call);
  if (comm->config.algorithm == "direct") return "direct (forced by DDL_ALGO)";
  return strprintf("direct (single copy, every rank on this host, >= %zu B%s)",
                   direct_min_bytes(comm), comm->oversubscribed ? " with ranks sharing cores" : "");
}

Status run_direct_collective(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                             uint64_t call_number, bool *found_failure) {
  *found_failure = false;
  if (call.collective != Collective::kAllreduce)
    return run_direct_copy(comm, call, exec, call_number, found_failure);
  if (!comm->direct_exchange) DDL_RETURN_IF_ERROR(make_plans(comm));
  // Open before anyone learns where this rank's buffers are.
  comm->gates->open(call_number);

  // The exchange carries this allreduce's signature: ranks that disagree about the call
  // fail here, before anyone touches another's memory.
  BufferAddresses mine;
  mine.input = reinterpret_cast<uintptr_t>(exec.input);
  mine.output = reinterpret_cast<uintptr_t>(exec.output);
  const size_t bytes = call.count * datatype_size(exec.dtype);
  if (!shared_buffer_find(exec.input, bytes, &mine.input_ref) ||
      !shared_buffer_find(exec.output, bytes, &mine.output_ref))
    mine.input_ref = mine.output_ref = SharedRef();
  std::vector<BufferAddresses> peers(comm->nranks);
  ExecArgs exchange = exec;
  exchange.input = &mine;
  exchange.output = peers.data();
  exchange.dtype = DDL_UINT8;
  Status s = comm->executor.run(*comm->direct_exchange, exchange, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return leave_with(comm, call_number, s.prefix("exchanging buffer addresses: "));
  }

  const BlockSplit split(call.count, comm->nranks);
  int failed_peer = -1;
  const std::vector<PeerView> views = map_peers(comm, peers, bytes);
  s = reduce_and_push_block(comm, exec, peers, views, split.block(comm->rank), call_number,
                            &failed_peer);
  if (!s.ok())
    return leave_with(comm, call_number,
                      explain_peer_failure(comm, exec, failed_peer, s, found_failure));
  // Nobody returns (and lets its caller reuse the buffers) while a peer still reads its
  // input or writes its output.
  ExecArgs barrier = exec;
  barrier.signature = nullptr;  // checked by the exchange
  s = comm->executor.run(*comm->direct_barrier, barrier, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return leave_with(comm, call_number,
                      s.prefix("waiting for every rank to finish reading and writing: "));
  }
  comm->gates->close();
  return Status::Ok();
}

}  // namespace ddl

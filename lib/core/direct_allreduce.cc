#include "lib/core/direct_allreduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "lib/algorithms/blocks.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
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

// A peer's buffers as this rank reads them: mapped here (its allocations), or null to read
// them through the kernel.
struct PeerView {
  const char *input = nullptr;
  const char *output = nullptr;
};

// Maps what peers publish from ddl_mem_alloc. A mapping that fails costs speed, not the call:
// that peer is read through the kernel.
std::vector<PeerView> map_peers(ddl_comm *comm, const std::vector<BufferAddresses> &peers,
                                size_t bytes) {
  std::vector<PeerView> views(comm->nranks);
  comm->peer_maps.make_room(2 * static_cast<size_t>(comm->nranks));
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    const BufferAddresses &theirs = peers[peer];
    if (theirs.input_ref.fd < 0 || theirs.output_ref.fd < 0) continue;
    Status s = comm->peer_maps.map(comm->pids[peer], theirs.input_ref, bytes, &views[peer].input);
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

// This rank's block, reduced into its output piece by piece: each peer's part of a piece is
// read into a cache-sized landing buffer and combined from there.
Status reduce_block(ddl_comm *comm, const ExecArgs &exec, const std::vector<BufferAddresses> &peers,
                    const std::vector<PeerView> &views, const Extent &block, int *failed_peer) {
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
  }
  return Status::Ok();
}

// Every peer's block, copied from its output (where it reduced it) straight into this
// rank's output.
Status gather_blocks(ddl_comm *comm, const ExecArgs &exec,
                     const std::vector<BufferAddresses> &peers, const std::vector<PeerView> &views,
                     const BlockSplit &split, int *failed_peer) {
  const size_t elem = datatype_size(exec.dtype);
  char *output = static_cast<char *>(exec.output);
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    const Extent block = split.block(peer);
    const size_t offset = block.offset * elem, bytes = block.count * elem;
    if (views[peer].output) {
      std::memcpy(output + offset, views[peer].output + offset, bytes);
      continue;
    }
    Status s =
        cma_read(comm->pids[peer], reinterpret_cast<const char *>(peers[peer].output) + offset,
                 output + offset, bytes);
    if (!s.ok()) {
      *failed_peer = peer;
      return s.prefix(
          strprintf("reading rank %d's result (%zu B at offset %zu): ", peer, bytes, offset));
    }
  }
  return Status::Ok();
}

size_t direct_min_bytes(const ddl_comm *comm) {
  return comm->oversubscribed ? kDirectMinBytesOversubscribed : kDirectMinBytes;
}

}  // namespace

bool direct_allreduce_applies(const ddl_comm *comm, const CollectiveCall &call) {
  if (!comm->cma || call.collective != Collective::kAllreduce || call.count == 0) return false;
  const std::string &forced = comm->config.algorithm;
  if (!forced.empty()) return forced == "direct";
  return call.count * datatype_size(static_cast<ddl_datatype_t>(call.dtype)) >=
         direct_min_bytes(comm);
}

std::string why_direct_allreduce(const ddl_comm *comm) {
  if (comm->config.algorithm == "direct") return "direct (forced by DDL_ALGO)";
  return strprintf("direct (single copy, every rank on this host, >= %zu B%s)",
                   direct_min_bytes(comm), comm->oversubscribed ? " with ranks sharing cores" : "");
}

Status run_direct_allreduce(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                            bool *found_failure) {
  *found_failure = false;
  if (!comm->direct_exchange) DDL_RETURN_IF_ERROR(make_plans(comm));

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
    return s.prefix("exchanging buffer addresses: ");
  }

  const BlockSplit split(call.count, comm->nranks);
  int failed_peer = -1;
  const std::vector<PeerView> views = map_peers(comm, peers, bytes);
  s = reduce_block(comm, exec, peers, views, split.block(comm->rank), &failed_peer);
  if (!s.ok()) return explain_peer_failure(comm, exec, failed_peer, s, found_failure);
  ExecArgs barrier = exec;
  barrier.signature = nullptr;  // checked by the exchange
  s = comm->executor.run(*comm->direct_barrier, barrier, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return s.prefix("waiting for every rank to reduce its block: ");
  }
  s = gather_blocks(comm, exec, peers, views, split, &failed_peer);
  if (!s.ok()) return explain_peer_failure(comm, exec, failed_peer, s, found_failure);
  // Nobody returns (and lets its caller reuse the buffers) while a peer still reads them.
  s = comm->executor.run(*comm->direct_barrier, barrier, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return s.prefix("waiting for every rank to finish copying: ");
  }
  return Status::Ok();
}

}  // namespace ddl

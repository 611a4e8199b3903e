#include "lib/core/direct_copy.h"

#include <cstring>
#include <vector>

#include "lib/common/datatype.h"

#include "lib/algorithms/registry.h"
#include "lib/core/flat_collectives.h"
#include "transports/shm/cma.h"
#include "transports/shm/flat_slots.h"

namespace ddl {
namespace {

// What a rank reads from its peers (the root's buffer; the P - 1 other blocks), from which
// one kernel copy beats the alternatives when every rank has a core: the slots' two
// copies up to here, the cells' two copies with a handshake per 32 KB above.
constexpr size_t kDirectMinRead = 16 << 10;

// Where a rank's buffer is, as published in its slot: the broadcast's buffer (read only at
// the root), the allgather's input block, the send buffer of an alltoall, a gather or a
// scatter's root. For the calls whose blocks lie where only their owner knows (the v forms,
// an in-place alltoall's copy) a Block per rank follows it: where that rank's block starts,
// in bytes from `address`, and how long it is (which the reader compares with its own count).
struct PublishedBuffer {
  uint64_t address = 0;
  uint64_t blocks = 0;  // Blocks that follow
};
struct Block {
  uint64_t offset = 0, bytes = 0;
};

// The slot holds the header and one Block per rank.
bool blocks_fit(const ddl_comm *comm) {
  return sizeof(PublishedBuffer) + sizeof(Block) * static_cast<size_t>(comm->nranks) <=
         FlatSlots::kCapacity;
}

bool is_alltoall(Collective c) {
  return c == Collective::kAlltoall || c == Collective::kAlltoallv;
}
bool is_gather(Collective c) {
  return c == Collective::kGather || c == Collective::kGatherv;
}
bool is_scatter(Collective c) {
  return c == Collective::kScatter || c == Collective::kScatterv;
}

// A DDL_ALGO that names one of this collective's schedules (chain, ring) wants that schedule.
bool schedule_forced(const ddl_comm *comm, const CollectiveCall &call) {
  const std::string &forced = comm->config.algorithm;
  if (forced.empty()) return false;
  for (const AlgorithmInfo &info : algorithm_table())
    if (info.collective == call.collective && forced == info.name) return true;
  return false;
}

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

// Allgather: each peer's block into its place, then this rank's own (out of place).
Status read_allgather(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                      uint64_t call_number, int *failed_peer) {
  const size_t block = call_bytes(call);
  char *output = static_cast<char *>(exec.output);
  for (int k = 1; k < comm->nranks; ++k) {
    const int peer = (comm->rank + k) % comm->nranks;
    PublishedBuffer theirs;
    std::memcpy(&theirs, comm->flat->data(peer, call_number), sizeof theirs);
    Status s = cma_read(comm->pids[peer], reinterpret_cast<const void *>(theirs.address),
                        output + block * static_cast<size_t>(peer), block);
    if (!s.ok()) {
      *failed_peer = peer;
      return s.prefix(strprintf("reading rank %d's block (%zu B): ", peer, block));
    }
  }
  char *mine = output + block * static_cast<size_t>(comm->rank);
  if (exec.input != mine) std::memcpy(mine, exec.input, block);
  return Status::Ok();
}

// What this rank publishes for an alltoall, gather or scatter: its send buffer and, where
// its peers cannot compute them, its blocks. In place an alltoall's blocks are first copied
// aside (into the communicator's scratch): the receives overwrite the buffer peers read.
Status publish_blocks(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                      std::vector<unsigned char> *slot) {
  const Collective c = call.collective;
  const size_t n = static_cast<size_t>(comm->nranks);
  const size_t elem = datatype_size(exec.dtype);
  PublishedBuffer mine;
  mine.address = reinterpret_cast<uintptr_t>(exec.input);
  std::vector<Block> blocks;
  const BlockLayout *layout = call.layout.get();
  const bool in_place = is_alltoall(c) && exec.input == exec.output;
  if (c == Collective::kAlltoallv || c == Collective::kScatterv || in_place) {
    const std::vector<size_t> *counts = nullptr, *displs = nullptr;
    std::vector<size_t> uniform_counts, uniform_displs;
    if (c == Collective::kAlltoall) {
      uniform_counts.assign(n, call.count);
      for (size_t j = 0; j < n; ++j) uniform_displs.push_back(j * call.count);
      counts = &uniform_counts;
      displs = &uniform_displs;
    } else if (in_place) {  // MPI_IN_PLACE: what is sent lies where it is received
      counts = &layout->recv_counts;
      displs = &layout->recv_displs;
    } else {
      counts = &layout->send_counts;
      displs = &layout->send_displs;
    }
    if (!counts->empty())  // a scatterv's other ranks publish no blocks
      for (size_t j = 0; j < n; ++j)
        blocks.push_back(Block{BlockLayout::at(*counts, *displs, static_cast<int>(j)) * elem,
                               (*counts)[j] * elem});
    if (in_place) {
      const size_t extent = BlockLayout::extent(*counts, *displs) * elem;
      if (comm->scratch.size() < extent) comm->scratch.resize(extent);
      std::memcpy(comm->scratch.data(), exec.input, extent);
      mine.address = reinterpret_cast<uintptr_t>(comm->scratch.data());
    }
  } else if (is_gather(c)) {  // the root compares the size with its count for this rank
    blocks.push_back(Block{0, call.count * elem});
  }
  mine.blocks = blocks.size();
  slot->resize(sizeof mine + sizeof(Block) * blocks.size());
  std::memcpy(slot->data(), &mine, sizeof mine);
  if (!blocks.empty())
    std::memcpy(slot->data() + sizeof mine, blocks.data(), sizeof(Block) * blocks.size());
  return Status::Ok();
}

// Reads `bytes` of `peer`'s block for this rank into `into`, after checking that the peer's
// view of the block's size agrees (`which`: the block of the peer's published list, or -1
// when the peer published none and the block lies at `offset`).
Status read_block(ddl_comm *comm, uint64_t call_number, int peer, int which, size_t offset,
                  void *into, size_t bytes) {
  PublishedBuffer theirs;
  const char *slot = comm->flat->data(peer, call_number);
  std::memcpy(&theirs, slot, sizeof theirs);
  if (which >= 0 && static_cast<uint64_t>(which) < theirs.blocks) {
    Block block;
    std::memcpy(&block, slot + sizeof theirs + sizeof(Block) * static_cast<size_t>(which),
                sizeof block);
    if (block.bytes != bytes)
      return invalid_usage(
          "rank %d sends %llu B but this rank expects %zu B from it (counts that disagree "
          "between the ranks)",
          peer, static_cast<unsigned long long>(block.bytes), bytes);
    offset = block.offset;
  }
  if (bytes == 0) return Status::Ok();
  Status s = cma_read(comm->pids[peer], reinterpret_cast<const void *>(theirs.address + offset),
                      into, bytes);
  return s.ok() ? s : s.prefix(strprintf("reading rank %d's block (%zu B): ", peer, bytes));
}

// Alltoall(v), gather(v), scatter(v) by single copy: each rank reads, from each peer whose
// buffer holds data for it, its block straight into place.
Status run_direct_blocks(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                         uint64_t call_number, bool *found_failure) {
  const Collective c = call.collective;
  const int n = comm->nranks, r = comm->rank;
  const size_t elem = datatype_size(exec.dtype);
  const BlockLayout *layout = call.layout.get();
  std::vector<unsigned char> slot;
  DDL_RETURN_IF_ERROR(publish_blocks(comm, call, exec, &slot));
  // Joining checks every rank's call stamp: ranks that disagree about the call fail here,
  // before anyone reads another's memory.
  DDL_RETURN_IF_ERROR(flat_join(comm, exec, call_number, slot.data(), slot.size(), found_failure));
  char *output = static_cast<char *>(exec.output);
  // Where block j of this rank's output goes and how long it is.
  auto recv_at = [&](int j) {
    return c == Collective::kAlltoall || c == Collective::kGather
               ? Block{static_cast<size_t>(j) * call.count * elem, call.count * elem}
               : Block{BlockLayout::at(layout->recv_counts, layout->recv_displs, j) * elem,
                       layout->recv_counts[j] * elem};
  };
  Status s;
  int failed_peer = call.root;
  if (is_alltoall(c)) {
    // Starting with the next rank, so that the ranks do not all read the same peer at once.
    for (int k = 1; k < n && s.ok(); ++k) {
      const int peer = (r + k) % n;
      const Block at = recv_at(peer);
      failed_peer = peer;
      s = read_block(comm, call_number, peer, r, static_cast<size_t>(r) * call.count * elem,
                     output + at.offset, at.bytes);
    }
    // The own block: a plain copy (in place it is where it belongs already).
    const Block at = recv_at(r);
    if (s.ok() && exec.input != exec.output) {
      const size_t from = c == Collective::kAlltoall
                              ? static_cast<size_t>(r) * call.count * elem
                              : BlockLayout::at(layout->send_counts, layout->send_displs, r) * elem;
      std::memcpy(output + at.offset, static_cast<const char *>(exec.input) + from, at.bytes);
    }
  } else if (is_gather(c) && r == call.root) {
    for (int k = 0; k < n && s.ok(); ++k) {
      const int peer = (r + k) % n;
      const Block at = recv_at(peer);
      if (peer == r) {  // in place it is there already
        if (exec.input != output + at.offset) std::memcpy(output + at.offset, exec.input, at.bytes);
        continue;
      }
      failed_peer = peer;
      s = read_block(comm, call_number, peer, 0, 0, output + at.offset, at.bytes);
    }
  } else if (is_scatter(c)) {
    const size_t bytes = call.count * elem;
    if (r != call.root) {
      s = read_block(comm, call_number, call.root, r, static_cast<size_t>(r) * bytes, output,
                     bytes);
    } else {
      const size_t offset =
          c == Collective::kScatter
              ? static_cast<size_t>(r) * bytes
              : BlockLayout::at(layout->send_counts, layout->send_displs, r) * elem;
      const char *from = static_cast<const char *>(exec.input) + offset;
      if (from != output) std::memcpy(output, from, bytes);
    }
  }
  if (!s.ok()) {
    if (s.code() == DDL_ERR_INVALID_USAGE) *found_failure = true;
    return explain_peer_failure(comm, exec, failed_peer, s, found_failure);
  }
  // Only the root's buffer is read in a scatter: the others need not wait.
  if (is_scatter(c) && r != call.root) {
    comm->flat->finish(call_number);
    return Status::Ok();
  }
  return flat_leave(comm, exec, call_number, found_failure);
}

}  // namespace

bool direct_copy_applies(const ddl_comm *comm, const CollectiveCall &call) {
  const Collective c = call.collective;
  if (!comm->cma || !comm->flat) return false;
  if (c != Collective::kBroadcast && c != Collective::kAllgather && !is_alltoall(c) &&
      !is_gather(c) && !is_scatter(c))
    return false;
  if (schedule_forced(comm, call) || !blocks_fit(comm)) return false;
  if (comm->config.algorithm == "direct") return true;
  // The v forms' sizes are known only to each rank: the choice cannot depend on them, and
  // the single copy serves every size (a kernel copy per block, where the cells need two).
  if (per_peer_counts(c)) return true;
  if (call.count == 0) return false;
  const size_t bytes = call_bytes(call);
  // With ranks sharing cores, the slots' single handshake wins for all they hold, and an
  // allgather keeps the ring: on 4 ranks and 2 cores the single copy measured 11-36% slower
  // than the ring at 128 KB-32 MB (each rank's P - 1 kernel copies pin every page they read;
  // bench/README.md, loaded machine), while the broadcast's single copy led from 512 KB.
  if (comm->oversubscribed)
    return (c == Collective::kBroadcast || c == Collective::kScatter) &&
           bytes > FlatSlots::kCapacity;
  // What the rank that reads the most reads.
  const size_t read = c == Collective::kBroadcast || c == Collective::kScatter
                          ? bytes
                          : bytes * static_cast<size_t>(comm->nranks - 1);
  return read >= kDirectMinRead;
}

std::string why_direct_copy(const ddl_comm *comm, const CollectiveCall &call) {
  if (comm->config.algorithm == "direct") return "direct (forced by DDL_ALGO)";
  if (per_peer_counts(call.collective))
    return "direct (single copy, every rank on this host: per-peer counts)";
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
  const Collective c = call.collective;
  if (is_alltoall(c) || is_gather(c) || is_scatter(c))
    return run_direct_blocks(comm, call, exec, call_number, found_failure);
  PublishedBuffer mine;
  mine.address = reinterpret_cast<uintptr_t>(exec.input);
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

#include "lib/core/peer_buffers.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/process_liveness.h"
#include "lib/core/collectives.h"
#include "lib/core/comm.h"
#include "lib/transports/shm/cma.h"

namespace ddl {
namespace {

// How long a rank that leaves a call early waits for peers still writing into its output.
constexpr int kLeaveWaitMs = 2000;
// The barrier's messages travel in the same call as the address exchange: their tags start
// above anything that exchange uses.
constexpr uint32_t kBarrierTagOffset = 1u << 23;

Status make_plans(ddl_comm *comm, size_t published_bytes) {
  CollectiveArgs args;
  args.nranks = comm->nranks;
  args.rank = comm->rank;
  args.elem_size = 1;
  args.collective = Collective::kAllgather;
  args.count = published_bytes;
  args.tiers = comm->algorithm_tiers;
  args.hosts = comm->hosts;
  DDL_RETURN_IF_ERROR(make_comm_plan(comm, args, 0, &comm->publish_exchange, nullptr));
  args.collective = Collective::kBarrier;
  args.count = 0;
  return make_comm_plan(comm, args, kBarrierTagOffset, &comm->publish_barrier, nullptr);
}

}  // namespace

Status PeerBuffers::publish(ddl_comm *comm, const ExecArgs &exec, size_t input_bytes,
                            size_t output_bytes, uint64_t call_number, bool *found_failure) {
  *found_failure = false;
  comm_ = comm;
  call_ = call_number;
  if (!comm->publish_exchange) DDL_RETURN_IF_ERROR(make_plans(comm, sizeof(Addresses)));
  // Open before anyone learns where this rank's buffers are. A rank alone on its host has
  // no gates (no shared memory), and no peer to write into it.
  if (comm->gates) comm->gates->open(call_number);
  Addresses mine;
  mine.input = reinterpret_cast<uintptr_t>(exec.input);
  mine.output = reinterpret_cast<uintptr_t>(exec.output);
  if (!shared_buffer_find(exec.input, input_bytes, &mine.input_ref) ||
      !shared_buffer_find(exec.output, output_bytes, &mine.output_ref))
    mine.input_ref = mine.output_ref = SharedRef();
  addresses_.assign(comm->nranks, Addresses());
  ExecArgs exchange = exec;
  exchange.input = &mine;
  exchange.output = addresses_.data();
  exchange.dtype = DDL_UINT8;
  exchange.peer_memory = nullptr;
  Status s = comm->executor.run(*comm->publish_exchange, exchange, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return leave_with(s.prefix("exchanging buffer addresses: "));
  }
  map_peers(input_bytes, output_bytes);
  return Status::Ok();
}

// Maps what host peers publish from ddl_mem_alloc. A mapping that fails costs speed, not the
// call: that peer is read and written through the kernel.
void PeerBuffers::map_peers(size_t input_bytes, size_t output_bytes) {
  views_.assign(comm_->nranks, View());
  std::vector<std::pair<pid_t, SharedRef>> refs;
  auto published = [&](int peer) {
    const Addresses &theirs = addresses_[peer];
    return peer != comm_->rank && theirs.input_ref.fd >= 0 && theirs.output_ref.fd >= 0;
  };
  for (int peer : comm_->host_ranks) {
    if (!published(peer)) continue;
    refs.emplace_back(comm_->pids[peer], addresses_[peer].input_ref);
    refs.emplace_back(comm_->pids[peer], addresses_[peer].output_ref);
  }
  if (refs.empty()) return;
  comm_->peer_maps.make_room(refs);
  for (int peer : comm_->host_ranks) {
    if (!published(peer)) continue;
    const Addresses &theirs = addresses_[peer];
    char *input = nullptr, *output = nullptr;
    Status s = comm_->peer_maps.map(comm_->pids[peer], theirs.input_ref, input_bytes, &input);
    if (s.ok())
      s = comm_->peer_maps.map(comm_->pids[peer], theirs.output_ref, output_bytes, &output);
    if (s.ok()) {
      views_[peer] = View{input, output};
    } else {
      DDL_DEBUG("reading rank %d through the kernel: mapping its buffers failed: %s", peer,
                s.message().c_str());
    }
  }
}

Status PeerBuffers::read(int peer, size_t offset, void *into, size_t bytes) {
  if (views_[peer].input) {
    std::memcpy(into, views_[peer].input + offset, bytes);
    return Status::Ok();
  }
  Status s = cma_read(comm_->pids[peer],
                      reinterpret_cast<const char *>(addresses_[peer].input) + offset, into, bytes);
  return s.ok() ? s
                : s.prefix(strprintf("reading rank %d's input (%zu B at offset %zu): ", peer, bytes,
                                     offset));
}

Status PeerBuffers::write(int peer, size_t offset, const void *from, size_t bytes) {
  const int gate = comm_->host_index[peer];
  if (!comm_->gates->begin_write(gate, call_))
    return remote_error("rank %d left the call before this rank wrote its result", peer);
  Status s = Status::Ok();
  if (views_[peer].output)
    std::memcpy(views_[peer].output + offset, from, bytes);
  else
    s = cma_write(comm_->pids[peer], reinterpret_cast<char *>(addresses_[peer].output) + offset,
                  from, bytes);
  comm_->gates->end_write(gate);
  return s.ok() ? s
                : s.prefix(strprintf("writing into rank %d's output (%zu B at offset %zu): ", peer,
                                     bytes, offset));
}

Status PeerBuffers::finish(const ExecArgs &exec, bool *found_failure) {
  // Nobody returns (and lets its caller reuse the buffers) while a peer still reads its
  // input or writes its output.
  ExecArgs barrier = exec;
  barrier.signature = nullptr;  // checked by the exchange
  barrier.peer_memory = nullptr;
  Status s = comm_->executor.run(*comm_->publish_barrier, barrier, comm_->routes.get());
  if (!s.ok()) {
    *found_failure = comm_->executor.found_failure();
    return leave_with(s.prefix("waiting for every rank to finish reading and writing: "));
  }
  if (comm_->gates) comm_->gates->close();
  return Status::Ok();
}

// A peer still announced as writing long after is stuck mid-copy (stopped, swapped out): the
// error says so rather than wait forever. A peer that died writes nothing.
Status PeerBuffers::leave_with(Status error) {
  if (!comm_->gates) return error;
  comm_->gates->close();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLeaveWaitMs);
  for (int peer : comm_->host_ranks) {
    if (peer == comm_->rank) continue;
    while (comm_->gates->writing(comm_->host_index[peer], call_) &&
           process_is_alive(comm_->pids[peer])) {
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

Status run_with_peer_buffers(ddl_comm *comm, const Plan &plan, ExecArgs exec, uint64_t call_number,
                             bool *found_failure) {
  const size_t elem = datatype_size(exec.dtype);
  PeerBuffers &peers = comm->peer_buffers;
  DDL_RETURN_IF_ERROR(peers.publish(comm, exec, plan.schedule.input_count * elem,
                                    plan.schedule.output_count * elem, call_number, found_failure));
  exec.peer_memory = &peers;
  Status s = comm->executor.run(plan, exec, comm->routes.get());
  if (!s.ok()) {
    *found_failure = comm->executor.found_failure();
    return peers.leave_with(s);
  }
  return peers.finish(exec, found_failure);
}

}  // namespace ddl

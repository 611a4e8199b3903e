#include "lib/core/flat_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "lib/common/clock.h"
#include "lib/common/datatype.h"
#include "lib/core/call_checks.h"
#include "lib/reduce/reduce.h"
#include "lib/transports/shm/flat_slots.h"

namespace ddl {
namespace {

// A rank reads what it needs of P - 1 contributions (of the root's alone, for a broadcast).
// When every rank has a core, the allreduce schedules catch up once those reads reach about
// 16 KB (ddl_perf, 2 ranks, 16 KB: flat 5.5-8.8 us, ring
// 6.0-6.8, rhd 5.5). When ranks share cores, every step of a schedule may wait for a rank to
// be scheduled, and the slots lead up to their capacity (64 KB: 54 us against rhd's 82 on 4
// ranks and 2 cores, 199 against 253 on 8).
constexpr size_t kFlatReadBudget = 16 << 10;
// How often (in idle polls) the deadline, notices, stamps and the peer's life are looked at.
constexpr int kCheckEvery = 256;

// An allgatherv's slot holds its block's size, then the block: a reader checks the size it
// expects (its recvcounts) against what the rank published.
constexpr size_t kSizePrefix = sizeof(uint64_t);

// What the rank that reads the most (the root of a gather or reduce) reads from its peers'
// slots for this call, in all; for an allgatherv all blocks less one rank's share (the same
// on every rank, as every rank must decide alike).
size_t bytes_read(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective == Collective::kAllgatherv) return gathered_read_bytes(comm, call);
  const size_t bytes = call.count * datatype_size(static_cast<ddl_datatype_t>(call.dtype));
  return call.collective == Collective::kBroadcast || call.collective == Collective::kScatter
             ? bytes
             : bytes * static_cast<size_t>(comm->nranks - 1);
}

// What `rank` publishes in its slot for this call.
size_t bytes_published(const ddl_comm *comm, const CollectiveCall &call, int rank) {
  const size_t bytes = call.count * datatype_size(static_cast<ddl_datatype_t>(call.dtype));
  const size_t all = bytes * static_cast<size_t>(comm->nranks);
  switch (call.collective) {
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      return all;
    case Collective::kBroadcast:
      return rank == call.root ? bytes : 0;
    case Collective::kScatter:
      return rank == call.root ? all : 0;
    case Collective::kBarrier:
      return 0;
    case Collective::kAllgatherv:
      return kSizePrefix + gathered_block(call, rank).bytes;
    default:
      return bytes;
  }
}

// The collectives the slots serve (run_flat_collective's cases), named one by one so that a
// collective added later stays off them until they implement it: each rank's share of the data
// has one size, or (the allgatherv) every rank knows every share; the other v forms' counts
// are known only to their ranks, and point to point is not collective.
bool slotted(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kBroadcast:
    case Collective::kAllgatherv:
    case Collective::kBarrier:
      return true;
    default:
      return false;
  }
}

// What a wait that lasts tells: another call of a peer (its messages' stamps), a notice, an
// abort, a dead peer. The deadline is the caller's.
Status check_while_waiting(ddl_comm *comm, const ExecArgs &exec, int peer, const char *what,
                           bool *found_failure) {
  // Every path: notices come over the network even when every peer shares this host, and a
  // plain progress() looks there only every so many calls, too rarely at this pace.
  comm->routes->progress_all();
  int other = -1;
  CallStamp theirs;
  if (comm->routes->stamp_mismatch(&other, &theirs)) {
    *found_failure = true;
    return stamp_mismatch_error(other, theirs, exec.rank, *exec.signature);
  }
  if (exec.notice && exec.notice->done) return notice_error(exec);
  if (exec.abort_flag && exec.abort_flag->load(std::memory_order_relaxed))
    return invalid_usage("aborted by ddl_comm_abort while waiting");
  Status alive = comm->routes->peer_status(peer);
  if (!alive.ok())
    return explain_peer_failure(comm, exec, peer,
                                alive.prefix(strprintf("waiting for rank %d %s: ", peer, what)),
                                found_failure);
  return Status::Ok();
}

// Polls until ready(peer) holds for every peer; past the deadline, names those it does not.
template <typename Ready>
Status wait_for_peers(ddl_comm *comm, const ExecArgs &exec, const char *what, Ready ready,
                      bool *found_failure) {
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    for (int idle = 1; !ready(peer); ++idle) {
      if (idle % kCheckEvery == 0) {
        Status s = check_while_waiting(comm, exec, peer, what, found_failure);
        if (!s.ok()) return s;
        if (coarse_now() >= exec.deadline) {
          std::string silent;
          for (int p = peer; p < comm->nranks; ++p)
            if (p != comm->rank && !ready(p))
              silent += (silent.empty() ? "" : ", ") + std::to_string(p);
          return timeout_error("timed out (shared slots) waiting for ranks %s %s", silent.c_str(),
                               what);
        }
      }
      idle_pause(idle, exec);
    }
  }
  return Status::Ok();
}

// output = the contributions' `count` elements at byte `offset` of every slot, combined in
// rank order: every rank that builds the same block gets the same bits. The own
// contribution is read from the slot too: in place, the output is the input.
void combine_in_rank_order(const ddl_comm *comm, const ExecArgs &exec, const FlatSlots &slots,
                           uint64_t call_number, size_t offset, size_t count) {
  char *output = static_cast<char *>(exec.output);
  for (int r = 1; r < comm->nranks; ++r) {
    const ddl_op_t op = exec.op == DDL_AVG && r + 1 < comm->nranks ? DDL_SUM : exec.op;
    reduce(exec.dtype, op, output, r == 1 ? slots.data(0, call_number) + offset : output,
           slots.data(r, call_number) + offset, count, comm->nranks);
  }
}

}  // namespace

bool flat_collective_possible(const ddl_comm *comm, const CollectiveCall &call) {
  if (!comm->flat || !slotted(call.collective)) return false;
  if (call.collective == Collective::kBarrier) return true;
  const bool gatherv = call.collective == Collective::kAllgatherv;
  // The executor checks empty calls' signatures.
  if (gatherv ? gathered_read_bytes(comm, call) == 0 : call.count == 0) return false;
  // The root publishes the most, and every rank decides alike.
  const bool root_publishes =
      call.collective == Collective::kBroadcast || call.collective == Collective::kScatter;
  const int biggest = root_publishes ? call.root : comm->rank;
  size_t largest = bytes_published(comm, call, biggest);
  for (int r = 0; gatherv && r < comm->nranks; ++r)  // blocks of every size
    largest = std::max(largest, bytes_published(comm, call, r));
  return largest <= FlatSlots::kCapacity;
}

bool flat_collective_applies(const ddl_comm *comm, const CollectiveCall &call) {
  if (!flat_collective_possible(comm, call)) return false;
  return call.collective == Collective::kBarrier || comm->oversubscribed ||
         bytes_read(comm, call) <= kFlatReadBudget;
}

std::string why_flat_collective(const ddl_comm *comm, const CollectiveCall &call) {
  if (call.collective == Collective::kBarrier)
    return "flat (shared slots, every rank on this host)";
  if (comm->oversubscribed)
    return strprintf(
        "flat (shared slots, every rank on this host, <= %zu B per slot with ranks "
        "sharing cores)",
        FlatSlots::kCapacity);
  return strprintf("flat (shared slots, every rank on this host, <= %zu B read per rank)",
                   kFlatReadBudget);
}

Status flat_join(ddl_comm *comm, const ExecArgs &exec, uint64_t call_number, const void *data,
                 size_t bytes, bool *found_failure) {
  *found_failure = false;
  FlatSlots &slots = *comm->flat;
  const CallStamp stamp = stamp_of(*exec.signature);
  // A peer that went another way sends messages of this call: their stamps tell.
  comm->routes->begin_call(exec.seq, stamp);
  uint64_t needed = 0;
  if (!slots.slot_known_free(call_number, &needed)) {
    Status s = wait_for_peers(
        comm, exec, "to finish reading this rank's previous contribution",
        [&](int peer) { return slots.peer_finished(peer, needed); }, found_failure);
    if (!s.ok()) return s;
    slots.peers_finished(needed);
  }
  slots.publish(call_number, stamp, data, bytes);
  Status s = wait_for_peers(
      comm, exec, "to join the call", [&](int peer) { return slots.published(peer, call_number); },
      found_failure);
  if (!s.ok()) return s;
  for (int peer = 0; peer < comm->nranks; ++peer) {
    const CallStamp &theirs = slots.stamp(peer, call_number);
    if (std::memcmp(&theirs, &stamp, sizeof stamp) == 0) continue;
    *found_failure = true;
    return stamp_mismatch_error(peer, theirs, exec.rank, *exec.signature);
  }
  return Status::Ok();
}

Status flat_leave(ddl_comm *comm, const ExecArgs &exec, uint64_t call_number, bool *found_failure) {
  *found_failure = false;
  FlatSlots &slots = *comm->flat;
  slots.finish(call_number);
  Status s = wait_for_peers(
      comm, exec, "to finish reading this rank's buffers",
      [&](int peer) { return slots.peer_finished(peer, call_number); }, found_failure);
  if (s.ok()) slots.peers_finished(call_number);
  return s;
}

// *found_failure: this rank found a problem every rank should hear of.
Status FlatRunner::run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                       uint64_t call_number, bool *found_failure) {
  FlatSlots &slots = *comm->flat;
  const void *published = exec.input;
  const size_t published_bytes = bytes_published(comm, call, comm->rank);
  if (call.collective == Collective::kAllgatherv) {  // its size first
    if (comm->scratch.size() < published_bytes) comm->scratch.resize(published_bytes);
    const uint64_t size = published_bytes - kSizePrefix;
    std::memcpy(comm->scratch.data(), &size, kSizePrefix);
    std::memcpy(comm->scratch.data() + kSizePrefix, exec.input, size);
    published = comm->scratch.data();
  }
  DDL_RETURN_IF_ERROR(
      flat_join(comm, exec, call_number, published, published_bytes, found_failure));
  const size_t bytes = call.count * datatype_size(exec.dtype);
  char *output = static_cast<char *>(exec.output);
  const bool root = comm->rank == call.root;
  switch (call.collective) {
    case Collective::kAllreduce:
      combine_in_rank_order(comm, exec, slots, call_number, 0, call.count);
      break;
    case Collective::kReduce:
      if (root) combine_in_rank_order(comm, exec, slots, call_number, 0, call.count);
      break;
    case Collective::kAlltoall:
      // Own block included, from the slot: in place, the output is the input.
      for (int r = 0; r < comm->nranks; ++r)
        std::memcpy(output + bytes * r, slots.data(r, call_number) + bytes * comm->rank, bytes);
      break;
    case Collective::kGather:
      for (int r = 0; root && r < comm->nranks; ++r)
        std::memcpy(output + bytes * r, slots.data(r, call_number), bytes);
      break;
    case Collective::kScatter:
      std::memcpy(output, slots.data(call.root, call_number) + bytes * comm->rank, bytes);
      break;
    case Collective::kReduceScatter:
      combine_in_rank_order(comm, exec, slots, call_number, bytes * comm->rank, call.count);
      break;
    case Collective::kAllgather:
      // Own part included: in place it lands where it already is, with the same bytes.
      for (int r = 0; r < comm->nranks; ++r)
        std::memcpy(output + bytes * r, slots.data(r, call_number), bytes);
      break;
    case Collective::kBroadcast:
      if (comm->rank != call.root) std::memcpy(output, slots.data(call.root, call_number), bytes);
      break;
    case Collective::kAllgatherv:
      for (int r = 0; r < comm->nranks; ++r) {
        const char *slot = slots.data(r, call_number);
        uint64_t theirs = 0;
        std::memcpy(&theirs, slot, kSizePrefix);
        const BlockAt block = gathered_block(call, r);
        if (theirs != block.bytes) {
          *found_failure = true;
          return invalid_usage(
              "rank %d sends %llu B but this rank expects %zu B (counts that disagree between "
              "the ranks)",
              r, static_cast<unsigned long long>(theirs), block.bytes);
        }
        std::memcpy(output + block.offset, slot + kSizePrefix, theirs);
      }
      break;
    default:  // the barrier; the others are not slotted
      break;
  }
  slots.finish(call_number);
  return Status::Ok();
}

}  // namespace ddl

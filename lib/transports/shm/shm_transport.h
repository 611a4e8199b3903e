// ddl's own host-local transport: ranks on one host exchange messages through one shared
// segment (shm_segment.h), without system calls or locks on the hot path.
//
// Every ordered pair of local ranks (sender -> receiver) owns a channel: a ring of cells,
// each a 64-byte header and a payload. The sender copies a message into consecutive cells
// (fragments of at most one payload) and publishes each with a release store of its stamp;
// the receiver polls the stamp of the cell it expects next, uses the payload in place and
// hands the cell back by advancing a counter the sender reads.
//  - Small messages: one cell, a flag and an inline payload: one cache-line handoff.
//  - Large messages: pipelined through cache-sized cells. A receive that reduces
//    (post_recv_reduce) combines each fragment with the local operand straight out of the
//    cell, while the line the sender just wrote is still in the shared cache: one copy in,
//    no copy out.
// Matching is by (sequence number, tag), as in UCX. A message whose receive is not posted
// yet stays in its cell, so that a late receiver still reads it in place; only when
// something waits behind it (the next cell is full) is it moved aside into a heap buffer,
// so a channel never blocks a message the receiver is waiting for.
//
// A sender's messages to one peer leave in the order they were posted, fragments of one
// message back to back; that order is what lets the receiver match only first fragments.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "lib/transports/shm/shm_segment.h"
#include "lib/transports/transport.h"

namespace ddl {

// Segment geometry, chosen by the creator and written into the segment's header so that
// every rank reads the same one whatever its environment says.
struct ShmLayout {
  uint32_t nlocal = 0;      // ranks on this host
  uint32_t cells = 0;       // cells per channel
  uint32_t cell_bytes = 0;  // header + payload, a power of two
  size_t channel_bytes() const;
  size_t channels_bytes() const;  // all of them
  size_t segment_bytes() const;   // header, channels, slots (flat_slots.h), write_gates.h
  size_t payload_bytes() const { return cell_bytes - 64; }
};

// The default geometry for `nlocal` ranks (DDL_SHM_CELL_BYTES, DDL_SHM_CELLS override it).
ShmLayout choose_shm_layout(int nlocal);

class ShmTransport : public Transport {
 public:
  // `local_ranks`: the global ranks on this host, in the same order on every one of them;
  // `pids`: their process ids (for the liveness check). The segment must be initialized
  // (init_segment) by its creator before any rank uses it.
  static Status create(int rank, int nranks, const std::vector<int> &local_ranks,
                       const std::vector<pid_t> &pids, std::unique_ptr<ShmSegment> segment,
                       std::unique_ptr<ShmTransport> *out);
  // Writes the layout into a fresh segment of layout.segment_bytes().
  static void init_segment(ShmSegment *segment, const ShmLayout &layout);
  ~ShmTransport() override;
  // Closes the creator's descriptor once every local rank has mapped the segment.
  void close_segment_fd() { segment_->close_fd(); }
  // The part of the segment kept for FlatSlots: one block per local rank, in the order of
  // `local_ranks`, zero-filled at creation.
  char *flat_region() const;
  // The same for WriteGates, after it.
  char *gates_region() const;

  const char *name() const override { return "shm"; }
  bool serves(int peer) const { return peer >= 0 && peer < nranks_ && local_of_[peer] >= 0; }
  // The payload one channel's ring holds: what a sender writes without its receiver.
  size_t ring_bytes() const { return static_cast<size_t>(layout_.cells) * layout_.payload_bytes(); }
  Status post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) override;
  bool probe(int peer, uint32_t seq, uint32_t tag) override;
  bool reduces_on_receive(int peer) const override { return serves(peer); }
  bool carries_stamps(int peer) const override { return serves(peer); }
  void begin_call(uint32_t seq, const CallStamp &stamp) override;
  bool stamp_mismatch(int *peer, CallStamp *theirs) const override;
  bool stamp_seen(int peer) const override { return serves(peer) && seen_seq_[peer] == call_seq_; }
  Status post_recv_reduce(int peer, uint32_t seq, uint32_t tag, void *dst, const void *src,
                          size_t bytes, const ReduceSpec &spec, TransferRequest *req) override;
  bool progress() override;
  void cancel(TransferRequest *req) override;
  Status peer_status(int peer) const override;
  bool peer_death_final(int peer) const override { return serves(peer) && pid_dead_[peer]; }

 private:
  struct Cell;
  struct Control;
  // A posted send or receive (pooled: no allocation per message once warm).
  struct Op {
    TransferRequest *req = nullptr;
    bool is_send = false;
    bool reduce = false;
    uint32_t seq = 0, tag = 0;
    const char *src = nullptr;  // send: the message; reduce: the local operand
    char *dst = nullptr;        // receive: where the message (or the reduction) goes
    size_t bytes = 0;           // send: message size; receive: expected size
    size_t done = 0;            // bytes sent, or received
    size_t total = 0;           // receive: the size the sender announced
    ReduceSpec spec;
    CallStamp call;  // send: the call it belongs to
    int peer = -1;
  };
  // A message that arrived before its receive was posted.
  struct Early {
    uint32_t seq = 0, tag = 0;
    size_t total = 0, arrived = 0;
    CallStamp call;
    std::vector<char> data;
  };
  // What the fragments of the message now arriving on a channel go to.
  enum class Target : uint8_t { kNone, kOp, kEarly, kDiscard };
  struct Inbound {
    Control *control = nullptr;
    char *cells = nullptr;
    uint64_t consumed = 0;  // cells read and handed back
    Target target = Target::kNone;
    Op *op = nullptr;
    Early *early = nullptr;
    size_t offset = 0;     // of the current message's next fragment
    size_t remaining = 0;  // bytes of the current message still to come
    std::vector<Op *> posted;
    std::vector<std::unique_ptr<Early>> early_messages;
  };
  struct Outbound {
    Control *control = nullptr;
    char *cells = nullptr;
    uint64_t produced = 0;       // cells written
    uint64_t consumed_seen = 0;  // the receiver's counter, as last read
    std::deque<Op *> queue;      // sends not fully written yet, in order
  };

  ShmTransport(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  Cell *cell_at(char *cells, uint64_t index) const;
  Op *new_op();
  void free_op(Op *op);
  // A receive; it reduces into dst with src when spec is given, else copies into dst.
  Status post_receive(int peer, uint32_t seq, uint32_t tag, void *dst, const void *src,
                      size_t bytes, const ReduceSpec *spec, TransferRequest *req);
  // Writes as many fragments of `op` as there are free cells (at least one, even for an
  // empty message); true when all are written. Sets *wrote when it wrote any.
  bool write_fragments(Outbound &out, Op *op, bool *wrote);
  // Consumes what has arrived on one channel; true when anything was consumed.
  bool drain(Inbound &in);
  // Picks the target of the message whose first fragment is `cell`; false to leave it be.
  bool start_message(Inbound &in, const Cell *cell);
  void deliver(Inbound &in, Cell *cell);
  void apply(Op *op, size_t offset, const char *data, size_t bytes);
  void complete_receive(Op *op);
  // Compares the stamp of a message from `peer` with the current call's.
  void compare_stamp(int peer, uint32_t seq, const CallStamp &theirs);
  // An early message taken over by a receive that was just posted.
  void adopt_early(Inbound &in, size_t index, Op *op);

  int rank_;
  int nranks_;
  ShmLayout layout_;
  std::unique_ptr<ShmSegment> segment_;
  std::vector<int> local_of_;       // global rank -> local index, -1 off this host
  std::vector<pid_t> pids_;         // by global rank
  std::vector<Inbound> inbound_;    // by global rank
  std::vector<Outbound> outbound_;  // by global rank
  std::vector<int> local_peers_;    // global ranks of the other local ranks
  std::deque<Op> op_pool_;
  std::vector<Op *> free_ops_;
  // peer_status() looks at pids at most this often: /proc reads are not free.
  mutable std::vector<long long> last_pid_check_ns_;
  mutable std::vector<bool> pid_dead_;
  size_t early_bytes_ = 0;
  // The call this rank runs, and what arriving stamps said about it.
  uint32_t call_seq_ = ~0u;  // none yet
  CallStamp call_;
  std::vector<uint32_t> seen_seq_;  // by peer: the last call a message of it arrived for
  int mismatch_peer_ = -1;
  CallStamp mismatch_;  // moved aside from cells: a sign of receives posted late
};

}  // namespace ddl

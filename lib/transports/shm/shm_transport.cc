#include "lib/transports/shm/shm_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/common/process_liveness.h"
#include "lib/reduce/reduce.h"
#include "lib/transports/shm/flat_slots.h"
#include "lib/transports/shm/write_gates.h"

namespace ddl {
namespace {

constexpr uint64_t kMagic = 0x64646c2d73686d31ull;  // "ddl-shm1"
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kControlBytes = 128;  // two lines: the adjacent-line prefetcher stays out
constexpr size_t kCellHeaderBytes = 64;
// Beyond this the default geometry shrinks (many ranks on one host).
constexpr size_t kSegmentBudget = size_t{64} << 20;
constexpr long long kPidCheckIntervalNs = 20 * 1000 * 1000;

struct SegmentHeader {
  uint64_t magic;
  uint32_t nlocal, cells, cell_bytes;
};

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t env_value(const char *name, int64_t min, int64_t max, uint32_t fallback, bool bytes) {
  const std::string text = env_string(name);
  if (text.empty()) return fallback;
  int64_t value = 0;
  uint64_t parsed = 0;
  const bool ok = bytes ? parse_bytes(text, &parsed) && parsed >= static_cast<uint64_t>(min) &&
                              parsed <= static_cast<uint64_t>(max)
                        : parse_int(text, min, max, &value);
  if (!ok) {
    DDL_WARN("ignoring %s=%s: expected %lld..%lld", name, text.c_str(), static_cast<long long>(min),
             static_cast<long long>(max));
    return fallback;
  }
  return static_cast<uint32_t>(bytes ? parsed : static_cast<uint64_t>(value));
}

}  // namespace

// The header of a cell; the payload follows it. `stamp` is written last (release): it is
// the index of the cell's message fragment in the channel, plus one, so a reader can tell
// a fresh cell from one of the previous trip around the ring.
// Fragments follow each other in order, so their offsets and sizes need no field.
struct ShmTransport::Cell {
  std::atomic<uint64_t> stamp;
  uint64_t total;  // bytes of the whole message
  uint32_t seq, tag;
  CallStamp call;  // the sender's call (Transport::begin_call)
  // A message that fits here travels in the header's own cache line: one line handed over
  // per small message (small allreduces, barriers) instead of two.
  char inline_payload[kCellHeaderBytes - 40];
  char *payload() {
    return total <= sizeof inline_payload ? inline_payload
                                          : reinterpret_cast<char *>(this) + kCellHeaderBytes;
  }
};

static_assert(sizeof(std::atomic<uint64_t>) == 8, "cells hold 8-byte atomics");

// The receiver's side of a channel: how many cells it has handed back.
struct ShmTransport::Control {
  std::atomic<uint64_t> consumed;
};

size_t ShmLayout::channel_bytes() const {
  return kControlBytes + size_t{cells} * cell_bytes;
}

size_t ShmLayout::channels_bytes() const {
  return size_t{nlocal} * nlocal * channel_bytes();
}

size_t ShmLayout::segment_bytes() const {
  return kHeaderBytes + channels_bytes() + size_t{nlocal} * FlatSlots::bytes_per_rank() +
         size_t{nlocal} * WriteGates::bytes_per_rank(static_cast<int>(nlocal));
}

ShmLayout choose_shm_layout(int nlocal) {
  // 8 cells of 32 KB: a chunk in flight stays within L2, and the sender writes the next
  // cells while the receiver reduces the previous ones.
  ShmLayout layout;
  layout.nlocal = static_cast<uint32_t>(nlocal);
  layout.cell_bytes = 32768;
  layout.cells = 8;
  while (layout.segment_bytes() > kSegmentBudget && layout.cell_bytes > 4096)
    layout.cell_bytes /= 2;
  while (layout.segment_bytes() > kSegmentBudget && layout.cells > 2) layout.cells /= 2;
  uint32_t cell = env_value("DDL_SHM_CELL_BYTES", 4096, 1 << 22, layout.cell_bytes, true);
  if (cell & (cell - 1)) {
    DDL_WARN("ignoring DDL_SHM_CELL_BYTES=%u: not a power of two", cell);
    cell = layout.cell_bytes;
  }
  layout.cell_bytes = cell;
  layout.cells = env_value("DDL_SHM_CELLS", 2, 1024, layout.cells, false);
  return layout;
}

void ShmTransport::init_segment(ShmSegment *segment, const ShmLayout &layout) {
  if (segment->size() < layout.segment_bytes()) return;  // create() then rejects it
  auto *header = static_cast<SegmentHeader *>(segment->base());
  header->nlocal = layout.nlocal;
  header->cells = layout.cells;
  header->cell_bytes = layout.cell_bytes;
  header->magic = kMagic;
}

Status ShmTransport::create(int rank, int nranks, const std::vector<int> &local_ranks,
                            const std::vector<pid_t> &pids, std::unique_ptr<ShmSegment> segment,
                            std::unique_ptr<ShmTransport> *out) {
  const auto *header = static_cast<const SegmentHeader *>(segment->base());
  if (segment->size() < kHeaderBytes || header->magic != kMagic)
    return internal_error("the shared-memory segment was not initialized by its creator");
  ShmLayout layout;
  layout.nlocal = header->nlocal;
  layout.cells = header->cells;
  layout.cell_bytes = header->cell_bytes;
  if (layout.nlocal != local_ranks.size() || layout.cells < 2 || layout.cell_bytes < 4096 ||
      segment->size() < layout.segment_bytes())
    return internal_error(
        "the shared-memory segment's layout (%u ranks, %u cells of %u B, %zu B) "
        "does not fit %zu ranks on this host",
        layout.nlocal, layout.cells, layout.cell_bytes, segment->size(), local_ranks.size());
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, nranks));
  t->layout_ = layout;
  t->local_of_.assign(nranks, -1);
  for (size_t i = 0; i < local_ranks.size(); ++i)
    t->local_of_[local_ranks[i]] = static_cast<int>(i);
  DDL_CHECK(t->local_of_[rank] >= 0);
  t->pids_ = pids;
  t->inbound_.resize(nranks);
  t->outbound_.resize(nranks);
  char *channels = static_cast<char *>(segment->base()) + kHeaderBytes;
  auto channel = [&](int from, int to) {
    return channels + (size_t(from) * layout.nlocal + size_t(to)) * layout.channel_bytes();
  };
  const int me = t->local_of_[rank];
  for (int peer : local_ranks) {
    if (peer == rank) continue;
    t->local_peers_.push_back(peer);
    char *in = channel(t->local_of_[peer], me), *out_channel = channel(me, t->local_of_[peer]);
    t->inbound_[peer].control = reinterpret_cast<Control *>(in);
    t->inbound_[peer].cells = in + kControlBytes;
    t->outbound_[peer].control = reinterpret_cast<Control *>(out_channel);
    t->outbound_[peer].cells = out_channel + kControlBytes;
  }
  t->last_pid_check_ns_.assign(nranks, 0);
  t->pid_dead_.assign(nranks, false);
  t->seen_seq_.assign(nranks, ~0u);  // no call yet
  t->segment_ = std::move(segment);
  *out = std::move(t);
  return Status::Ok();
}

char *ShmTransport::flat_region() const {
  return static_cast<char *>(segment_->base()) + kHeaderBytes + layout_.channels_bytes();
}

char *ShmTransport::gates_region() const {
  return flat_region() + size_t{layout_.nlocal} * FlatSlots::bytes_per_rank();
}

ShmTransport::~ShmTransport() {
  if (early_bytes_) DDL_INFO("shm: %zu B arrived before their receive was posted", early_bytes_);
}

ShmTransport::Cell *ShmTransport::cell_at(char *cells, uint64_t index) const {
  static_assert(sizeof(Cell) == kCellHeaderBytes, "a cell header is one cache line");
  return reinterpret_cast<Cell *>(cells + (index % layout_.cells) * layout_.cell_bytes);
}

ShmTransport::Op *ShmTransport::new_op() {
  if (free_ops_.empty()) {
    op_pool_.emplace_back();
    return &op_pool_.back();
  }
  Op *op = free_ops_.back();
  free_ops_.pop_back();
  return op;
}

void ShmTransport::free_op(Op *op) {
  *op = Op();
  free_ops_.push_back(op);
}

bool ShmTransport::write_fragments(Outbound &out, Op *op, bool *wrote) {
  const size_t payload = layout_.payload_bytes();
  do {
    if (out.produced - out.consumed_seen >= layout_.cells) {
      out.consumed_seen = out.control->consumed.load(std::memory_order_acquire);
      if (out.produced - out.consumed_seen >= layout_.cells) return false;
    }
    Cell *cell = cell_at(out.cells, out.produced);
    const size_t bytes = std::min(payload, op->bytes - op->done);
    cell->total = op->bytes;  // first: it decides where the payload goes
    if (bytes) std::memcpy(cell->payload(), op->src + op->done, bytes);
    cell->seq = op->seq;
    cell->tag = op->tag;
    cell->call = op->call;
    cell->stamp.store(out.produced + 1, std::memory_order_release);
    ++out.produced;
    op->done += bytes;
    *wrote = true;
  } while (op->done < op->bytes);
  return true;
}

Status ShmTransport::post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                               TransferRequest *req) {
  if (!serves(peer) || peer == rank_) return internal_error("rank %d is not a shm peer", peer);
  Outbound &out = outbound_[peer];
  Op *op = new_op();
  op->req = req;
  op->is_send = true;
  op->seq = seq;
  op->tag = tag;
  op->src = static_cast<const char *>(buf);
  op->bytes = bytes;
  op->peer = peer;
  if (seq == call_seq_ && stamped_tag(tag)) op->call = call_;
  req->done = false;
  req->status = Status::Ok();
  req->received = 0;
  bool wrote = false;
  // Sends complete once copied into cells (eager): the buffer may then be reused.
  if (out.queue.empty() && write_fragments(out, op, &wrote)) {
    free_op(op);
    req->handle = nullptr;
    req->done = true;
    return Status::Ok();
  }
  req->handle = op;
  out.queue.push_back(op);
  return Status::Ok();
}

Status ShmTransport::post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                               TransferRequest *req) {
  return post_receive(peer, seq, tag, buf, nullptr, bytes, nullptr, req);
}

Status ShmTransport::post_recv_reduce(int peer, uint32_t seq, uint32_t tag, void *dst,
                                      const void *src, size_t bytes, const ReduceSpec &spec,
                                      TransferRequest *req) {
  return post_receive(peer, seq, tag, dst, src, bytes, &spec, req);
}

Status ShmTransport::post_recv_any(uint32_t, void *, size_t, TransferRequest *) {
  return unsupported("the shm transport does not receive from any rank (notices use UCX)");
}

// Early messages, then those still in their cells: first fragments only, each message
// spanning one cell per payload (one at least), the one now arriving its remaining bytes'.
bool ShmTransport::probe(int peer, uint32_t seq, uint32_t tag) {
  if (!serves(peer) || peer == rank_) return false;
  Inbound &in = inbound_[peer];
  for (const auto &early : in.early_messages)
    if (early->seq == seq && early->tag == tag) return true;
  const size_t payload = layout_.payload_bytes();
  auto cells_for = [&](size_t bytes) {
    return std::max<size_t>(1, (bytes + payload - 1) / payload);
  };
  uint64_t index = in.consumed;
  if (in.target != Target::kNone && in.remaining > 0) index += cells_for(in.remaining);
  for (;;) {
    const Cell *cell = cell_at(in.cells, index);
    if (cell->stamp.load(std::memory_order_acquire) != index + 1) return false;
    if (cell->seq == seq && cell->tag == tag) return true;
    index += cells_for(cell->total);
  }
}

Status ShmTransport::post_receive(int peer, uint32_t seq, uint32_t tag, void *dst, const void *src,
                                  size_t bytes, const ReduceSpec *spec, TransferRequest *req) {
  if (!serves(peer) || peer == rank_) return internal_error("rank %d is not a shm peer", peer);
  Op *op = new_op();
  op->reduce = spec != nullptr;
  if (spec) op->spec = *spec;
  op->seq = seq;
  op->tag = tag;
  op->dst = static_cast<char *>(dst);
  op->src = static_cast<const char *>(src);
  op->bytes = bytes;
  op->peer = peer;
  Inbound &in = inbound_[peer];
  op->req = req;
  req->done = false;
  req->status = Status::Ok();
  req->received = 0;
  req->handle = op;
  for (size_t i = 0; i < in.early_messages.size(); ++i) {
    const Early &early = *in.early_messages[i];
    if (early.seq == op->seq && early.tag == op->tag) {
      adopt_early(in, i, op);
      return Status::Ok();
    }
  }
  in.posted.push_back(op);
  drain(in);  // the message may be waiting in its cell already
  return Status::Ok();
}

// Whether a message of `total` bytes can land in the receive: a copy takes up to the posted
// size (the executor then checks the size), a reduction needs exactly it.
static bool fits(bool reduce, size_t total, size_t posted) {
  return reduce ? total == posted : total <= posted;
}

void ShmTransport::adopt_early(Inbound &in, size_t index, Op *op) {
  Early *early = in.early_messages[index].get();
  const bool arriving = in.target == Target::kEarly && in.early == early;
  op->total = early->total;
  if (!fits(op->reduce, early->total, op->bytes)) {
    if (arriving) in.target = Target::kDiscard;
    op->done = 0;
    complete_receive(op);
  } else {
    apply(op, 0, early->data.data(), early->arrived);
    op->done = early->arrived;
    if (arriving) {
      in.target = Target::kOp;  // the rest lands in the receive directly
      in.op = op;
    } else {
      complete_receive(op);
    }
  }
  if (arriving) in.early = nullptr;
  in.early_messages.erase(in.early_messages.begin() + static_cast<long>(index));
}

void ShmTransport::apply(Op *op, size_t offset, const char *data, size_t bytes) {
  if (!bytes) return;
  if (!op->reduce) {
    std::memcpy(op->dst + offset, data, bytes);
    return;
  }
  const size_t elem = datatype_size(op->spec.dtype);
  reduce(op->spec.dtype, op->spec.op, op->dst + offset, data, op->src + offset, bytes / elem,
         op->spec.avg_divisor);
}

void ShmTransport::complete_receive(Op *op) {
  TransferRequest *req = op->req;
  req->received = op->total;
  req->handle = nullptr;
  req->done = true;
  free_op(op);
}

bool ShmTransport::drain(Inbound &in) {
  bool consumed_any = false;
  for (;;) {
    Cell *cell = cell_at(in.cells, in.consumed);
    if (cell->stamp.load(std::memory_order_acquire) != in.consumed + 1) break;
    if (in.target == Target::kNone && !start_message(in, cell)) break;
    deliver(in, cell);
    in.control->consumed.store(++in.consumed, std::memory_order_release);
    consumed_any = true;
  }
  return consumed_any;
}

bool ShmTransport::start_message(Inbound &in, const Cell *cell) {
  const int peer = static_cast<int>(&in - inbound_.data());
  if (cell->seq == call_seq_ && stamped_tag(cell->tag)) compare_stamp(peer, cell->seq, cell->call);
  in.remaining = cell->total;
  in.offset = 0;
  for (size_t i = 0; i < in.posted.size(); ++i) {
    Op *op = in.posted[i];
    if (op->seq != cell->seq || op->tag != cell->tag) continue;
    in.posted.erase(in.posted.begin() + static_cast<long>(i));
    op->total = cell->total;
    if (fits(op->reduce, cell->total, op->bytes)) {
      in.target = Target::kOp;
      in.op = op;
    } else {
      in.target = Target::kDiscard;  // the executor reports the size mismatch
      complete_receive(op);
    }
    return true;
  }
  // Not expected yet: leave it in its cell, where its receive will read it in place (the
  // usual case: a peer already into the next collective). Move it aside only when this rank
  // waits for another message of this peer and something is queued behind this one; that
  // other message can only come after it.
  if (in.posted.empty()) return false;
  const Cell *next = cell_at(in.cells, in.consumed + 1);
  if (next->stamp.load(std::memory_order_acquire) != in.consumed + 2) return false;
  std::unique_ptr<Early> early(new Early());
  early->seq = cell->seq;
  early->tag = cell->tag;
  early->total = cell->total;
  early->call = cell->call;
  early->data.resize(cell->total);
  early_bytes_ += cell->total;
  in.target = Target::kEarly;
  in.early = early.get();
  in.early_messages.push_back(std::move(early));
  return true;
}

void ShmTransport::deliver(Inbound &in, Cell *cell) {
  const size_t bytes = std::min(in.remaining, layout_.payload_bytes());
  const size_t offset = in.offset;
  in.offset += bytes;
  switch (in.target) {
    case Target::kOp:
      if (offset + bytes <= in.op->bytes) apply(in.op, offset, cell->payload(), bytes);
      in.op->done += bytes;
      break;
    case Target::kEarly:
      if (bytes && offset + bytes <= in.early->data.size())
        std::memcpy(in.early->data.data() + offset, cell->payload(), bytes);
      in.early->arrived += bytes;
      break;
    case Target::kDiscard:
    case Target::kNone:
      break;
  }
  in.remaining -= bytes;
  if (in.remaining > 0 && bytes > 0) return;
  if (in.target == Target::kOp) complete_receive(in.op);
  in.target = Target::kNone;
  in.op = nullptr;
  in.early = nullptr;
  in.remaining = 0;
}

bool ShmTransport::progress() {
  bool any = false;
  for (int peer : local_peers_) {
    Outbound &out = outbound_[peer];
    while (!out.queue.empty()) {
      Op *op = out.queue.front();
      if (!write_fragments(out, op, &any)) break;
      out.queue.pop_front();
      op->req->handle = nullptr;
      op->req->done = true;
      free_op(op);
    }
    if (drain(inbound_[peer])) any = true;
  }
  return any;
}

void ShmTransport::cancel(TransferRequest *req) {
  Op *op = static_cast<Op *>(req->handle);
  if (!op || req->done) return;
  req->handle = nullptr;
  if (op->is_send) {
    // A send cut off mid-message leaves the channel unusable; cancelling only follows a
    // failure, after which the communicator is not used again.
    std::deque<Op *> &queue = outbound_[op->peer].queue;
    queue.erase(std::remove(queue.begin(), queue.end(), op), queue.end());
  } else {
    Inbound &in = inbound_[op->peer];
    in.posted.erase(std::remove(in.posted.begin(), in.posted.end(), op), in.posted.end());
    if (in.target == Target::kOp && in.op == op) {
      in.target = Target::kDiscard;
      in.op = nullptr;
    }
  }
  free_op(op);
}

void ShmTransport::begin_call(uint32_t seq, const CallStamp &stamp) {
  call_seq_ = seq;
  call_ = stamp;
  mismatch_peer_ = -1;
  // Messages of this call that arrived early were not compared yet.
  for (int peer : local_peers_)
    for (const std::unique_ptr<Early> &early : inbound_[peer].early_messages)
      if (early->seq == seq && stamped_tag(early->tag)) compare_stamp(peer, seq, early->call);
}

void ShmTransport::compare_stamp(int peer, uint32_t seq, const CallStamp &theirs) {
  seen_seq_[peer] = seq;
  if (mismatch_peer_ < 0 && std::memcmp(&theirs, &call_, sizeof theirs) != 0) {
    mismatch_peer_ = peer;
    mismatch_ = theirs;
  }
}

bool ShmTransport::stamp_mismatch(int *peer, CallStamp *theirs) const {
  if (mismatch_peer_ < 0) return false;
  *peer = mismatch_peer_;
  *theirs = mismatch_;
  return true;
}

Status ShmTransport::peer_status(int peer) const {
  if (!serves(peer) || peer == rank_) return Status::Ok();
  const long long now = now_ns();
  if (!pid_dead_[peer] && now - last_pid_check_ns_[peer] >= kPidCheckIntervalNs) {
    last_pid_check_ns_[peer] = now;
    pid_dead_[peer] = !process_is_alive(pids_[peer]);
  }
  if (pid_dead_[peer])
    return Status(DDL_ERR_REMOTE, strprintf("rank %d (pid %d on this host) has died", peer,
                                            static_cast<int>(pids_[peer])));
  return Status::Ok();
}

}  // namespace ddl

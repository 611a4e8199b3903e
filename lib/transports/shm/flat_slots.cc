#include "lib/transports/shm/flat_slots.h"

#include <algorithm>
#include <cstring>

namespace ddl {
namespace {

// Two lines apart at least: the adjacent-line prefetcher does not drag a peer's line along.
constexpr size_t kAlign = 128;

constexpr size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

// A slot: the flag, the stamp and the first bytes of data share its first cache line, so a
// small contribution travels as one line.
struct FlatSlots::Slot {
  std::atomic<uint64_t> flag;  // the call published here; written last
  CallStamp stamp;
  uint64_t bytes;
  char data[kCapacity];
};

struct FlatSlots::Finished {
  std::atomic<uint64_t> call;  // the last call this rank finished reading
};

size_t FlatSlots::slot_stride() {
  static_assert(offsetof(Slot, data) == 32, "32 bytes of data share the flag's line");
  return round_up(sizeof(Slot), kAlign);
}

size_t FlatSlots::bytes_per_rank() {
  return 2 * slot_stride() + kAlign;
}

FlatSlots::FlatSlots(char *region, int rank) : region_(region), rank_(rank) {}

FlatSlots::Slot *FlatSlots::slot(int rank, uint64_t call) const {
  char *block = region_ + static_cast<size_t>(rank) * bytes_per_rank();
  return reinterpret_cast<Slot *>(block + (call & 1) * slot_stride());
}

FlatSlots::Finished *FlatSlots::finished(int rank) const {
  char *block = region_ + static_cast<size_t>(rank) * bytes_per_rank();
  return reinterpret_cast<Finished *>(block + 2 * slot_stride());
}

bool FlatSlots::slot_known_free(uint64_t call, uint64_t *needed) const {
  const uint64_t last = last_written_[call & 1];
  *needed = last;
  return last <= known_finished_;
}

bool FlatSlots::peer_finished(int peer, uint64_t needed) const {
  return finished(peer)->call.load(std::memory_order_acquire) >= needed;
}

void FlatSlots::peers_finished(uint64_t needed) {
  known_finished_ = std::max(known_finished_, needed);
}

void FlatSlots::publish(uint64_t call, const CallStamp &stamp, const void *data, size_t bytes) {
  Slot *mine = slot(rank_, call);
  if (bytes) std::memcpy(mine->data, data, bytes);
  mine->stamp = stamp;
  mine->bytes = bytes;
  mine->flag.store(call, std::memory_order_release);
  last_written_[call & 1] = call;
}

bool FlatSlots::published(int peer, uint64_t call) const {
  return slot(peer, call)->flag.load(std::memory_order_acquire) == call;
}

const CallStamp &FlatSlots::stamp(int peer, uint64_t call) const {
  return slot(peer, call)->stamp;
}

const char *FlatSlots::data(int peer, uint64_t call) const {
  return slot(peer, call)->data;
}

void FlatSlots::finish(uint64_t call) {
  finished(rank_)->call.store(call, std::memory_order_release);
  // Every peer published this call, so each has finished the one before.
  known_finished_ = std::max(known_finished_, call - 1);
}

}  // namespace ddl

#include "lib/transports/shm/write_gates.h"

namespace ddl {
namespace {

// One flag per 128 bytes: writers announcing themselves do not share lines.
constexpr size_t kFlagStride = 128;

}  // namespace

size_t WriteGates::bytes_per_rank(int nranks) {
  return kFlagStride * (1 + static_cast<size_t>(nranks));
}

WriteGates::WriteGates(char *region, int nranks, int rank)
    : region_(region), nranks_(nranks), rank_(rank) {}

std::atomic<uint64_t> &WriteGates::open_flag(int rank) const {
  return *reinterpret_cast<std::atomic<uint64_t> *>(region_ + static_cast<size_t>(rank) *
                                                                  bytes_per_rank(nranks_));
}

std::atomic<uint64_t> &WriteGates::writing_flag(int owner, int writer) const {
  char *block = region_ + static_cast<size_t>(owner) * bytes_per_rank(nranks_);
  return *reinterpret_cast<std::atomic<uint64_t> *>(block + kFlagStride * (1 + writer));
}

void WriteGates::open(uint64_t call) {
  open_flag(rank_).store(call, std::memory_order_seq_cst);
}

void WriteGates::close() {
  open_flag(rank_).store(0, std::memory_order_seq_cst);
}

bool WriteGates::begin_write(int peer, uint64_t call) {
  std::atomic<uint64_t> &announce = writing_flag(peer, rank_);
  announce.store(call, std::memory_order_seq_cst);
  if (open_flag(peer).load(std::memory_order_seq_cst) == call) return true;
  announce.store(0, std::memory_order_release);
  return false;
}

void WriteGates::end_write(int peer) {
  writing_flag(peer, rank_).store(0, std::memory_order_release);
}

bool WriteGates::writing(int writer, uint64_t call) const {
  return writing_flag(rank_, writer).load(std::memory_order_seq_cst) == call;
}

}  // namespace ddl

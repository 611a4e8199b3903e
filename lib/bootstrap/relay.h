// The relays: how rank 0's answers reach a large job. In a star, rank 0 sends every rank the
// whole answer of an allgather, n^2 blob bytes out of one socket (4,096 ranks of 300-byte
// addresses: 5 GB per exchange). Beyond a few dozen ranks the answer goes down a tree
// instead: rank 0 sends it to its `fanout` children, each of them forwards the bytes unchanged
// to its own, and so on: rank 0 sends fanout copies, every answer crosses ceil(log_fanout n)
// hops, and the bytes a rank sends no longer grow with the job beyond its own fanout copies
// (NCCL's bootstrap passes the blobs around a ring instead: n hops).
//
// The contributions still go straight to rank 0, which stays the one judge of every exchange
// and tells every rank itself why it gave up (wire.h's error frames, over the star).
#pragma once

#include <cstdint>

namespace ddl {
namespace bootstrap {

// Ranks in rank order, rank r's children r*fanout+1 .. r*fanout+fanout (those below nranks).
class RelayTree {
 public:
  RelayTree() = default;
  RelayTree(int nranks, int fanout) : nranks_(nranks), fanout_(fanout < 1 ? 1 : fanout) {}
  int parent(int rank) const { return rank == 0 ? -1 : (rank - 1) / fanout_; }
  int first_child(int rank) const {
    const int64_t first = static_cast<int64_t>(rank) * fanout_ + 1;
    return first < nranks_ ? static_cast<int>(first) : nranks_;
  }
  int child_count(int rank) const {
    const int64_t first = first_child(rank);
    const int64_t last = static_cast<int64_t>(rank) * fanout_ + fanout_;  // inclusive
    return static_cast<int>(last < nranks_ ? last - first + 1 : nranks_ - first);
  }
  // Every other rank a child of rank 0: no relays at all.
  bool star() const { return fanout_ >= nranks_ - 1; }

 private:
  int nranks_ = 1, fanout_ = 1;
};

// A star up to this many ranks (rank 0's n^2 bytes stay under ~1.2 MB of 300-byte blobs and
// a hop costs more than they do); kRelayFanout children per rank beyond.
constexpr int kStarRanks = 64;
constexpr int kRelayFanout = 8;

}  // namespace bootstrap
}  // namespace ddl

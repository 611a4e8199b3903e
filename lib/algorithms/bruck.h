// What hier's Bruck forms share (hier_two_level.h's reduce-scatter and allgather, and the
// allreduce of hier_bruck_allreduce.h): staging slots for the operands a reduction brings in,
// and how many blocks each round's messages carry between hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/algorithms/schedule.h"

namespace ddl {

// Receive staging chunks of a reducing rank, reused round robin.
constexpr size_t kStagingSlots = 8;

// Staging chunks for the operands a reduction brings in (received, or read out of a peer's
// input), reused round robin: each use waits for the previous use of its slot.
class Staging {
 public:
  Staging(Schedule *schedule, size_t chunk_elems);

  // Where an operand comes from: `peer` sends it (tag), or this rank reads it out of the
  // peer's input, at the same place as its own operand (peer memory).
  struct Source {
    int peer;
    bool read;
  };

  // Receives `count` elements from `peer` (tag) into the next slot and reduces them with
  // `operand` into dst, after `deps` and the slot's previous use. Returns the step.
  uint32_t recv_reduce(int peer, uint32_t tag, Range operand, Range dst, size_t count,
                       bool final_reduce, std::vector<uint32_t> deps);

  // Reduces `count` elements from each of `sources` in turn into dst, the first of them with
  // `first` (this rank's operand, in its input). Returns the last step.
  uint32_t reduce_chain(const std::vector<Source> &sources, uint32_t tag, Range first, Range dst,
                        size_t count, bool final_reduce);

 private:
  Range next_slot() const;

  Schedule *schedule_;
  const size_t chunk_elems_;
  const size_t base_;
  size_t next_ = 0;
  std::vector<uint32_t> users_;  // the step of every use, in order
};

// How many blocks of `block` elements one message between hosts carries: as many as fill a
// network chunk, at least one, at most every host's.
int blocks_per_message(const CollectiveArgs &args, size_t block, int hosts);
// The fewest blocks a round's message is split down to (1/8 of a network chunk), and how
// many blocks a message of round d carries (round_message_blocks): see bruck.cc.
int least_split(const CollectiveArgs &args, size_t block);
int round_message_blocks(int per_message, int least, int d);

// The steps a run [first, first + count) of per-position step lists waits for, each once.
std::vector<uint32_t> steps_of(const std::vector<std::vector<uint32_t>> &written, int first,
                               int count);

}  // namespace ddl

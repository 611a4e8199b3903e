// The chunks of a collective on device buffers staged through pinned host memory: which part
// of the caller's buffers each chunk is, where it lies in a pair of pinned slots (chunk i in
// slot i % 2), the copies that move it in and out, and the host collective that runs on it in
// place. One plan, two drivers: run_staged (staging.cc) issues the copies on its copy stream
// and runs the host collectives as the chunks arrive; the asynchronous stream mode
// (stream_calls.cc) queues the copies on the caller's stream at the call, and its progress
// thread runs the host collectives.
#pragma once

#include <cstddef>

#include "lib/common/status.h"
#include "lib/core/collectives.h"
#include "lib/device/cuda_driver.h"

struct ddl_comm;

namespace ddl {
namespace device {

class StagedChunks {
 public:
  // stage_bytes: DDL_CUDA_STAGE_BYTES, the same on every rank (so is the plan). The forms with
  // counts per rank (alltoallv, allgatherv, ...) are one chunk, the whole call: every rank
  // then runs one host collective whatever its counts, where chunks of a budget would need
  // the largest count anywhere, which no rank knows. Their slot mirrors the buffers' extents
  // (one region when the call is in place, so that the host call is in place the same way).
  StagedChunks(const ddl_comm *comm, size_t stage_bytes, const CollectiveCall &call);

  size_t slot_bytes() const { return whole_ ? whole_bytes_ : chunk_ * elem_ * blocks_; }
  size_t chunks() const { return chunks_; }
  // The two slots the chunks use, `stride` bytes apart (stride >= slot_bytes()).
  void use_slots(unsigned char *slots, size_t stride) {
    slots_ = slots;
    slot_stride_ = stride;
  }

  // Queue on `stream` the copies of chunk i's input into its slot, and of its result out of
  // the slot to the caller's buffers (none where the rank has nothing to send or receive).
  Status copy_in(const CudaDriver &cu, CUstream stream, size_t i) const;
  Status copy_out(const CudaDriver &cu, CUstream stream, size_t i) const;

  // The host collective of chunk i, in place in its slot.
  CollectiveCall host_call(size_t i) const;

 private:
  unsigned char *span(size_t i, size_t *offset, size_t *count) const;

  // The forms with counts per rank (whole_): the call's own buffers, mirrored in the slot at
  // send_at_ and recv_at_; what of them it reads and writes.
  Status copy_in_whole(const CudaDriver &cu, CUstream stream) const;
  Status copy_out_whole(const CudaDriver &cu, CUstream stream) const;

  const CollectiveCall &call_;
  size_t elem_ = 1, nranks_ = 1, rank_ = 0, blocks_ = 1, chunk_ = 1, chunks_ = 0;
  bool whole_ = false;
  size_t whole_bytes_ = 0, send_at_ = 0, recv_at_ = 0, send_bytes_ = 0, recv_bytes_ = 0;
  unsigned char *slots_ = nullptr;
  size_t slot_stride_ = 0;
};

}  // namespace device
}  // namespace ddl

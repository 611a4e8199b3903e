#include "lib/device/staged_chunks.h"

#include <algorithm>
#include <cstdint>

#include "lib/algorithms/schedule.h"
#include "lib/common/datatype.h"
#include "lib/core/call_checks.h"
#include "lib/core/comm.h"

namespace ddl {
namespace device {
namespace {

// Whether a chunk is a slice of every rank's block (one block per rank in the call's buffers)
// rather than one slice of one vector.
bool by_blocks(Collective c) {
  return c == Collective::kAllgather || c == Collective::kReduceScatter ||
         c == Collective::kAlltoall || c == Collective::kGather || c == Collective::kScatter;
}

// One asynchronous copy each way on `stream`, a failure in the driver's words.
Status to_host(const CudaDriver &cu, CUstream stream, unsigned char *dst, const void *src,
               size_t bytes) {
  const CUresult r = cu.memcpy_dtoh_async(dst, reinterpret_cast<CUdeviceptr>(src), bytes, stream);
  return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyDtoHAsync", r);
}

Status to_device(const CudaDriver &cu, CUstream stream, void *dst, const unsigned char *src,
                 size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const CUresult r = cu.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(dst), src, bytes, stream);
  return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyHtoDAsync", r);
}

}  // namespace

StagedChunks::StagedChunks(const ddl_comm *comm, size_t stage_bytes, const CollectiveCall &call)
    : call_(call) {
  elem_ = datatype_size(call.dtype);
  nranks_ = static_cast<size_t>(comm->nranks);
  rank_ = static_cast<size_t>(comm->rank);
  if (per_peer_counts(call.collective)) {
    whole_ = true;
    chunks_ = 1;
    const bool in_place = call_in_place(comm, call);
    const CallExtents extent = call_extents(comm, call, in_place);
    send_bytes_ = extent.send;
    recv_bytes_ = extent.recv;
    // Out of place: the send extent, then the receive extent. In place one buffer holds the
    // other (or they are the same): their union, mirrored.
    const auto send = reinterpret_cast<uintptr_t>(call.sendbuf);
    const auto recv = reinterpret_cast<uintptr_t>(call.recvbuf);
    send_at_ = in_place ? send - std::min(send, recv) : 0;
    recv_at_ = in_place ? recv - std::min(send, recv) : send_bytes_;
    whole_bytes_ = std::max(send_at_ + send_bytes_, recv_at_ + recv_bytes_);
    return;
  }
  // The same plan on every rank (the roots' and the others' alike), so that all run as many
  // host collectives.
  blocks_ = by_blocks(call.collective) ? nranks_ : 1;
  chunk_ = std::max<size_t>(1, stage_bytes / (elem_ * blocks_));
  chunk_ = std::min(chunk_, call.count);
  chunks_ = (call.count + chunk_ - 1) / chunk_;
}

unsigned char *StagedChunks::span(size_t i, size_t *offset, size_t *count) const {
  *offset = i * chunk_;
  *count = std::min(chunk_, call_.count - *offset);
  return slots_ + (i % 2) * slot_stride_;
}

Status StagedChunks::copy_in_whole(const CudaDriver &cu, CUstream stream) const {
  if (send_bytes_ == 0) return Status::Ok();
  return to_host(cu, stream, slots_ + send_at_, call_.sendbuf, send_bytes_);
}

Status StagedChunks::copy_out_whole(const CudaDriver &cu, CUstream stream) const {
  if (recv_bytes_ == 0) return Status::Ok();
  auto *out = static_cast<unsigned char *>(call_.recvbuf);
  const unsigned char *slot = slots_ + recv_at_;
  auto block_back = [&](size_t at, size_t bytes) {
    return to_device(cu, stream, out + at, slot + at, bytes);
  };
  const Collective c = call_.collective;
  if (c == Collective::kReduceScatterv || c == Collective::kScatterv)
    return block_back(0, call_.count * elem_);
  // Block by block: what lies between the blocks is the caller's and stays as it was.
  const BlockLayout &l = *call_.layout;
  for (size_t q = 0; q < nranks_; ++q) {
    const int j = static_cast<int>(q);
    DDL_RETURN_IF_ERROR(block_back(BlockLayout::at(l.recv_counts, l.recv_displs, j) * elem_,
                                   l.recv_counts[q] * elem_));
  }
  return Status::Ok();
}

Status StagedChunks::copy_in(const CudaDriver &cu, CUstream stream, size_t i) const {
  if (whole_) return copy_in_whole(cu, stream);
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  const auto *in = static_cast<const unsigned char *>(
      call_.collective == Collective::kBroadcast ? call_.recvbuf : call_.sendbuf);
  const bool root = static_cast<int>(rank_) == call_.root;
  auto in_chunk = [&](unsigned char *dst, const unsigned char *src) {
    return to_host(cu, stream, dst, src, count * elem_);
  };
  auto every_block = [&] {  // this chunk of every rank's block
    for (size_t q = 0; q < nranks_; ++q)
      DDL_RETURN_IF_ERROR(
          in_chunk(slot + q * count * elem_, in + (q * call_.count + offset) * elem_));
    return Status::Ok();
  };
  switch (call_.collective) {
    case Collective::kBroadcast:
      return root ? in_chunk(slot, in + offset * elem_) : Status::Ok();
    case Collective::kAllgather:
    case Collective::kGather:
      return in_chunk(slot + rank_ * count * elem_, in + offset * elem_);
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      return every_block();
    case Collective::kScatter:
      return root ? every_block() : Status::Ok();
    default:  // allreduce, reduce, scan, exscan
      return in_chunk(slot, in + offset * elem_);
  }
}

Status StagedChunks::copy_out(const CudaDriver &cu, CUstream stream, size_t i) const {
  if (whole_) return copy_out_whole(cu, stream);
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  auto *out = static_cast<unsigned char *>(call_.recvbuf);
  const bool root = static_cast<int>(rank_) == call_.root;
  auto out_chunk = [&](unsigned char *dst, const unsigned char *src) {
    return to_device(cu, stream, dst, src, count * elem_);
  };
  auto every_block = [&] {
    for (size_t q = 0; q < nranks_; ++q)
      DDL_RETURN_IF_ERROR(
          out_chunk(out + (q * call_.count + offset) * elem_, slot + q * count * elem_));
    return Status::Ok();
  };
  switch (call_.collective) {
    case Collective::kBroadcast:  // the root's buffer is the result
      return root ? Status::Ok() : out_chunk(out + offset * elem_, slot);
    case Collective::kAllgather:
    case Collective::kAlltoall:
      return every_block();
    case Collective::kGather:
      return root ? every_block() : Status::Ok();
    case Collective::kReduceScatter:
    case Collective::kScatter:
      return out_chunk(out + offset * elem_, slot + rank_ * count * elem_);
    case Collective::kReduce:
      return root ? out_chunk(out + offset * elem_, slot) : Status::Ok();
    case Collective::kExscan:  // rank 0's recvbuf is left as it was
      return rank_ == 0 ? Status::Ok() : out_chunk(out + offset * elem_, slot);
    default:  // allreduce, scan
      return out_chunk(out + offset * elem_, slot);
  }
}

CollectiveCall StagedChunks::host_call(size_t i) const {
  CollectiveCall host = call_;
  host.stream = nullptr;
  if (whole_) {  // the same call on the mirrored buffers: counts, displacements and all
    host.sendbuf = call_.sendbuf ? slots_ + send_at_ : nullptr;
    host.recvbuf = call_.recvbuf ? slots_ + recv_at_ : nullptr;
    return host;
  }
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  host.count = count;
  // In place in the slot, in each collective's own words for it (call_checks.cc).
  host.sendbuf = host.recvbuf = slot;
  const Collective c = call_.collective;
  if (c == Collective::kAllgather || c == Collective::kGather)
    host.sendbuf = slot + rank_ * count * elem_;
  if (c == Collective::kReduceScatter || c == Collective::kScatter)
    host.recvbuf = slot + rank_ * count * elem_;
  return host;
}

}  // namespace device
}  // namespace ddl

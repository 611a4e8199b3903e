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

}  // namespace

StagedChunks::StagedChunks(const ddl_comm *comm, size_t stage_bytes, const CollectiveCall &call)
    : call_(call) {
  elem_ = datatype_size(call.dtype);
  nranks_ = static_cast<size_t>(comm->nranks);
  rank_ = static_cast<size_t>(comm->rank);
  if (per_peer_counts(call.collective)) {
    whole_ = true;
    chunk_ = call.count;
    chunks_ = 1;
    const bool in_place = call_in_place(comm, call);
    const CallExtents extent = call_extents(comm, call, in_place);
    send_bytes_ = extent.send;
    recv_bytes_ = extent.recv;
    if (!in_place) {
      send_at_ = 0;
      recv_at_ = send_bytes_;
      whole_bytes_ = send_bytes_ + recv_bytes_;
      return;
    }
    // In place: one buffer holds the other (or they are the same); mirror their union.
    const auto send = reinterpret_cast<uintptr_t>(call.sendbuf);
    const auto recv = reinterpret_cast<uintptr_t>(call.recvbuf);
    const uintptr_t low = std::min(send, recv);
    send_at_ = send - low;
    recv_at_ = recv - low;
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
  const CUresult r = cu.memcpy_dtoh_async(
      slots_ + send_at_, reinterpret_cast<CUdeviceptr>(call_.sendbuf), send_bytes_, stream);
  return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyDtoHAsync", r);
}

Status StagedChunks::copy_out_whole(const CudaDriver &cu, CUstream stream) const {
  if (recv_bytes_ == 0) return Status::Ok();
  auto *out = static_cast<unsigned char *>(call_.recvbuf);
  const unsigned char *slot = slots_ + recv_at_;
  auto to_device = [&](size_t at, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    const CUresult r =
        cu.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(out + at), slot + at, bytes, stream);
    return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyHtoDAsync", r);
  };
  const Collective c = call_.collective;
  if (c == Collective::kReduceScatterv || c == Collective::kScatterv)
    return to_device(0, call_.count * elem_);
  // Block by block: what lies between the blocks is the caller's and stays as it was.
  const BlockLayout &l = *call_.layout;
  for (size_t q = 0; q < nranks_; ++q) {
    const int j = static_cast<int>(q);
    DDL_RETURN_IF_ERROR(to_device(BlockLayout::at(l.recv_counts, l.recv_displs, j) * elem_,
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
  auto to_host = [&](unsigned char *dst, const unsigned char *src) {
    const CUresult r =
        cu.memcpy_dtoh_async(dst, reinterpret_cast<CUdeviceptr>(src), count * elem_, stream);
    return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyDtoHAsync", r);
  };
  auto every_block = [&] {  // this chunk of every rank's block
    for (size_t q = 0; q < nranks_; ++q)
      DDL_RETURN_IF_ERROR(
          to_host(slot + q * count * elem_, in + (q * call_.count + offset) * elem_));
    return Status::Ok();
  };
  switch (call_.collective) {
    case Collective::kBroadcast:
      return root ? to_host(slot, in + offset * elem_) : Status::Ok();
    case Collective::kAllgather:
    case Collective::kGather:
      return to_host(slot + rank_ * count * elem_, in + offset * elem_);
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      return every_block();
    case Collective::kScatter:
      return root ? every_block() : Status::Ok();
    default:  // allreduce, reduce, scan, exscan
      return to_host(slot, in + offset * elem_);
  }
}

Status StagedChunks::copy_out(const CudaDriver &cu, CUstream stream, size_t i) const {
  if (whole_) return copy_out_whole(cu, stream);
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  auto *out = static_cast<unsigned char *>(call_.recvbuf);
  const bool root = static_cast<int>(rank_) == call_.root;
  auto to_device = [&](unsigned char *dst, const unsigned char *src) {
    const CUresult r =
        cu.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(dst), src, count * elem_, stream);
    return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyHtoDAsync", r);
  };
  auto every_block = [&] {
    for (size_t q = 0; q < nranks_; ++q)
      DDL_RETURN_IF_ERROR(
          to_device(out + (q * call_.count + offset) * elem_, slot + q * count * elem_));
    return Status::Ok();
  };
  switch (call_.collective) {
    case Collective::kBroadcast:  // the root's buffer is the result
      return root ? Status::Ok() : to_device(out + offset * elem_, slot);
    case Collective::kAllgather:
    case Collective::kAlltoall:
      return every_block();
    case Collective::kGather:
      return root ? every_block() : Status::Ok();
    case Collective::kReduceScatter:
    case Collective::kScatter:
      return to_device(out + offset * elem_, slot + rank_ * count * elem_);
    case Collective::kReduce:
      return root ? to_device(out + offset * elem_, slot) : Status::Ok();
    case Collective::kExscan:  // rank 0's recvbuf is left as it was
      return rank_ == 0 ? Status::Ok() : to_device(out + offset * elem_, slot);
    default:  // allreduce, scan
      return to_device(out + offset * elem_, slot);
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

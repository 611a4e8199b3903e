#include "lib/device/staged_chunks.h"

#include <algorithm>

#include "lib/common/datatype.h"
#include "lib/core/comm.h"

namespace ddl {
namespace device {
StagedChunks::StagedChunks(const ddl_comm *comm, size_t stage_bytes, const CollectiveCall &call)
    : call_(call) {
  elem_ = datatype_size(call.dtype);
  nranks_ = static_cast<size_t>(comm->nranks);
  rank_ = static_cast<size_t>(comm->rank);
  // Allgather and reduce_scatter move one block per rank: a chunk is a slice of every block.
  blocks_ =
      call.collective == Collective::kAllgather || call.collective == Collective::kReduceScatter
          ? nranks_
          : 1;
  chunk_ = std::max<size_t>(1, stage_bytes / (elem_ * blocks_));
  chunk_ = std::min(chunk_, call.count);
  chunks_ = (call.count + chunk_ - 1) / chunk_;
}

unsigned char *StagedChunks::span(size_t i, size_t *offset, size_t *count) const {
  *offset = i * chunk_;
  *count = std::min(chunk_, call_.count - *offset);
  return slots_ + (i % 2) * slot_stride_;
}

Status StagedChunks::copy_in(const CudaDriver &cu, CUstream stream, size_t i) const {
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  const auto *in = static_cast<const unsigned char *>(
      call_.collective == Collective::kBroadcast ? call_.recvbuf : call_.sendbuf);
  auto to_host = [&](unsigned char *dst, const unsigned char *src) {
    const CUresult r =
        cu.memcpy_dtoh_async(dst, reinterpret_cast<CUdeviceptr>(src), count * elem_, stream);
    return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyDtoHAsync", r);
  };
  switch (call_.collective) {
    case Collective::kBroadcast:
      if (static_cast<int>(rank_) != call_.root) return Status::Ok();
      return to_host(slot, in + offset * elem_);
    case Collective::kAllgather:
      return to_host(slot + rank_ * count * elem_, in + offset * elem_);
    case Collective::kReduceScatter:  // this chunk of every rank's block
      for (size_t q = 0; q < nranks_; ++q)
        DDL_RETURN_IF_ERROR(
            to_host(slot + q * count * elem_, in + (q * call_.count + offset) * elem_));
      return Status::Ok();
    default:
      return to_host(slot, in + offset * elem_);
  }
}

Status StagedChunks::copy_out(const CudaDriver &cu, CUstream stream, size_t i) const {
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  auto *out = static_cast<unsigned char *>(call_.recvbuf);
  auto to_device = [&](unsigned char *dst, const unsigned char *src) {
    const CUresult r =
        cu.memcpy_htod_async(reinterpret_cast<CUdeviceptr>(dst), src, count * elem_, stream);
    return r == kCudaSuccess ? Status::Ok() : cuda_failed(cu, "cuMemcpyHtoDAsync", r);
  };
  switch (call_.collective) {
    case Collective::kBroadcast:
      if (static_cast<int>(rank_) == call_.root) return Status::Ok();  // its buffer is the result
      return to_device(out + offset * elem_, slot);
    case Collective::kAllgather:
      for (size_t q = 0; q < nranks_; ++q)
        DDL_RETURN_IF_ERROR(
            to_device(out + (q * call_.count + offset) * elem_, slot + q * count * elem_));
      return Status::Ok();
    case Collective::kReduceScatter:
      return to_device(out + offset * elem_, slot + rank_ * count * elem_);
    default:
      return to_device(out + offset * elem_, slot);
  }
}

CollectiveCall StagedChunks::host_call(size_t i) const {
  size_t offset, count;
  unsigned char *slot = span(i, &offset, &count);
  CollectiveCall host = call_;
  host.stream = nullptr;
  host.count = count;
  host.sendbuf = host.recvbuf = slot;
  if (call_.collective == Collective::kAllgather) host.sendbuf = slot + rank_ * count * elem_;
  if (call_.collective == Collective::kReduceScatter) host.recvbuf = slot + rank_ * count * elem_;
  return host;
}

}  // namespace device
}  // namespace ddl

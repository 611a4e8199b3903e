// The call vocabulary every layer shares (lib/algorithms, lib/exec, lib/core, lib/device):
// what a call is (Collective, CollectiveCall), what its kind implies, and where its memory is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ddl/ddl.h"
#include "lib/common/datatype.h"

namespace ddl {

struct BlockLayout;  // lib/algorithms/schedule.h: the v forms' counts and displacements
namespace device {
struct StreamCall;  // lib/device/stream_calls.cc
}  // namespace device

// Values are fixed: they travel in call signatures. The v forms take a count per peer
// (BlockLayout); send and recv are point to point, not collective (only their checks and
// requests share the collectives' machinery).
enum class Collective : uint8_t {
  kAllreduce,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
  kAlltoall,
  kAlltoallv,
  kReduce,
  kGather,
  kGatherv,
  kScatter,
  kScatterv,
  kSend,
  kRecv,
  kAllgatherv,  // after the point-to-point kinds: the values are fixed
  kReduceScatterv,
  kScan,    // MPI_Scan: rank r gets the reduction of ranks 0..r
  kExscan,  // MPI_Exscan: rank r > 0 gets ranks 0..r-1's; rank 0's output is left alone
};
// Whether a raw byte (a peer's signature) names a collective: the values above are in use.
inline bool known_collective(uint8_t value) {
  return value <= static_cast<uint8_t>(Collective::kExscan);
}
// As the C API and the logs name it.
inline const char *collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kAlltoallv:
      return "alltoallv";
    case Collective::kReduce:
      return "reduce";
    case Collective::kGather:
      return "gather";
    case Collective::kGatherv:
      return "gatherv";
    case Collective::kScatter:
      return "scatter";
    case Collective::kScatterv:
      return "scatterv";
    case Collective::kSend:
      return "send";
    case Collective::kRecv:
      return "recv";
    case Collective::kAllgatherv:
      return "allgatherv";
    case Collective::kReduceScatterv:
      return "reduce_scatterv";
    case Collective::kScan:
      return "scan";
    case Collective::kExscan:
      return "exscan";
  }
  return "unknown";
}
// The prefix reductions: each rank's result covers the ranks before it (and itself for a
// scan). (Inline, as the following: every call asks them on its way to the wire.)
inline bool is_scan(Collective c) {
  return c == Collective::kScan || c == Collective::kExscan;
}
// Those whose result combines the ranks' data with an op.
inline bool reduces(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduceScatter ||
         c == Collective::kReduce || c == Collective::kReduceScatterv || is_scan(c);
}
// Those with a root (broadcast, reduce, gather, scatter and their v forms).
inline bool has_root(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kGatherv || c == Collective::kScatter || c == Collective::kScatterv;
}
// Those with a count per peer: each rank's count may differ, so it is not in the signature.
inline bool per_peer_counts(Collective c) {
  return c == Collective::kAlltoallv || c == Collective::kGatherv || c == Collective::kScatterv ||
         c == Collective::kAllgatherv || c == Collective::kReduceScatterv;
}
inline bool is_point_to_point(Collective c) {
  return c == Collective::kSend || c == Collective::kRecv;
}

// Where a call's buffers are (lib/device/cuda_driver.h tells, per pointer).
enum class MemoryKind { kHost, kDevice };

// One call as the C API took it.
struct CollectiveCall {
  Collective collective = Collective::kAllreduce;
  const void *sendbuf = nullptr;
  void *recvbuf = nullptr;
  size_t count = 0;  // as the C call names it (per-rank count for allgather/reduce_scatter)
  // The raw integers the caller passed (raw_enum_value): they become ddl_datatype_t and
  // ddl_op_t only once checked, as an out-of-range enum value is undefined behaviour in C++.
  int dtype = DDL_FLOAT32;
  int op = DDL_SUM;
  int root = 0;           // rooted collectives
  int peer = -1;          // send, recv (DDL_ANY_SOURCE: a receive from any rank)
  int tag = 0;            // send, recv: 0..DDL_TAG_UB
  int *source = nullptr;  // recv: where the sender's rank goes once it is done (may be null)
  // The v forms: this rank's counts and displacements, copied from the caller's arrays at the
  // call (null for the other calls).
  std::shared_ptr<const BlockLayout> layout;
  // A stream-ordered call (ddl_*_stream): what orders it on the caller's CUDA stream.
  device::StreamCall *stream = nullptr;
};

// Bytes of call.count elements of its datatype (0 for an unchecked invalid one).
inline size_t call_bytes(const CollectiveCall &call) {
  return call.count * datatype_size(call.dtype);
}

}  // namespace ddl

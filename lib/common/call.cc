#include "lib/common/call.h"

namespace ddl {

const char *collective_name(Collective collective) {
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

}  // namespace ddl

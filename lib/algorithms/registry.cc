#include "lib/algorithms/registry.h"

#include "lib/algorithms/chain.h"
#include "lib/algorithms/dissemination.h"
#include "lib/algorithms/ring.h"

namespace ddl {

const std::vector<AlgorithmInfo> &algorithm_table() {
  static const std::vector<AlgorithmInfo> table = {
      {"ring", Collective::kAllreduce,
       "reduce-scatter then allgather around a ring, pipelined in chunks", build_ring_allreduce},
      {"ring", Collective::kReduceScatter, "n-1 ring steps, each reducing one block",
       build_ring_reduce_scatter},
      {"ring", Collective::kAllgather, "n-1 ring steps, each forwarding one block",
       build_ring_allgather},
      {"chain", Collective::kBroadcast, "pipelined chain from the root", build_chain_broadcast},
      {"dissemination", Collective::kBarrier, "ceil(log2 n) rounds of signals at distance 2^k",
       build_dissemination_barrier},
  };
  return table;
}

Status build_schedule(const CollectiveArgs &args, Schedule *schedule) {
  *schedule = Schedule();
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != args.collective) continue;
    info.build(args, schedule);
    return Status::Ok();
  }
  return unsupported("no algorithm for %s", collective_name(args.collective));
}

}  // namespace ddl

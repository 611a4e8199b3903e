#include "lib/algorithms/chain.h"

#include <algorithm>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/ring_order.h"

namespace ddl {

void build_chain_broadcast(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks;
  // Broadcast has one buffer, modelled as the output; the root's output holds the data.
  schedule->algorithm = "chain";
  schedule->input_count = schedule->output_count = args.count;
  schedule->in_place = true;
  if (n == 1) return;
  // From the root through its host's ranks, then host after host: the data crosses each
  // host boundary once (ring_order.h).
  const RingOrder order(args, args.root);
  const int position = order.position_of(args.rank);  // 0 at the root
  const int prev = order.prev(args.rank), next = order.next(args.rank);
  // Across hosts in chunks of at most 64 KB (network_chunk_elems): each hop forwards a chunk as
  // soon as it has it, so a message waits for one chunk per hop, not for the whole message.
  const ChunkSplit chunks(args.count, network_chunk_elems(args));
  for (int c = 0; c < chunks.chunks(); ++c) {
    const Extent part = chunks.chunk(Extent{0, args.count}, c);
    std::vector<uint32_t> forward_deps;
    if (position > 0)
      forward_deps.push_back(add_step(schedule, recv_step(prev, static_cast<uint32_t>(c),
                                                          output_at(part.offset), part.count, {})));
    if (position < n - 1)
      add_step(schedule, send_step(next, static_cast<uint32_t>(c), output_at(part.offset),
                                   part.count, forward_deps));
  }
}

double chain_broadcast_cost(const CollectiveArgs &args) {
  const int groups = fastest_tier_groups(args).groups;
  const double bytes = count_bytes(args);
  const size_t chunk_elems = network_chunk_elems(args);  // the chunks build_chain_broadcast uses
  const double chunk =
      chunk_elems ? std::min(bytes, static_cast<double>(chunk_elems * args.elem_size)) : bytes;
  const bool across = args.hosts > 1 && groups > 1;
  const CostConstants &link = across ? args.net : args.local;
  // Hops: groups-1 over the network, the rest inside hosts; the slowest link sets the pace:
  // the last rank has the first chunk after `hops` chunk times, the rest one chunk time each.
  // One call alone: calls back to back also overlap in the chain's hops, which this ignores.
  const int hops = args.nranks - 1, network_hops = across ? groups - 1 : 0;
  return network_hops * args.net.alpha + (hops - network_hops) * args.local.alpha +
         bytes * link.beta + (hops - 1) * chunk * link.beta;
}

}  // namespace ddl

#include "lib/algorithms/rail_alltoall.h"

#include <algorithm>
#include <limits>

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/hosts.h"

namespace ddl {
namespace {

// Tags, unique per pair of ranks: 0 for a block straight from its sender; 1 + r for a block
// handed on, r the rank at its far end: its receiver when handed inside the host to the rank
// that sends it across, its sender when sent across (pairs of one host and of two hosts never
// share a tag space).
constexpr uint32_t kDirectTag = 0;
uint32_t handed_on_tag(int far_end) {
  return 1 + static_cast<uint32_t>(far_end);
}

}  // namespace

void build_rail_alltoall(const CollectiveArgs &args, Schedule *schedule) {
  const Hosts hosts(args);
  const int n = args.nranks, me = args.rank, h = hosts.host_of[me];
  const std::vector<int> &here = hosts.ranks[static_cast<size_t>(h)];
  const size_t block = args.count;
  const int rails = std::max(1, args.rails);
  auto rail = [&](int r) { return hosts.local_of[r] % rails; };
  // Who sends rank x's block for rank y across: x itself, or the rank of x's host with y's
  // local index (on y's rail) when y is on another host and another rail.
  auto sender_of = [&](int x, int y) {
    const std::vector<int> &on = hosts.ranks[static_cast<size_t>(hosts.host_of[x])];
    const size_t local = static_cast<size_t>(hosts.local_of[y]);
    if (hosts.host_of[x] == hosts.host_of[y] || rail(x) == rail(y) || local >= on.size()) return x;
    return on[local];
  };
  auto of = [block](int rank) { return static_cast<size_t>(rank) * block; };
  schedule->algorithm = "rails";
  schedule->input_count = schedule->output_count = of(n);
  schedule->in_place = args.in_place;
  // In place the blocks to send are read from a copy: the receives overwrite the buffer.
  std::vector<uint32_t> after_copy;
  Range (*source)(size_t) = input_at;
  size_t scratch = 0;
  if (args.in_place && n > 1) {
    scratch = of(n);
    after_copy = {add_step(schedule, copy_step(input_at(0), scratch_at(0), of(n), {}))};
    source = scratch_at;
  }
  if (!args.in_place && block > 0)
    add_step(schedule, copy_step(input_at(of(me)), output_at(of(me)), block, {}));
  NetworkSendWindow window(args);
  for (int k = 1; k < n; ++k) {
    const int y = ring_index(me + k, n), via = sender_of(me, y);
    if (via == me)
      window.add(schedule, send_step(y, kDirectTag, source(of(y)), block, after_copy));
    else
      add_step(schedule, send_step(via, handed_on_tag(y), source(of(y)), block, after_copy));
  }
  for (int k = 1; k < n; ++k) {
    const int x = ring_index(me - k, n), via = sender_of(x, me);
    add_step(schedule, recv_step(via, via == x ? kDirectTag : handed_on_tag(x), output_at(of(x)),
                                 block, after_copy));
  }
  // Sending on: the blocks of this host's ranks for the ranks of other hosts that this rank
  // sends across, each as soon as it is in, the next host first.
  for (int d = 1; d < hosts.count(); ++d) {
    const int g = (h + d) % hosts.count();
    for (int y : hosts.ranks[static_cast<size_t>(g)])
      for (int x : here) {
        if (x == me || sender_of(x, y) != me) continue;
        const Range slot = scratch_at(scratch);
        scratch += block;
        const uint32_t in = add_step(schedule, recv_step(x, handed_on_tag(y), slot, block, {}));
        window.add(schedule, send_step(y, handed_on_tag(x), slot, block, {in}));
      }
  }
  schedule->scratch_count = scratch;
}

double rail_alltoall_cost(const CollectiveArgs &args) {
  const Hosts hosts(args);
  const double inf = std::numeric_limits<double>::infinity();
  if (!hosts.even() || hosts.ranks[0].size() < 2) return inf;
  const int L = static_cast<int>(hosts.ranks[0].size());
  const int R = rails_for(args, L);
  if (R < 2) return inf;
  const double n = args.nranks, l = L, b = count_bytes(args);
  const double handed = (R - 1.0) / R * (n - l);
  const CostConstants &c = args.local, &net = args.net;
  // Each hand-off is a message for both ranks of the host: the hander's and the sender-on's.
  return c.alpha + handed * (2 * c.overhead + b * c.beta) + net.alpha + (n - 1) * net.overhead +
         l * (n - l) * b * net.beta / R;
}

}  // namespace ddl

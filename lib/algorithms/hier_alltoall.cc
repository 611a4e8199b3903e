#include "lib/algorithms/hier_alltoall.h"

#include <algorithm>
#include <limits>

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/hosts.h"

namespace ddl {
namespace {

// Tags, unique per pair of ranks: blocks between ranks of one host; a block for rank y handed
// to an agent; the one message between agents; a block of rank x handed on by an agent.
constexpr uint32_t kDirectTag = 0;
uint32_t to_agent_tag(int y) {
  return 1 + static_cast<uint32_t>(y);
}
uint32_t across_tag(int n) {
  return 1 + static_cast<uint32_t>(n);
}
uint32_t from_agent_tag(int n, int x) {
  return 2 + static_cast<uint32_t>(n) + static_cast<uint32_t>(x);
}

std::vector<uint32_t> joined(std::vector<uint32_t> a, const std::vector<uint32_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

void build_hier_alltoall(const CollectiveArgs &args, Schedule *schedule) {
  const Hosts hosts(args);
  const int n = args.nranks, me = args.rank, h = hosts.host_of[me];
  const std::vector<int> &here = hosts.ranks[static_cast<size_t>(h)];
  const size_t block = args.count, L = here.size();
  schedule->algorithm = "hier";
  schedule->input_count = schedule->output_count = block * static_cast<size_t>(n);
  schedule->in_place = args.in_place;
  auto of = [block](int rank) { return static_cast<size_t>(rank) * block; };
  // In place the blocks to send are read from a copy: the receives overwrite the buffer.
  std::vector<uint32_t> after_copy;
  Range (*source)(size_t) = input_at;
  if (args.in_place && n > 1) {
    schedule->scratch_count = of(n);
    after_copy = {add_step(schedule, copy_step(input_at(0), scratch_at(0), of(n), {}))};
    source = scratch_at;
  }
  if (!args.in_place && block > 0)
    add_step(schedule, copy_step(input_at(of(me)), output_at(of(me)), block, {}));
  for (int y : here) {
    if (y == me) continue;
    add_step(schedule, send_step(y, kDirectTag, source(of(y)), block, after_copy));
    add_step(schedule, recv_step(y, kDirectTag, output_at(of(y)), block, after_copy));
  }
  for (int g = 0; g < hosts.count(); ++g) {
    if (g == h) continue;
    const std::vector<int> &there = hosts.ranks[static_cast<size_t>(g)];
    const size_t G = there.size();
    // To host g: hand the agent this rank's blocks for g's ranks; the agent gathers them,
    // [destination][source], and sends them on in one message.
    const int sender = here[static_cast<size_t>(g) % L];
    const int receiver = there[static_cast<size_t>(h) % G];
    if (me != sender) {
      for (int y : there)
        add_step(schedule, send_step(sender, to_agent_tag(y), source(of(y)), block, after_copy));
    } else {
      const size_t region = schedule->scratch_count;
      schedule->scratch_count += L * G * block;
      std::vector<uint32_t> gathered;
      for (size_t j = 0; j < G; ++j)
        for (size_t i = 0; i < L; ++i) {
          const Range slot = scratch_at(region + (j * L + i) * block);
          const int x = here[i], y = there[j];
          gathered.push_back(
              add_step(schedule, x == me ? copy_step(source(of(y)), slot, block, after_copy)
                                         : recv_step(x, to_agent_tag(y), slot, block, {})));
        }
      add_step(schedule,
               send_step(receiver, across_tag(n), scratch_at(region), L * G * block, gathered));
    }
    // From host g: its agent's message arrives at this host's agent, which hands each rank
    // here the blocks of g's ranks for it.
    const int from_sender = there[static_cast<size_t>(h) % G];
    const int from_receiver = here[static_cast<size_t>(g) % L];
    if (me != from_receiver) {
      for (int x : there)
        add_step(schedule, recv_step(from_receiver, from_agent_tag(n, x), output_at(of(x)), block,
                                     after_copy));
      continue;
    }
    const size_t region = schedule->scratch_count;
    schedule->scratch_count += G * L * block;
    const uint32_t arrived = add_step(
        schedule, recv_step(from_sender, across_tag(n), scratch_at(region), G * L * block, {}));
    for (size_t j = 0; j < L; ++j)
      for (size_t i = 0; i < G; ++i) {
        const Range slot = scratch_at(region + (j * G + i) * block);
        const int x = there[i], y = here[j];
        add_step(schedule,
                 y == me ? copy_step(slot, output_at(of(x)), block, joined({arrived}, after_copy))
                         : send_step(y, from_agent_tag(n, x), slot, block, {arrived}));
      }
  }
}

double hier_alltoall_cost(const CollectiveArgs &args) {
  const Hosts hosts(args);
  size_t L = 1;
  for (const std::vector<int> &on : hosts.ranks) L = std::max(L, on.size());
  if (hosts.count() < 2 || L < 2) return std::numeric_limits<double>::infinity();
  const double n = args.nranks, l = static_cast<double>(L), H = hosts.count();
  const double b = count_bytes(args);
  const CostConstants &c = args.local, &net = args.net;
  return 2 * (c.alpha + (n - l) * (c.overhead + b * c.beta)) + net.alpha + (H - 1) * net.overhead +
         l * (n - l) * b * net.beta;
}

double pairwise_alltoall_cost(const CollectiveArgs &args) {
  const Hosts hosts(args);
  size_t L = 1;
  for (const std::vector<int> &on : hosts.ranks) L = std::max(L, on.size());
  const double n = args.nranks, b = count_bytes(args);
  if (args.hosts < 2 || hosts.count() < 2)
    return args.local.alpha + (n - 1) * (args.local.overhead + b * args.local.beta);
  const double l = static_cast<double>(L);
  const CostConstants &net = args.net;
  return net.alpha + (n - 1) * net.overhead + l * (n - l) * b * net.beta;
}

}  // namespace ddl

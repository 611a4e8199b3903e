#include "lib/algorithms/hier_two_level.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/hosts.h"

namespace ddl {
namespace {

// Receive staging chunks of a reduce-scatter rank, reused round robin.
constexpr size_t kStagingSlots = 8;

// What both builders start from: this rank's host and the chunks of one block.
struct Layout {
  explicit Layout(const CollectiveArgs &args)
      : hosts(args),
        me(args.rank),
        h(hosts.host_of[me]),
        here(hosts.ranks[static_cast<size_t>(h)]),
        block(args.count),
        chunks(block, network_chunk_elems(args)),
        C(chunks.chunks()) {}

  Extent part(int c) const { return chunks.chunk(Extent{0, block}, c); }
  // Chunk c of rank `owner`'s block in a buffer of all ranks' blocks.
  Range at(BufferId buffer, int owner, int c) const {
    return Range{buffer, static_cast<size_t>(owner) * block + part(c).offset};
  }

  const Hosts hosts;
  const int me, h;
  const std::vector<int> &here;  // this host's ranks
  const size_t block;
  const ChunkSplit chunks;
  const int C;
};

// Messages between two ranks are told apart by block and chunk. A tag past the transport's
// range makes the plan fail with advice (make_comm_plan), never wraps around.
uint32_t tag_of(int block, int chunk, int chunks) {
  const uint64_t tag =
      static_cast<uint64_t>(block) * static_cast<uint64_t>(chunks) + static_cast<uint64_t>(chunk);
  return tag > kMaxStepTag ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(tag);
}

// Staging chunks for receives that reduce: each use waits for the previous use of its slot.
class Staging {
 public:
  Staging(Schedule *schedule, size_t chunk_elems)
      : schedule_(schedule), chunk_elems_(chunk_elems), base_(schedule->scratch_count) {
    schedule_->scratch_count += kStagingSlots * chunk_elems_;
  }

  // Reduces `count` elements arriving from each of `peers` in turn (tag `tag` from each) into
  // dst, the first of them with `first` (this rank's operand). Returns the last step.
  uint32_t reduce_chain(const std::vector<int> &peers, uint32_t tag, Range first, Range dst,
                        size_t count, bool final_reduce) {
    uint32_t last = 0;
    for (size_t k = 0; k < peers.size(); ++k) {
      const size_t slot = next_ % kStagingSlots;
      std::vector<uint32_t> deps;
      if (k > 0) deps.push_back(last);
      if (next_ >= kStagingSlots) deps.push_back(users_[next_ - kStagingSlots]);
      last = add_step(schedule_,
                      recv_reduce_step(peers[k], tag, scratch_at(base_ + slot * chunk_elems_),
                                       k == 0 ? first : dst, dst, count,
                                       final_reduce && k + 1 == peers.size(), deps));
      users_.push_back(last);
      ++next_;
    }
    return last;
  }

 private:
  Schedule *schedule_;
  const size_t chunk_elems_;
  const size_t base_;
  size_t next_ = 0;
  std::vector<uint32_t> users_;  // the step of every use, in order
};

// Both hier forms cost the same shape: the other hosts' blocks over the host's links (its L
// ranks share min(rails, L) of them: each drives its own NIC), one round of messages; then
// L-1 local peers each get every host's block.
double hier_two_level_cost(const CollectiveArgs &args, bool reducing) {
  const TierGroups tier = fastest_tier_groups(args);
  const int groups = tier.groups, local = tier.largest;
  if (groups < 2 || local < 2) return std::numeric_limits<double>::infinity();
  const double block = count_bytes(args);
  const int links = std::max(1, std::min(args.rails, local));
  const double network = args.net.alpha + (groups - 1) * local * block * args.net.beta / links;
  const double local_byte_cost =
      reducing ? std::max(args.local.beta, args.local.gamma) : args.local.beta;
  const double inside = args.local.alpha + (local - 1) * groups * block * local_byte_cost;
  return network + inside;
}

}  // namespace

void build_hier_allgather(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_blocks_schedule(args, Collective::kAllgather, "hier", schedule)) return;
  const Layout l(args);
  // Whose blocks a rank of this host holds before the forwarding: its own, and those it is
  // this host's agent for.
  auto held_by = [&](int rank) {
    std::vector<int> held = {rank};
    for (int r = 0; r < args.nranks; ++r)
      if (l.hosts.host_of[r] != l.h && l.hosts.agent(l.h, r) == rank) held.push_back(r);
    return held;
  };

  // 1. This rank's block to its agent on every other host.
  for (int g = 0; g < l.hosts.count(); ++g) {
    if (g == l.h) continue;
    for (int c = 0; c < l.C; ++c)
      add_step(schedule, send_step(l.hosts.agent(g, l.me), tag_of(l.me, c, l.C),
                                   input_at(l.part(c).offset), l.part(c).count, {}));
  }
  // 2. The blocks this rank is its host's agent for, from their owners.
  const std::vector<int> held = held_by(l.me);
  std::map<int, std::vector<uint32_t>> arrived;  // block -> its receive, by chunk
  for (size_t i = 1; i < held.size(); ++i)
    for (int c = 0; c < l.C; ++c)
      arrived[held[i]].push_back(
          add_step(schedule, recv_step(held[i], tag_of(held[i], c, l.C),
                                       l.at(BufferId::kOutput, held[i], c), l.part(c).count, {})));
  // 3. Everything it holds to the other ranks of its host, each chunk once it is here; and
  //    what each of them holds, from them.
  for (int peer : l.here) {
    if (peer == l.me) continue;
    for (int b : held)
      for (int c = 0; c < l.C; ++c) {
        const bool own = b == l.me;
        add_step(schedule,
                 send_step(peer, tag_of(b, c, l.C),
                           own ? input_at(l.part(c).offset) : l.at(BufferId::kOutput, b, c),
                           l.part(c).count,
                           own ? std::vector<uint32_t>{} : std::vector<uint32_t>{arrived[b][c]}));
      }
    for (int b : held_by(peer))
      for (int c = 0; c < l.C; ++c)
        add_step(schedule, recv_step(peer, tag_of(b, c, l.C), l.at(BufferId::kOutput, b, c),
                                     l.part(c).count, {}));
  }
}

void build_hier_reduce_scatter(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_blocks_schedule(args, Collective::kReduceScatter, "hier", schedule)) return;
  const Layout l(args);
  auto operand = [&](int b, int c) { return l.at(BufferId::kInput, b, c); };
  std::vector<int> local_peers;
  for (int r : l.here)
    if (r != l.me) local_peers.push_back(r);
  Staging staging(schedule, l.chunks.chunk_elems());

  // 1. This rank's operands of the other blocks: to the owner when it is on this host, else
  //    to this host's agent for that block (unless that is this rank).
  for (int b = 0; b < args.nranks; ++b) {
    const int to = l.hosts.host_of[b] == l.h ? b : l.hosts.agent(l.h, b);
    if (b == l.me || to == l.me) continue;
    for (int c = 0; c < l.C; ++c)
      add_step(schedule, send_step(to, tag_of(b, c, l.C), operand(b, c), l.part(c).count, {}));
  }
  // 2. As this host's agent: its operands of a block owned elsewhere reduced into one partial
  //    sum, sent to the owner chunk by chunk. These chains come before this rank's own block,
  //    which waits on other hosts' agents: none of them waits on anything but its host.
  for (int owner = 0; owner < args.nranks; ++owner) {
    if (l.hosts.host_of[owner] == l.h || l.hosts.agent(l.h, owner) != l.me) continue;
    if (local_peers.empty()) {  // alone on its host: its operand is the partial
      for (int c = 0; c < l.C; ++c)
        add_step(schedule,
                 send_step(owner, tag_of(owner, c, l.C), operand(owner, c), l.part(c).count, {}));
      continue;
    }
    const size_t partial = schedule->scratch_count;
    schedule->scratch_count += l.block;
    for (int c = 0; c < l.C; ++c) {
      const Range sum = scratch_at(partial + l.part(c).offset);
      const uint32_t reduced = staging.reduce_chain(local_peers, tag_of(owner, c, l.C),
                                                    operand(owner, c), sum, l.part(c).count, false);
      add_step(schedule, send_step(owner, tag_of(owner, c, l.C), sum, l.part(c).count, {reduced}));
    }
  }
  // 3. This rank's block: its host's operands, then one partial from every other host.
  std::vector<int> sources = local_peers;
  for (int g = 0; g < l.hosts.count(); ++g)
    if (g != l.h) sources.push_back(l.hosts.agent(g, l.me));
  for (int c = 0; c < l.C; ++c)
    staging.reduce_chain(sources, tag_of(l.me, c, l.C), operand(l.me, c),
                         output_at(l.part(c).offset), l.part(c).count, true);
}

void build_hier_broadcast(const CollectiveArgs &args, Schedule *schedule) {
  // Broadcast has one buffer, modelled as the output (as the chain's).
  schedule->algorithm = "hier";
  schedule->input_count = schedule->output_count = args.count;
  schedule->in_place = true;
  if (args.nranks == 1) return;
  const Hosts hosts(args);
  const int H = hosts.count(), me = args.rank, h = hosts.host_of[me];
  const int root_host = hosts.host_of[args.root];
  // The tree numbers hosts from the root's; each host's leader is the root's agent there.
  auto host_at = [&](int t) { return (t + root_host) % H; };
  auto leader = [&](int g) { return g == root_host ? args.root : hosts.agent(g, args.root); };
  const int t = (h - root_host + H) % H;
  const bool leading = leader(h) == me;
  // Binomial: t's parent is t without its highest bit; its children t + 2^k for every 2^k > t,
  // the farthest (the largest subtree) first.
  int parent = -1, first_child_step = 1;
  while (first_child_step <= t) first_child_step <<= 1;
  if (t > 0) parent = leader(host_at(t - first_child_step / 2));
  std::vector<int> children;
  for (int step = first_child_step; t + step < H; step <<= 1)
    children.insert(children.begin(), leader(host_at(t + step)));
  const ChunkSplit chunks(args.count, network_chunk_elems(args));
  for (int c = 0; c < chunks.chunks(); ++c) {
    const Extent part = chunks.chunk(Extent{0, args.count}, c);
    const uint32_t tag = static_cast<uint32_t>(c);
    std::vector<uint32_t> arrived;
    if (me != args.root)
      arrived.push_back(add_step(schedule, recv_step(leading ? parent : leader(h), tag,
                                                     output_at(part.offset), part.count, {})));
    if (!leading) continue;
    for (int child : children)
      add_step(schedule, send_step(child, tag, output_at(part.offset), part.count, arrived));
    for (int peer : hosts.ranks[static_cast<size_t>(h)])
      if (peer != me)
        add_step(schedule, send_step(peer, tag, output_at(part.offset), part.count, arrived));
  }
}

double hier_allgather_cost(const CollectiveArgs &args) {
  return hier_two_level_cost(args, false);
}

double hier_reduce_scatter_cost(const CollectiveArgs &args) {
  return hier_two_level_cost(args, true);
}

double hier_broadcast_cost(const CollectiveArgs &args) {
  const TierGroups tier = fastest_tier_groups(args);
  if (tier.groups < 2) return std::numeric_limits<double>::infinity();
  const int groups = tier.groups, local = tier.largest;
  const double bytes = count_bytes(args);
  const double depth = std::ceil(std::log2(static_cast<double>(groups)));
  // Each leader sends the whole message to each child in turn: a level costs a message.
  return depth * (kNetCostConstants.alpha + bytes * kNetCostConstants.beta) + kCostConstants.alpha +
         (local - 1) * bytes * kCostConstants.beta;
}

}  // namespace ddl

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
  // The host k after this one, cyclically (k may be negative). Sends to other hosts go in
  // this order, so that in each round every host sends to one host and receives from one:
  // all hosts sending to host 0 first would queue them at its links while others idle.
  int shifted(int k) const {
    const int H = hosts.count();
    return ((h + k) % H + H) % H;
  }
  // Whether the moves inside hosts go by single copy: the same answer on every rank (all of
  // them publish their buffers around the call, or none).
  bool single_copy(const CollectiveArgs &args) const {
    if (!args.peer_memory) return false;
    for (const auto &ranks : hosts.ranks)
      if (ranks.size() > 1) return true;
    return false;
  }
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

// Staging chunks for the operands a reduction brings in (received, or read out of a peer's
// input), reused round robin: each use waits for the previous use of its slot.
class Staging {
 public:
  Staging(Schedule *schedule, size_t chunk_elems)
      : schedule_(schedule), chunk_elems_(chunk_elems), base_(schedule->scratch_count) {
    schedule_->scratch_count += kStagingSlots * chunk_elems_;
  }

  // Where an operand comes from: `peer` sends it (tag), or this rank reads it out of the
  // peer's input, at the same place as its own operand (peer memory).
  struct Source {
    int peer;
    bool read;
  };

  // Reduces `count` elements from each of `sources` in turn into dst, the first of them with
  // `first` (this rank's operand, in its input). Returns the last step.
  uint32_t reduce_chain(const std::vector<Source> &sources, uint32_t tag, Range first, Range dst,
                        size_t count, bool final_reduce) {
    uint32_t last = 0;
    for (size_t k = 0; k < sources.size(); ++k) {
      const Range slot = scratch_at(base_ + (next_ % kStagingSlots) * chunk_elems_);
      std::vector<uint32_t> free_slot;
      if (next_ >= kStagingSlots) free_slot.push_back(users_[next_ - kStagingSlots]);
      const Range operand = k == 0 ? first : dst;
      const bool final_step = final_reduce && k + 1 == sources.size();
      if (sources[k].read) {
        const uint32_t read =
            add_step(schedule_, peer_read_step(sources[k].peer, first, slot, count, free_slot));
        std::vector<uint32_t> deps = {read};
        if (k > 0) deps.push_back(last);
        last = add_step(schedule_, reduce_step(slot, operand, dst, count, final_step, deps));
      } else {
        std::vector<uint32_t> deps = free_slot;
        if (k > 0) deps.push_back(last);
        last = add_step(schedule_, recv_reduce_step(sources[k].peer, tag, slot, operand, dst, count,
                                                    final_step, deps));
      }
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
// L-1 local peers each get every host's block, by message or (peer memory) by single copy,
// where each byte moves once instead of twice.
double hier_two_level_cost(const CollectiveArgs &args, bool reducing) {
  const TierGroups tier = fastest_tier_groups(args);
  const int groups = tier.groups, local = tier.largest;
  if (groups < 2 || local < 2) return std::numeric_limits<double>::infinity();
  const double block = count_bytes(args);
  const int links = std::max(1, std::min(args.rails, local));
  const double network = args.net.alpha + (groups - 1) * local * block * args.net.beta / links;
  const double local_beta = args.peer_memory ? args.local.beta / 2 : args.local.beta;
  const double local_byte_cost = reducing ? std::max(local_beta, args.local.gamma) : local_beta;
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

  // 1. This rank's block to its agent on every other host, the next host first (l.shifted).
  for (int k = 1; k < l.hosts.count(); ++k) {
    const int g = l.shifted(k);
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
  // 3. Everything it holds to the other ranks of its host, each chunk once it is here: sent,
  //    or (peer memory) written straight into their outputs; and what each of them holds,
  //    from them (written into this rank's output by them, with peer memory).
  schedule->peer_memory = l.single_copy(args);
  for (int peer : l.here) {
    if (peer == l.me) continue;
    for (int b : held)
      for (int c = 0; c < l.C; ++c) {
        const bool own = b == l.me;
        const Range from = own ? input_at(l.part(c).offset) : l.at(BufferId::kOutput, b, c);
        std::vector<uint32_t> after =
            own ? std::vector<uint32_t>{} : std::vector<uint32_t>{arrived[b][c]};
        add_step(schedule,
                 schedule->peer_memory
                     ? peer_write_step(peer, from, l.at(BufferId::kOutput, b, c), l.part(c).count,
                                       std::move(after))
                     : send_step(peer, tag_of(b, c, l.C), from, l.part(c).count, std::move(after)));
      }
    if (schedule->peer_memory) continue;
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
  // With peer memory the ranks of a host read each other's operands instead of sending them.
  const bool read = l.single_copy(args);
  schedule->peer_memory = read;
  std::vector<Staging::Source> local_sources;
  for (int r : l.here)
    if (r != l.me) local_sources.push_back(Staging::Source{r, read});
  Staging staging(schedule, l.chunks.chunk_elems());

  // 1. This rank's operands of the other blocks: to the owner when it is on this host, else
  //    to this host's agent for that block (unless that is this rank); read by them instead,
  //    with peer memory.
  for (int b = 0; b < args.nranks && !read; ++b) {
    const int to = l.hosts.host_of[b] == l.h ? b : l.hosts.agent(l.h, b);
    if (b == l.me || to == l.me) continue;
    for (int c = 0; c < l.C; ++c)
      add_step(schedule, send_step(to, tag_of(b, c, l.C), operand(b, c), l.part(c).count, {}));
  }
  // 2. As this host's agent: its host's operands of a block owned elsewhere reduced into one
  //    partial sum, sent to the owner chunk by chunk. These chains come before this rank's
  //    own block, which waits on other hosts' agents: none of them waits on anything but its
  //    host.
  std::vector<int> owners;  // those this rank is its host's agent for, the next host first
  for (int k = 1; k < l.hosts.count(); ++k)
    for (int owner : l.hosts.ranks[static_cast<size_t>(l.shifted(k))])
      if (l.hosts.agent(l.h, owner) == l.me) owners.push_back(owner);
  for (int owner : owners) {
    if (local_sources.empty()) {  // alone on its host: its operand is the partial
      for (int c = 0; c < l.C; ++c)
        add_step(schedule,
                 send_step(owner, tag_of(owner, c, l.C), operand(owner, c), l.part(c).count, {}));
      continue;
    }
    const size_t partial = schedule->scratch_count;
    schedule->scratch_count += l.block;
    for (int c = 0; c < l.C; ++c) {
      const Range sum = scratch_at(partial + l.part(c).offset);
      const uint32_t reduced = staging.reduce_chain(local_sources, tag_of(owner, c, l.C),
                                                    operand(owner, c), sum, l.part(c).count, false);
      add_step(schedule, send_step(owner, tag_of(owner, c, l.C), sum, l.part(c).count, {reduced}));
    }
  }
  // 3. This rank's block: its host's operands, then one partial from every other host.
  std::vector<Staging::Source> sources = local_sources;
  for (int k = 1; k < l.hosts.count(); ++k)  // in the order they send: the previous host first
    sources.push_back(Staging::Source{l.hosts.agent(l.shifted(-k), l.me), false});
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

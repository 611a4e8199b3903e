#include "lib/algorithms/hier_two_level.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "lib/algorithms/blocks.h"
#include "lib/algorithms/bruck.h"
#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/hosts.h"

namespace ddl {
namespace {

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

// Where a rank holds chunk c of a block it forwards inside its host (not its own block, which
// is in its input), and the step that put it there.
struct HeldChunk {
  Range at;
  std::vector<uint32_t> after;
};

// The allgathers' last move: every block a rank holds (held_by(rank): its own first) to the
// other ranks of its host, each chunk once it is here: sent, or (peer memory) written straight
// into their outputs; and what each of them holds, from them (written into this rank's output
// by them, with peer memory).
void forward_in_host(const CollectiveArgs &args, const Layout &l,
                     const std::function<std::vector<int>(int)> &held_by, Schedule *schedule,
                     const std::function<HeldChunk(int, int)> &held_chunk) {
  schedule->peer_memory = l.single_copy(args);
  const std::vector<int> held = held_by(l.me);
  for (int peer : l.here) {
    if (peer == l.me) continue;
    for (int b : held)
      for (int c = 0; c < l.C; ++c) {
        HeldChunk from = b == l.me ? HeldChunk{input_at(l.part(c).offset), {}} : held_chunk(b, c);
        add_step(schedule, schedule->peer_memory
                               ? peer_write_step(peer, from.at, l.at(BufferId::kOutput, b, c),
                                                 l.part(c).count, std::move(from.after))
                               : send_step(peer, tag_of(b, c, l.C), from.at, l.part(c).count,
                                           std::move(from.after)));
      }
    if (schedule->peer_memory) continue;
    for (int b : held_by(peer))
      for (int c = 0; c < l.C; ++c)
        add_step(schedule, recv_step(peer, tag_of(b, c, l.C), l.at(BufferId::kOutput, b, c),
                                     l.part(c).count, {}));
  }
}

// The reduce-scatters' first move (without peer memory, where the others read them instead):
// this rank's operands of the other blocks, to the owner when it is on this host, else to
// this host's agent for that block (unless that is this rank).
void send_operands_in_host(const CollectiveArgs &args, const Layout &l, Schedule *schedule) {
  for (int b = 0; b < args.nranks; ++b) {
    const int to = l.hosts.host_of[b] == l.h ? b : l.hosts.agent(l.h, b);
    if (b == l.me || to == l.me) continue;
    for (int c = 0; c < l.C; ++c)
      add_step(schedule,
               send_step(to, tag_of(b, c, l.C), l.at(BufferId::kInput, b, c), l.part(c).count, {}));
  }
}

// The Bruck forms (hier_two_level.h): the ranks of one local index, one per host (a rail),
// pass their blocks around in rounds at distances 1, 2, 4, ... hosts. Each rank keeps them in
// scratch by host, its own host's first (position j: host h+j's), so that what it passes on
// in a round is one run of positions, sent as messages of up to `per_message` blocks.
class BruckRail {
 public:
  BruckRail(const CollectiveArgs &args, const Layout &l, Schedule *schedule)
      : l_(l),
        H_(l.hosts.count()),
        per_message_(blocks_per_message(args, l.block, H_)),
        least_split_(least_split(args, l.block)),
        base_(schedule->scratch_count) {
    schedule->scratch_count += static_cast<size_t>(H_) * l.block;
  }

  // The rank on host h+j with `rank`'s local index (default: this rank's, its rail), the
  // position of rank b's host, and where position j's block is kept.
  int rank_at(int j, int rank = -1) const {
    const int local = l_.hosts.local_of[rank < 0 ? l_.me : rank];
    return l_.hosts.ranks[static_cast<size_t>(l_.shifted(j))][static_cast<size_t>(local)];
  }
  int position_of(int b) const { return (l_.hosts.host_of[b] - l_.h + H_) % H_; }
  Range position(int j) const { return scratch_at(base_ + static_cast<size_t>(j) * l_.block); }
  int hosts() const { return H_; }

  // The rounds' distances, nearest first (allgather's order), and how many positions each
  // passes on: min(d, H - d).
  std::vector<int> distances() const {
    std::vector<int> d;
    for (int at = 1; at < H_; at *= 2) d.push_back(at);
    return d;
  }
  int passed(int d) const { return std::min(d, H_ - d); }
  // The messages of a round (per_message(d) blocks each): [first, first + blocks) of its
  // positions, the first positions first or (`last_first`) last first; `first` is the
  // message's tag (one round per pair of ranks and direction).
  template <typename Visit>
  void messages(int d, bool last_first, Visit visit) const {
    const int per = per_message(d);
    const int n = passed(d), count = (n + per - 1) / per;
    for (int i = 0; i < count; ++i) {
      const int first = (last_first ? count - 1 - i : i) * per;
      visit(first, std::min(per, n - first));
    }
  }
  size_t elems(int blocks) const { return static_cast<size_t>(blocks) * l_.block; }
  size_t message_elems() const { return elems(per_message_); }

 private:
  const Layout &l_;
  const int H_;
  int per_message(int d) const { return round_message_blocks(per_message_, least_split_, d); }

  const int per_message_, least_split_;
  const size_t base_;
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
  const int links = rails_for(args, local);
  const double network = args.net.alpha + (groups - 1) * local * block * args.net.beta / links;
  const double local_beta = args.peer_memory ? args.local.beta / 2 : args.local.beta;
  const double local_byte_cost = reducing ? std::max(local_beta, args.local.gamma) : local_beta;
  const double inside = args.local.alpha + (local - 1) * groups * block * local_byte_cost;
  return network + inside;
}

// The Bruck forms move the same bytes as hier's and the same inside hosts; they differ in
// the messages between hosts (fewer, packed) and the rounds (ceil(log2 H) after one another),
// and an allgather's blocks pass through scratch (one more copy of each).
double hier_bruck_cost(const CollectiveArgs &args, bool reducing) {
  const double direct = hier_two_level_cost(args, reducing);
  const TierGroups tier = fastest_tier_groups(args);
  const int H = tier.groups;
  const double inf = std::numeric_limits<double>::infinity();
  if (!(direct < inf) || H < 3 || H * tier.largest != args.nranks) return inf;
  const int per_message = blocks_per_message(args, args.count, H);
  if (per_message < 2) return inf;  // nothing to pack: hier's messages, later
  int rounds = 0;
  double messages = 0;
  const int least = least_split(args, args.count);
  for (int d = 1; d < H; d *= 2) {
    ++rounds;
    messages += std::ceil(static_cast<double>(std::min(d, H - d)) /
                          round_message_blocks(per_message, least, d));
  }
  // Fewer messages to post and complete, more rounds; an allgather's blocks once more
  // through scratch (a reduce-scatter's partial sums are made there anyway).
  const double copies = reducing ? 0 : H * count_bytes(args) * args.local.gamma;
  return direct + (rounds - 1) * args.net.alpha - (H - 1 - messages) * args.net.overhead + copies;
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
  //    To at most four hosts at once (NetworkSendWindow): among many hosts whose NICs share
  //    their links among connections, blocks sent to every host at once all arrive at the
  //    end, and the agents' forwarding cannot overlap them (ddl_sim, link_sharing = fair: 64
  //    hosts x 8 at 256 MB 55 % of the bound, 89 % with the window; no change first come,
  //    first served). Not fewer: two at once cost 6 % on 4 emulated hosts x 2, four change
  //    nothing there.
  NetworkSendWindow window(args, 4);
  for (int k = 1; k < l.hosts.count(); ++k) {
    const int g = l.shifted(k);
    for (int c = 0; c < l.C; ++c)
      window.add(schedule, send_step(l.hosts.agent(g, l.me), tag_of(l.me, c, l.C),
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
  // 3. Inside the host, from where they arrived.
  forward_in_host(args, l, held_by, schedule, [&](int b, int c) {
    return HeldChunk{l.at(BufferId::kOutput, b, c), {arrived[b][c]}};
  });
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

  // 1. This rank's operands to whoever reduces them on this host.
  if (!read) send_operands_in_host(args, l, schedule);
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
  // 3. This rank's block: its host's operands into its output, after the agent's chains (where
  //    the host tier is the slower one, those feed the network first); the other hosts'
  //    partials, as they arrive, into a block of scratch in staging slots of their own
  //    (chunk after chunk from one host after another, the previous host first: the agents'
  //    order); then each chunk's sum of the partials into the output. (Added into the
  //    output after the host's operands, in the agent's slots, chunk after chunk, the
  //    partials waited for the end and were added one after the other: ddl_sim, dgx-h100 16
  //    x 8 at 256 MB, the last 90 us of 735; now 695.)
  const bool alone = l.hosts.count() == 1;  // the host's sum is the block's
  std::vector<uint32_t> host_sum(static_cast<size_t>(l.C));
  for (int c = 0; c < l.C; ++c) {
    const Range mine = operand(l.me, c), dst = output_at(l.part(c).offset);
    host_sum[static_cast<size_t>(c)] =
        local_sources.empty() ? add_step(schedule, copy_step(mine, dst, l.part(c).count, {}))
                              : staging.reduce_chain(local_sources, tag_of(l.me, c, l.C), mine, dst,
                                                     l.part(c).count, alone);
  }
  if (alone) return;
  const size_t partials = schedule->scratch_count;
  schedule->scratch_count += l.block;
  Staging arriving(schedule, l.chunks.chunk_elems());
  std::vector<uint32_t> partials_sum(static_cast<size_t>(l.C));
  for (int k = 1; k < l.hosts.count(); ++k) {
    const int agent = l.hosts.agent(l.shifted(-k), l.me);
    for (int c = 0; c < l.C; ++c) {
      const Range sum = scratch_at(partials + l.part(c).offset);
      const uint32_t tag = tag_of(l.me, c, l.C);
      uint32_t &last = partials_sum[static_cast<size_t>(c)];
      last = k == 1 ? add_step(schedule, recv_step(agent, tag, sum, l.part(c).count, {}))
                    : arriving.recv_reduce(agent, tag, sum, sum, l.part(c).count, false, {last});
    }
  }
  for (int c = 0; c < l.C; ++c) {
    const Range dst = output_at(l.part(c).offset);
    add_step(schedule,
             reduce_step(scratch_at(partials + l.part(c).offset), dst, dst, l.part(c).count, true,
                         {host_sum[static_cast<size_t>(c)], partials_sum[static_cast<size_t>(c)]}));
  }
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

void build_hier_bruck_allgather(const CollectiveArgs &args, Schedule *schedule) {
  if (!Hosts(args).even()) return build_hier_allgather(args, schedule);  // each rank a rail
  if (!start_blocks_schedule(args, Collective::kAllgather, "hier_bruck", schedule)) return;
  const Layout l(args);
  if (l.block == 0) return;
  BruckRail rail(args, l, schedule);
  // written[j]: the steps that put position j's block in scratch.
  std::vector<std::vector<uint32_t>> written(static_cast<size_t>(rail.hosts()));
  written[0] = {add_step(schedule, copy_step(input_at(0), rail.position(0), l.block, {}))};
  // Round d: positions [0, n) to the rail's rank d hosts back; [d, d + n) from d hosts on.
  for (int d : rail.distances())
    rail.messages(d, false, [&](int first, int blocks) {
      add_step(schedule,
               send_step(rail.rank_at(-d), static_cast<uint32_t>(first), rail.position(first),
                         rail.elems(blocks), steps_of(written, first, blocks)));
      const uint32_t got =
          add_step(schedule, recv_step(rail.rank_at(d), static_cast<uint32_t>(first),
                                       rail.position(d + first), rail.elems(blocks), {}));
      for (int j = d + first; j < d + first + blocks; ++j) written[static_cast<size_t>(j)] = {got};
    });
  // The rail's blocks into this rank's output, and to the other ranks of its host from
  // scratch, each once it is here.
  auto rail_of = [&](int rank) {
    std::vector<int> blocks;
    for (int j = 0; j < rail.hosts(); ++j) blocks.push_back(rail.rank_at(j, rank));
    return blocks;
  };
  for (int j = 1; j < rail.hosts(); ++j)
    add_step(schedule, copy_step(rail.position(j), l.at(BufferId::kOutput, rail.rank_at(j), 0),
                                 l.block, written[static_cast<size_t>(j)]));
  forward_in_host(args, l, rail_of, schedule, [&](int b, int c) {
    const int j = rail.position_of(b);
    return HeldChunk{Range{BufferId::kScratch, rail.position(j).offset + l.part(c).offset},
                     written[static_cast<size_t>(j)]};
  });
}

void build_hier_bruck_reduce_scatter(const CollectiveArgs &args, Schedule *schedule) {
  const Hosts hosts(args);
  if (!hosts.even() || hosts.count() < 2) return build_hier_reduce_scatter(args, schedule);
  if (!start_blocks_schedule(args, Collective::kReduceScatter, "hier_bruck", schedule)) return;
  const Layout l(args);
  if (l.block == 0) return;
  const bool read = l.single_copy(args);
  schedule->peer_memory = read;
  std::vector<Staging::Source> local_sources;
  for (int r : l.here)
    if (r != l.me) local_sources.push_back(Staging::Source{r, read});
  BruckRail rail(args, l, schedule);
  // Slots of its own for the rounds' messages: they need not wait for the host's sums.
  Staging staging(schedule, l.chunks.chunk_elems()), round_staging(schedule, rail.message_elems());
  // 1. This rank's operands to whoever reduces them on this host (as hier's).
  if (!read) send_operands_in_host(args, l, schedule);
  // 2. The host's partial sum of each of the rail's blocks, the farthest position first: the
  //    rounds pass on the far positions first and add into the near ones last.
  std::vector<std::vector<uint32_t>> host_sum(static_cast<size_t>(rail.hosts()));
  for (int j = rail.hosts() - 1; j >= 0; --j) {
    const int b = rail.rank_at(j);
    for (int c = 0; c < l.C; ++c) {
      const Range operand = l.at(BufferId::kInput, b, c);
      const Range partial{BufferId::kScratch, rail.position(j).offset + l.part(c).offset};
      host_sum[static_cast<size_t>(j)].push_back(
          local_sources.empty()
              ? add_step(schedule, copy_step(operand, partial, l.part(c).count, {}))
              : staging.reduce_chain(local_sources, tag_of(b, c, l.C), operand, partial,
                                     l.part(c).count, false));
    }
  }
  // 3. allgather's rounds backwards: round d sends positions [d, d + n) to the rail's rank d
  //    hosts on and adds what d hosts back sends for [0, n). Position 0 (this rank's block)
  //    takes a sum in every round; the last one lands in the output. Last positions first:
  //    round d/2 passes on [d/2, d), which then arrives first in round d, so that each round
  //    starts while the one before is still on the wire (in allgather's order it would wait
  //    for the end of it).
  //    What arrives for a position is added up apart from the host's sum (`arrived`), which
  //    joins it only when the position is passed on: the first round receives into the near
  //    half while the host still sums the far one, and added into the host's sums the
  //    receives waited for them, slots full, the senders' links idle (ddl_sim, dgx-h100 512 x
  //    8, reduce_scatter 256 MB: 84.7 % of the bound; apart 89.6 %, and with the rounds'
  //    messages split, BruckRail::per_message, 90.9 %).
  // The positions that receive before the last round, [0, receiving) (the last one, d = 1,
  // lands in the output).
  int receiving = 0;
  for (int d : rail.distances())
    if (d > 1) receiving = std::max(receiving, rail.passed(d));
  const size_t arrived_base = schedule->scratch_count;
  schedule->scratch_count += rail.elems(receiving);
  auto arrived_at = [&](int j) { return scratch_at(arrived_base + rail.elems(j)); };
  // By position: the steps that wrote its sum of arrivals (none yet: nothing arrived), and
  // whether the host's sum is in it too (folded).
  std::vector<std::vector<uint32_t>> arrived(static_cast<size_t>(rail.hosts()));
  std::vector<bool> folded(static_cast<size_t>(rail.hosts()), false);
  auto fold = [&](int j) {
    const size_t at = static_cast<size_t>(j);
    std::vector<uint32_t> after = host_sum[at];
    after.insert(after.end(), arrived[at].begin(), arrived[at].end());
    arrived[at] = {add_step(
        schedule, arrived[at].empty() ? copy_step(rail.position(j), arrived_at(j), l.block, after)
                                      : reduce_step(arrived_at(j), rail.position(j), arrived_at(j),
                                                    l.block, false, after))};
    folded[at] = true;
  };
  // Position j's whole sum, where a send takes it (rail.position(j)); returns its steps.
  auto whole_sum = [&](int j) -> std::vector<uint32_t> {
    const size_t at = static_cast<size_t>(j);
    if (arrived[at].empty()) return host_sum[at];
    std::vector<uint32_t> after = arrived[at];
    if (folded[at])
      return {add_step(schedule, copy_step(arrived_at(j), rail.position(j), l.block, after))};
    after.insert(after.end(), host_sum[at].begin(), host_sum[at].end());
    return {add_step(schedule, reduce_step(arrived_at(j), rail.position(j), rail.position(j),
                                           l.block, false, after))};
  };
  const std::vector<int> distances = rail.distances();
  for (auto d = distances.rbegin(); d != distances.rend(); ++d)
    rail.messages(*d, true, [&](int first, int blocks) {
      std::vector<uint32_t> ready;
      for (int j = *d + first; j < *d + first + blocks; ++j) {
        const std::vector<uint32_t> steps = whole_sum(j);
        ready.insert(ready.end(), steps.begin(), steps.end());
      }
      add_step(schedule, send_step(rail.rank_at(*d), static_cast<uint32_t>(first),
                                   rail.position(*d + first), rail.elems(blocks), ready));
      const int from = rail.rank_at(-*d);
      const uint32_t tag = static_cast<uint32_t>(first);
      if (*d == 1) {  // the last round (first == 0, one block): this rank's block, whole
        Range operand = rail.position(0);
        std::vector<uint32_t> after = host_sum[0];
        if (!arrived[0].empty()) {
          if (!folded[0]) fold(0);
          operand = arrived_at(0);
          after = arrived[0];
        }
        round_staging.recv_reduce(from, tag, operand, output_at(0), l.block, true, after);
        return;
      }
      bool fresh = true;
      for (int j = first; j < first + blocks; ++j)
        fresh = fresh && arrived[static_cast<size_t>(j)].empty();
      uint32_t got;
      if (fresh) {
        got = add_step(schedule, recv_step(from, tag, arrived_at(first), rail.elems(blocks), {}));
      } else {  // positions that received before add to their sums; any that did not
                // (hosts not a power of two) take the host's sum first
        for (int j = first; j < first + blocks; ++j)
          if (arrived[static_cast<size_t>(j)].empty()) fold(j);
        got =
            round_staging.recv_reduce(from, tag, arrived_at(first), arrived_at(first),
                                      rail.elems(blocks), false, steps_of(arrived, first, blocks));
      }
      for (int j = first; j < first + blocks; ++j) arrived[static_cast<size_t>(j)] = {got};
    });
}

double hier_allgather_cost(const CollectiveArgs &args) {
  return hier_two_level_cost(args, false);
}

double hier_reduce_scatter_cost(const CollectiveArgs &args) {
  return hier_two_level_cost(args, true);
}

double hier_bruck_allgather_cost(const CollectiveArgs &args) {
  return hier_bruck_cost(args, false);
}

double hier_bruck_reduce_scatter_cost(const CollectiveArgs &args) {
  return hier_bruck_cost(args, true);
}

double hier_broadcast_cost(const CollectiveArgs &args) {
  const TierGroups tier = fastest_tier_groups(args);
  if (tier.groups < 2) return std::numeric_limits<double>::infinity();
  const int groups = tier.groups, local = tier.largest;
  const double bytes = count_bytes(args);
  const double depth = std::ceil(std::log2(static_cast<double>(groups)));
  // Each leader sends the whole message to each child in turn: a level costs a message.
  return depth * (args.net.alpha + bytes * args.net.beta) + args.local.alpha +
         (local - 1) * bytes * args.local.beta;
}

}  // namespace ddl

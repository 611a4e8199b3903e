#include "lib/algorithms/hier_bruck_allreduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "lib/algorithms/bruck.h"
#include "lib/algorithms/hier.h"
#include "lib/algorithms/hosts.h"
#include "lib/algorithms/registry.h"

namespace ddl {
namespace {

bool applies(const CollectiveArgs &args, const Hosts &hosts) {
  return !args.tiers.empty() && hosts.even() && args.count >= static_cast<size_t>(args.nranks);
}

// The rounds among H hosts, nearest first (the allgather's order): at each level d = 1, 4, 16,
// ... one to each of the hosts k·d on, k = 1, 2, 3, each passing on up to d positions (its
// width). Bruck's rounds are radix 2, one host a level; at radix 4 a rank sends to 3 at once,
// and half as many levels follow one another (ddl_sim, dgx-h100 512 x 8 at 64 MB: radix 2,
// 4, 8 74.4, 77.4, 73.1 % of the bound; 16 and 64 hosts at 4-16 MB radix 4 6-15 % faster
// than 2; 64 hosts at 64 MB 1.2 % slower).
constexpr int kRadix = 4;

struct Round {
  int distance, width, level;
};
std::vector<Round> bruck_rounds(int H) {
  std::vector<Round> all;
  for (int d = 1; d < H; d *= kRadix)
    for (int k = 1; k < kRadix && k * d < H; ++k)
      all.push_back(Round{k * d, std::min(d, H - k * d), d});
  return all;
}

// How a piece's blocks (one per rank) travel between hosts: each cut into C cells of at most a
// network chunk, and each round's messages carrying per_round(level) cells (runs of whole
// blocks where a block fits a chunk, else one cell). The builder and the model alike.
struct CellSplit {
  CellSplit(const CollectiveArgs &args, size_t block_elems, int hosts)
      : block(block_elems),
        chunk(std::max<size_t>(1, network_chunk_elems(args) ? network_chunk_elems(args) : block)),
        C(block > chunk ? static_cast<int>((block + chunk - 1) / chunk) : 1),
        cell(C > 1 ? chunk : block),
        per_message(C > 1 ? 1 : blocks_per_message(args, block, hosts)),
        least(C > 1 ? 1 : least_split(args, block)) {}

  int per_round(int level) const {
    return C > 1 ? 1 : round_message_blocks(per_message, least, level);
  }

  const size_t block, chunk;
  const int C;
  const size_t cell;
  const int per_message, least;
};

// A rank's view of its rail's segment: cells in the order of positions (position j: host
// h+j's block), the runs of cells each round's messages pass, and the runs the host tier
// reduces at once.
class RailSegment : public CellSplit {
 public:
  // The piece [first, first + count) of the vector (count a multiple of the ranks).
  RailSegment(const CollectiveArgs &args, const Hosts &hosts, size_t first, size_t count)
      : CellSplit(args, count / static_cast<size_t>(args.nranks), hosts.count()),
        H(hosts.count()),
        L(static_cast<int>(hosts.ranks[0].size())),
        h(hosts.host_of[args.rank]),
        l(hosts.local_of[args.rank]),
        base(first),
        hosts_(hosts) {}

  int cells() const { return H * C; }
  // Elements from position 0's first cell to cell x (x <= cells()), and in the run [x, y).
  size_t offset(int x) const {
    return static_cast<size_t>(x / C) * block + static_cast<size_t>(x % C) * cell;
  }
  size_t elems(int x, int y) const { return offset(y) - offset(x); }
  // Where cell x of rail `local`'s segment lies in a buffer of the whole vector.
  Range at(BufferId buffer, int local, int x) const {
    const size_t host = static_cast<size_t>((h + x / C) % H);
    return Range{buffer, base + (static_cast<size_t>(local) * H + host) * block +
                             static_cast<size_t>(x % C) * cell};
  }
  // This rank's rail's rank on host h+j (j may be negative).
  int rail_rank(int j) const {
    return hosts_.ranks[static_cast<size_t>(ring_index(h + j, H))][static_cast<size_t>(l)];
  }
  // The run [x, y) cut where host 0's block starts (the buffer wraps around there): each part
  // is one range of the buffer.
  template <typename Visit>
  void split(int x, int y, Visit visit) const {
    const int wrap = ring_index(H - h, H) * C;
    if (wrap > x && wrap < y) {
      visit(x, wrap);
      visit(wrap, y);
    } else {
      visit(x, y);
    }
  }
  std::vector<Round> rounds() const { return bruck_rounds(H); }
  // A round's messages: runs [first, first + count) of the cells it passes (counted from the
  // first of them), the first first or (`last_first`) the last first.
  template <typename Visit>
  void messages(const Round &round, bool last_first, Visit visit) const {
    const int per = per_round(round.level), n = round.width * C;
    const int count = (n + per - 1) / per;
    for (int i = 0; i < count; ++i) {
      const int first = (last_first ? count - 1 - i : i) * per;
      visit(first, std::min(per, n - first));
    }
  }
  size_t message_elems() const { return static_cast<size_t>(per_message) * cell; }
  // The runs the host tier reduces at once, the farthest positions first (the rounds pass
  // them on first): up to a network chunk, aligned to the largest power of two of cells that
  // fits one, so that each round's messages wait for one or two of them.
  int unit_cells() const {
    int rounds = 0;
    return C > 1 ? 1
                 : power_of_two_below(static_cast<int>(std::min<size_t>(
                                          chunk / block, static_cast<size_t>(cells()))),
                                      &rounds);
  }
  template <typename Visit>
  void units(Visit visit) const {
    const int u = unit_cells();
    for (int top = cells(); top > 0;) {
      const int bottom = (top - 1) / u * u;
      split(bottom, top, visit);
      top = bottom;
    }
  }

  const int H, L, h, l;
  const size_t base;

 private:
  const Hosts &hosts_;
};

// Appends visit(a, b) for each maximal run of [x, y) whose cells have one `key`.
template <typename Key, typename Visit>
void runs_alike(int x, int y, Key key, Visit visit) {
  for (int a = x; a < y;) {
    int b = a + 1;
    while (b < y && key(b) == key(a)) ++b;
    visit(a, b);
    a = b;
  }
}

std::vector<uint32_t> joined(std::vector<uint32_t> a, const std::vector<uint32_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What the pieces share: the host's other ranks (the next local index first) and the staging
// slots of the host tier's reductions and of the rounds' receives.
struct Shared {
  std::vector<int> peers;
  std::vector<Staging::Source> sources;
  Staging *staging, *round_staging;
};

// One piece: its tags from tag_base; its host tier's first steps wait for `gate` (when >= 0).
// Returns the last step of its host tier's sums.
uint32_t build_piece(const CollectiveArgs &args, const Hosts &hosts, const RailSegment &seg,
                     const Shared &shared, uint32_t tag_base, int64_t gate, Schedule *schedule) {
  const int cells = seg.cells();
  const std::vector<int> &peers = shared.peers;
  const bool read = schedule->peer_memory;
  const size_t sums = schedule->scratch_count;
  schedule->scratch_count += seg.offset(cells);
  auto sum_at = [&](int x) { return scratch_at(sums + seg.offset(x)); };
  auto at = [&](int x) { return seg.at(BufferId::kOutput, seg.l, x); };
  const uint32_t first_step = static_cast<uint32_t>(schedule->steps.size());

  // 1. Inside the host: its sum of each cell of this rank's segment, the farthest positions
  //    first, read out of the peers' inputs or (without peer memory) received from them,
  //    after this rank's operands of their segments went to them.
  std::vector<std::vector<uint32_t>> sent_to(static_cast<size_t>(seg.L));  // by local index
  if (!read)
    for (int peer : peers) {
      const int local = hosts.local_of[peer];
      seg.units([&](int a, int b) {
        sent_to[static_cast<size_t>(local)].push_back(
            add_step(schedule, send_step(peer, tag_base + static_cast<uint32_t>(a),
                                         seg.at(BufferId::kInput, local, a), seg.elems(a, b), {})));
      });
    }
  std::vector<std::vector<uint32_t>> host_sum(static_cast<size_t>(cells));
  seg.units([&](int a, int b) {
    const Range mine = seg.at(BufferId::kInput, seg.l, a);
    const uint32_t step =
        shared.sources.empty()
            ? add_step(schedule, copy_step(mine, sum_at(a), seg.elems(a, b), {}))
            : shared.staging->reduce_chain(shared.sources, tag_base + static_cast<uint32_t>(a),
                                           mine, sum_at(a), seg.elems(a, b), false);
    for (int x = a; x < b; ++x) host_sum[static_cast<size_t>(x)] = {step};
  });
  // The pipeline's order inside the host: this piece's sums after the previous piece's.
  const uint32_t host_done = static_cast<uint32_t>(schedule->steps.size()) - 1;
  if (gate >= 0)
    for (uint32_t step = first_step; step <= host_done; ++step)
      schedule->steps[step].deps.push_back(static_cast<uint32_t>(gate));

  // 2. The rail's reduce-scatter: the rounds backwards, as hier_bruck's reduce-scatter
  //    (hier_two_level.cc): round d sends positions [d, d + width) to the rail's rank d hosts
  //    on and adds what d hosts back sends for [0, width), apart from the host's sums
  //    (`arrived`), which join them when a position is passed on (`folded`: already in).
  //    Position 0's last sum lands in the output.
  int receiving = 0;  // positions that receive before the last round
  const std::vector<Round> rounds = seg.rounds();
  for (const auto &round : rounds)
    if (round.distance > 1) receiving = std::max(receiving, round.width);
  const size_t arrivals = schedule->scratch_count;
  schedule->scratch_count += seg.offset(receiving * seg.C);
  auto arrived_at = [&](int x) { return scratch_at(arrivals + seg.offset(x)); };
  std::vector<std::vector<uint32_t>> arrived(static_cast<size_t>(cells));
  std::vector<char> folded(static_cast<size_t>(cells), 0);
  auto state = [&](int x) {  // 0: nothing arrived; 1: arrivals and host's sum; 2: arrivals
    const size_t at_x = static_cast<size_t>(x);
    return arrived[at_x].empty() ? 0 : folded[at_x] ? 1 : 2;
  };
  auto mark = [&](std::vector<std::vector<uint32_t>> *steps, int a, int b, uint32_t step) {
    for (int x = a; x < b; ++x) (*steps)[static_cast<size_t>(x)] = {step};
  };
  // The host's sum into the arrivals of [x, y) where it is not in them yet (`empty_only`: only
  // where nothing arrived, so that a receive can add into them all).
  auto fold = [&](int x, int y, bool empty_only) {
    runs_alike(x, y, state, [&](int a, int b) {
      const int s = state(a);
      if (s == 1 || (empty_only && s == 2)) return;
      const std::vector<uint32_t> after =
          joined(steps_of(host_sum, a, b - a), steps_of(arrived, a, b - a));
      const size_t n = seg.elems(a, b);
      mark(&arrived, a, b,
           add_step(schedule, s == 0 ? copy_step(sum_at(a), arrived_at(a), n, after)
                                     : reduce_step(arrived_at(a), sum_at(a), arrived_at(a), n,
                                                   false, after)));
      for (int c = a; c < b; ++c) folded[static_cast<size_t>(c)] = 1;
    });
  };
  // The whole sums of [x, y) where a send takes them (sum_at); returns the steps to wait for.
  auto whole_sums = [&](int x, int y) {
    std::vector<uint32_t> ready;
    runs_alike(x, y, state, [&](int a, int b) {
      const size_t n = seg.elems(a, b);
      const std::vector<uint32_t> after = steps_of(arrived, a, b - a);
      if (state(a) == 0) {
        ready = joined(ready, steps_of(host_sum, a, b - a));
      } else if (state(a) == 1) {
        ready.push_back(add_step(schedule, copy_step(arrived_at(a), sum_at(a), n, after)));
      } else {
        ready.push_back(
            add_step(schedule, reduce_step(arrived_at(a), sum_at(a), sum_at(a), n, false,
                                           joined(after, steps_of(host_sum, a, b - a)))));
      }
    });
    return ready;
  };
  std::vector<std::vector<uint32_t>> written(static_cast<size_t>(cells));  // output, by cell
  std::vector<std::pair<int, int>> landed;  // the output's runs, in the order they complete
  for (auto round = rounds.rbegin(); round != rounds.rend(); ++round)
    seg.messages(*round, true, [&](int first, int count) {
      const int d = round->distance, x = d * seg.C + first, y = first + count;
      const uint32_t tag = tag_base + static_cast<uint32_t>(first);
      add_step(schedule, send_step(seg.rail_rank(d), tag, sum_at(x), seg.elems(x, x + count),
                                   whole_sums(x, x + count)));
      const int from = seg.rail_rank(-d);
      const size_t n = seg.elems(first, y);
      if (d == 1) {  // the last round: cells of position 0, whole, into the output
        Range operand = sum_at(first);
        std::vector<uint32_t> after = steps_of(host_sum, first, count);
        if (!steps_of(arrived, first, count).empty()) {
          fold(first, y, false);
          operand = arrived_at(first);
          after = steps_of(arrived, first, count);
        }
        mark(&written, first, y,
             shared.round_staging->recv_reduce(from, tag, operand, at(first), n, true, after));
        landed.emplace_back(first, y);
        return;
      }
      if (steps_of(arrived, first, count).empty()) {
        mark(&arrived, first, y,
             add_step(schedule, recv_step(from, tag, arrived_at(first), n, {})));
        return;
      }
      fold(first, y, true);
      mark(&arrived, first, y,
           shared.round_staging->recv_reduce(from, tag, arrived_at(first), arrived_at(first), n,
                                             false, steps_of(arrived, first, count)));
    });

  // 3. The rail's allgather: Bruck's rounds forwards, straight in the output (a run that wraps
  //    around the buffer goes as two messages). A receive waits for the host's sums of its
  //    cells: in place, they read this rank's input there.
  const uint32_t gather_tags = tag_base + static_cast<uint32_t>(cells);
  for (const auto &round : rounds)
    seg.messages(round, false, [&](int first, int count) {
      const int d = round.distance;
      seg.split(first, first + count, [&](int a, int b) {
        add_step(schedule, send_step(seg.rail_rank(-d), gather_tags + static_cast<uint32_t>(a),
                                     at(a), seg.elems(a, b), steps_of(written, a, b - a)));
      });
      const int x = d * seg.C + first;
      seg.split(x, x + count, [&](int a, int b) {
        const uint32_t tag = gather_tags + static_cast<uint32_t>(a - d * seg.C);
        mark(&written, a, b,
             add_step(schedule, recv_step(seg.rail_rank(d), tag, at(a), seg.elems(a, b),
                                          steps_of(host_sum, a, b - a))));
        landed.emplace_back(a, b);
      });
    });

  // 4. Inside the host: each run, once here, into the other ranks' outputs (written, or sent
  //    with peer memory off); what put it here waited for the host's sums, so the reads of
  //    their inputs there (in place, the same memory) are done. Without peer memory, theirs
  //    from them, the same runs of their segments.
  for (const auto &run : landed)
    for (int peer : peers) {
      const int a = run.first, b = run.second;
      const std::vector<uint32_t> after = steps_of(written, a, b - a);
      add_step(schedule, read ? peer_write_step(peer, at(a), at(a), seg.elems(a, b), after)
                              : send_step(peer, gather_tags + static_cast<uint32_t>(a), at(a),
                                          seg.elems(a, b), after));
    }
  if (read) return host_done;
  for (int peer : peers) {
    const int local = hosts.local_of[peer];
    for (const auto &run : landed)
      add_step(
          schedule,
          recv_step(peer, gather_tags + static_cast<uint32_t>(run.first),
                    seg.at(BufferId::kOutput, local, run.first), seg.elems(run.first, run.second),
                    args.in_place ? sent_to[static_cast<size_t>(local)] : std::vector<uint32_t>{}));
  }
  return host_done;
}

// Where the models consider it: from 4 MB. Below, its two halves' rounds cost as many
// latencies as the bytes they carry, and it gains nothing on hier's one allreduce among hosts
// (ddl_sim, dgx-h100 16 x 8 at 1 MB: hier 46.7 us, this 47.3; at 4 MB 91.5 and 66.4).
constexpr double kMinBytes = 4.0 * 1024 * 1024;

// The rank's work on its messages (a send's and a receive's overhead each) overlaps the bytes
// on the wire, and sets the pace where it takes longer (ddl_sim, dgx-h100 16 x 8 at 4 MB: 9
// messages a half, 66 us in all; priced as hier's pieces are, with half as much again, 82).
constexpr double kMessageWorkShare = 1;

// The model in `pieces` pieces. Each half (reduce-scatter, allgather): the host's bytes over
// its rails, inside the host, or the rank's work on its messages, the slowest setting the
// pace (run by run each tier passes work on to the other). Between them, a piece's rounds one
// after the other (the reduce-scatter's last ones and the allgather's first ones carry
// little), each a network latency and a message's work, and the host tier's latency: the
// wire idles meanwhile (other pieces do not fill it: pieces_of).
double cost_in_pieces(const CollectiveArgs &args, int pieces) {
  const double inf = std::numeric_limits<double>::infinity();
  const TierGroups tier = fastest_tier_groups(args);
  const int H = tier.groups, L = tier.largest;
  const size_t ranks_pieces = static_cast<size_t>(args.nranks) * static_cast<size_t>(pieces);
  if (args.tiers.empty() || H < 2 || L < 2 || H * L != args.nranks || args.count < ranks_pieces)
    return inf;
  const double bytes = count_bytes(args);
  const double network = (H - 1.0) / H * bytes * args.net.beta / rails_for(args, L);
  const double local_beta = args.peer_memory ? args.local.beta / 2 : args.local.beta;
  const double inside = (L - 1.0) / L * bytes * local_beta;
  const double reduced = (L - 1.0) / L * bytes * std::max(local_beta, args.local.gamma);
  const CellSplit split(args, args.count / ranks_pieces, H);
  double levels = 0, messages = 0;
  for (const Round &round : bruck_rounds(H)) {
    levels += round.distance == round.level ? 1 : 0;
    messages +=
        std::ceil(static_cast<double>(round.width) * split.C / split.per_round(round.level));
  }
  const double message_work = kMessageWorkShare * pieces * messages * 2 * args.net.overhead;
  const double chain = levels * (args.net.alpha + args.net.overhead) + args.local.alpha;
  const double scatter = std::max({network, reduced, message_work});
  const double gather = std::max({network, inside, message_work});
  return scatter + gather + 2 * chain;
}

// How many pieces: CollectiveArgs::pieces (DDL_HIER_PIECES) where each piece keeps an element
// a rank, else one. The models take one: in ddl_sim pieces lose wherever links serve messages
// first come, first served (the clusters' calibrated default), since a later piece's large
// reduce-scatter messages queue ahead of an earlier piece's small rounds (dgx-h100 512 x 8,
// 64 MB: 77.4 % of the bound in one piece, 72.0 in 2; at radix 2 74.4, 69.3 and 66.9 in 1, 2,
// 4; 16 and 64 hosts at 16-256 MB: the same or slower); with links shared among connections
// (link_sharing = fair) two pieces win there (74.1 -> 77.9 %).
int pieces_of(const CollectiveArgs &args) {
  const size_t ranks = static_cast<size_t>(std::max(1, args.nranks));
  const bool fits = args.pieces > 1 && args.count >= ranks * static_cast<size_t>(args.pieces);
  return fits ? args.pieces : 1;
}

// The elements the pieces take: a multiple of the ranks in every piece. The rest (fewer than
// ranks x pieces, at the end) go to the tail (append_tail).
size_t pieces_count(const CollectiveArgs &args, int pieces) {
  const size_t unit = static_cast<size_t>(args.nranks) * static_cast<size_t>(pieces);
  return args.count - args.count % unit;
}

// The last `args.count - offset` elements, allreduced by the models' choice for so few (not
// this: they do not divide among the ranks) beside the pieces: its own memory, scratch and
// tags (from tag_base), nothing to wait for, so that its latency hides under theirs.
void append_tail(const CollectiveArgs &args, size_t offset, uint32_t tag_base, Schedule *schedule) {
  CollectiveArgs tail = args;
  tail.count = args.count - offset;
  tail.algorithm.clear();
  tail.pieces = 0;
  Schedule part;
  build_schedule(tail, &part);
  const uint32_t base = static_cast<uint32_t>(schedule->steps.size());
  const size_t scratch = schedule->scratch_count;
  for (Step step : part.steps) {
    for (Range *r : {&step.src, &step.dst, &step.tmp})
      r->offset += r->buffer == BufferId::kScratch ? scratch : offset;
    if (is_message(step.kind)) {
      const uint64_t tag = static_cast<uint64_t>(step.tag) + tag_base;
      // Past the transport's range: the plan fails with advice (make_comm_plan).
      step.tag =
          tag > kMaxStepTag ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(tag);
    }
    for (uint32_t &d : step.deps) d += base;
    add_step(schedule, std::move(step));
  }
  schedule->scratch_count += part.scratch_count;
  schedule->peer_memory = schedule->peer_memory || part.peer_memory;
}

}  // namespace

void build_hier_bruck_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  const Hosts hosts(args);
  if (!applies(args, hosts)) return build_hier_allreduce(args, schedule);
  if (!start_allreduce_schedule(args, "hier_bruck", schedule)) return;
  const int pieces = pieces_of(args);
  const size_t piece_count = pieces_count(args, pieces) / static_cast<size_t>(pieces);
  const RailSegment first(args, hosts, 0, piece_count);
  schedule->peer_memory = args.peer_memory && first.L > 1;
  const std::vector<int> &here = hosts.ranks[static_cast<size_t>(first.h)];
  Shared shared;
  for (int k = 1; k < first.L; ++k) {
    shared.peers.push_back(here[static_cast<size_t>((first.l + k) % first.L)]);
    shared.sources.push_back(Staging::Source{shared.peers.back(), schedule->peer_memory});
  }
  Staging staging(schedule, static_cast<size_t>(first.unit_cells()) * first.cell);
  Staging round_staging(schedule, first.message_elems());
  shared.staging = &staging;
  shared.round_staging = &round_staging;
  int64_t gate = -1;
  const uint32_t piece_tags = 2 * static_cast<uint32_t>(first.cells());
  for (int p = 0; p < pieces; ++p) {
    const RailSegment seg(args, hosts, static_cast<size_t>(p) * piece_count, piece_count);
    gate = build_piece(args, hosts, seg, shared, static_cast<uint32_t>(p) * piece_tags, gate,
                       schedule);
  }
  const size_t taken = piece_count * static_cast<size_t>(pieces);
  if (taken < args.count)
    append_tail(args, taken, static_cast<uint32_t>(pieces) * piece_tags, schedule);
}

int hier_bruck_pieces(const CollectiveArgs &args) {
  return pieces_of(args);
}

// Where the models consider it: among 16 hosts or more. Its gain is what hier's pieces pay in
// their network rounds' latencies, piece by piece, which grows with the hosts; among a few
// its model and hier's differ by less than their error, and on the emulated hosts (1 Gbit/s)
// it measured alike or slower: 4 hosts x 2 at 4 / 16 MB 8 / 5 % slower, 2 x 4 at 4-16 MB and
// 2 x 2 (1 or 2 rails) at 16-64 MB within noise (5 alternating rounds, bench/projections.md).
constexpr int kMinHosts = 16;

double hier_bruck_allreduce_cost(const CollectiveArgs &args) {
  if (count_bytes(args) < kMinBytes || fastest_tier_groups(args).groups < kMinHosts)
    return std::numeric_limits<double>::infinity();
  return cost_in_pieces(args, pieces_of(args));
}

}  // namespace ddl

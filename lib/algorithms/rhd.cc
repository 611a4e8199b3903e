#include "lib/algorithms/rhd.h"

#include <algorithm>

#include "lib/algorithms/blocks.h"

namespace ddl {
namespace {

// The elements of blocks [first, last) of `blocks`: blocks are contiguous, so a run of them
// is one range.
Extent span(const BlockSplit &blocks, int first, int last) {
  const Extent a = blocks.block(first), b = blocks.block(last - 1);
  return Extent{a.offset, b.offset + b.count - a.offset};
}

// What rank r keeps and gives away in each halving round, over p = 2^rounds ranks: round k
// splits the blocks r still reduces in two; the half holding block r stays.
struct Halving {
  std::vector<Extent> keep, give;
};

Halving halving(const BlockSplit &blocks, int p, int rounds, int r) {
  Halving h;
  int lo = 0, hi = p;
  for (int k = 0; k < rounds; ++k) {
    const int mask = p >> (k + 1), mid = lo + (hi - lo) / 2;
    const bool upper = (r & mask) != 0;
    h.keep.push_back(upper ? span(blocks, mid, hi) : span(blocks, lo, mid));
    h.give.push_back(upper ? span(blocks, lo, mid) : span(blocks, mid, hi));
    if (upper)
      lo = mid;
    else
      hi = mid;
  }
  return h;
}

}  // namespace

void build_rhd_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "rhd", schedule)) return;
  const int n = args.nranks, r = args.rank;
  const size_t count = args.count;
  int rounds = 0;
  const int p = power_of_two_below(n, &rounds);
  const int extra = n - p;
  // Tags per (sender, receiver) pair: the fold, a halving round and the doubling round that
  // retraces it (same partner), the unfold.
  const uint32_t fold_tag = 0, unfold_tag = 2 * static_cast<uint32_t>(rounds) + 1;
  auto halving_tag = [](int k) { return 1 + static_cast<uint32_t>(k); };
  auto doubling_tag = [rounds](int j) { return 1 + static_cast<uint32_t>(rounds + j); };

  if (r >= p) {  // folds into r - p, then waits for the result
    const uint32_t sent = add_step(schedule, send_step(r - p, fold_tag, input_at(0), count, {}));
    add_step(schedule, recv_step(r - p, unfold_tag, output_at(0), count, {sent}));
    return;
  }

  const BlockSplit blocks(count, p);
  const Halving h = halving(blocks, p, rounds, r);
  // Each round receives and reduces in one step, so that a transport that reduces on
  // receive (shared memory) reads the partner's data once, in cache. The rounds run one
  // after another, so they share one landing area (used when the transport cannot
  // reduce on receive); a folding rank's is the whole vector.
  schedule->scratch_count = r < extra ? count : h.keep[0].count;

  // `partial` holds this rank's running result: the input until the first reduce writes
  // the output. `ready`: the step that completed it.
  BufferId partial = BufferId::kInput;
  std::vector<uint32_t> ready;
  if (r < extra) {
    ready = {add_step(schedule, recv_reduce_step(r + p, fold_tag, scratch_at(0), input_at(0),
                                                 output_at(0), count, false, {}))};
    partial = BufferId::kOutput;
  }

  // Reduce-scatter by recursive halving. Ranges that are empty (fewer elements than
  // blocks) are empty on both sides of the pair, so both skip the message.
  std::vector<int64_t> halving_send(rounds, -1);
  for (int k = 0; k < rounds; ++k) {
    const int partner = r ^ (p >> (k + 1));
    const Extent keep = h.keep[k], give = h.give[k];
    if (give.count > 0)
      halving_send[k] = add_step(
          schedule,
          send_step(partner, halving_tag(k), Range{partial, give.offset}, give.count, ready));
    if (keep.count == 0) continue;  // later rounds split an empty range: nothing left to do
    // Reads and writes only `keep`: the send of `give` runs alongside.
    ready = {add_step(
        schedule,
        recv_reduce_step(partner, halving_tag(k), scratch_at(0), Range{partial, keep.offset},
                         output_at(keep.offset), keep.count, k == rounds - 1, ready))};
    partial = BufferId::kOutput;
  }

  // Allgather by recursive doubling: round j exchanges the 2^j blocks gathered so far with
  // the partner of halving round rounds-1-j, whose range is exactly what that round gave
  // away (so the receive waits for that send to have read it).
  std::vector<uint32_t> held = ready;  // steps that completed what this rank holds
  for (int j = 0; j < rounds; ++j) {
    const int mask = 1 << j, partner = r ^ mask;
    const int mine = r & ~(mask - 1), theirs = partner & ~(mask - 1);
    const Extent out = span(blocks, mine, mine + mask), in = span(blocks, theirs, theirs + mask);
    if (out.count > 0)
      add_step(schedule,
               send_step(partner, doubling_tag(j), output_at(out.offset), out.count, held));
    if (in.count > 0) {
      std::vector<uint32_t> deps;
      const int64_t gave = halving_send[rounds - 1 - j];
      if (gave >= 0) deps.push_back(static_cast<uint32_t>(gave));
      held.push_back(add_step(
          schedule, recv_step(partner, doubling_tag(j), output_at(in.offset), in.count, deps)));
    }
  }
  if (r < extra) add_step(schedule, send_step(r + p, unfold_tag, output_at(0), count, held));
}

double rhd_allreduce_cost(int nranks, double bytes, const RoundCosts &costs) {
  if (nranks <= 1) return 0.0;
  int rounds = 0;
  const int p = power_of_two_below(nranks, &rounds);
  const CostConstants &c = costs.across;
  const double share = (p - 1.0) / p * bytes;
  double t = 2.0 * share * c.beta + share * c.gamma;
  for (int64_t distance = 1; distance < p; distance *= 2) t += 2.0 * costs.round(distance).alpha;
  if (nranks > p) t += 2.0 * (c.alpha + bytes * c.beta) + bytes * c.gamma;
  return t;
}

}  // namespace ddl

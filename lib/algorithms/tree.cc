#include "lib/algorithms/tree.h"

#include <algorithm>
#include <cstdint>

namespace ddl {
namespace {

constexpr uint32_t kUpTag = 0, kDownTag = 1;

// Rank r's place in the k-nomial tree rooted at 0: its children, by level (the level-0
// children first: leaves, whose messages come first), and its parent (-1 at the root).
struct TreePlace {
  std::vector<int> children;
  int parent = -1;
};

TreePlace tree_place(int n, int r, int radix) {
  TreePlace t;
  for (int64_t d = 1; d < n; d *= radix) {
    const int64_t span = d * radix;
    if (r % span != 0) {
      t.parent = static_cast<int>(r - r % span);
      break;
    }
    for (int64_t i = 1; i < radix && r + i * d < n; ++i)
      t.children.push_back(static_cast<int>(r + i * d));
  }
  return t;
}

}  // namespace

void build_tree_allreduce_radix(const CollectiveArgs &args, int radix, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "tree", schedule)) return;
  const int n = args.nranks, r = args.rank;
  const size_t count = args.count;
  const TreePlace place = tree_place(n, r, std::max(2, radix));
  // One landing area: the children's results are folded in one after another (they all
  // write the output), each received and reduced in one step so that a transport that
  // reduces on receive (shared memory) reads it once, in cache.
  schedule->scratch_count = place.children.empty() ? 0 : count;

  // Reduce: the first child's result is combined with the input, which is why out of place
  // needs no copy.
  Range partial = input_at(0);
  std::vector<uint32_t> ready;  // the step that completed `partial`
  for (size_t j = 0; j < place.children.size(); ++j) {
    const bool complete = place.parent < 0 && j + 1 == place.children.size();
    ready = {add_step(schedule, recv_reduce_step(place.children[j], kUpTag, scratch_at(0), partial,
                                                 output_at(0), count, complete, ready))};
    partial = output_at(0);
  }
  if (place.parent >= 0) {
    const uint32_t up = add_step(schedule, send_step(place.parent, kUpTag, partial, count, ready));
    // In place the result lands where the partial was read from.
    ready = {add_step(schedule, recv_step(place.parent, kDownTag, output_at(0), count, {up}))};
  }
  // Broadcast: the largest subtrees (highest level) first, so the deepest paths start first.
  for (auto child = place.children.rbegin(); child != place.children.rend(); ++child)
    add_step(schedule, send_step(*child, kDownTag, output_at(0), count, ready));
}

void build_tree_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  const double bytes = static_cast<double>(args.count) * static_cast<double>(args.elem_size);
  build_tree_allreduce_radix(args, tree_radix(args.nranks, bytes, kCostConstants), schedule);
}

void build_tree_reduce(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, root = args.root;
  const bool at_root = args.rank == root;
  const size_t count = args.count;
  schedule->algorithm = "tree";
  schedule->input_count = count;
  schedule->output_count = at_root ? count : 0;
  schedule->in_place = at_root && args.in_place;
  if (n == 1) {
    add_single_rank_copy(args, count, 0, schedule);
    return;
  }
  // The tree of the allreduce, rooted at `root` by numbering ranks relative to it.
  const double bytes = static_cast<double>(count) * static_cast<double>(args.elem_size);
  const TreePlace place =
      tree_place(n, ring_index(args.rank - root, n), tree_radix(n, bytes, kCostConstants));
  auto rank_of = [&](int relative) { return ring_index(relative + root, n); };
  // Children's partials land in scratch and are folded into the accumulator: the root's
  // output, or scratch on the others (their output is not theirs to use).
  const Range acc = at_root ? output_at(0) : scratch_at(count);
  if (!place.children.empty()) schedule->scratch_count = at_root ? count : 2 * count;
  Range partial = input_at(0);
  std::vector<uint32_t> ready;
  for (size_t j = 0; j < place.children.size(); ++j) {
    const bool complete = at_root && j + 1 == place.children.size();
    ready = {add_step(schedule, recv_reduce_step(rank_of(place.children[j]), kUpTag, scratch_at(0),
                                                 partial, acc, count, complete, ready))};
    partial = acc;
  }
  if (!at_root) add_step(schedule, send_step(rank_of(place.parent), kUpTag, partial, count, ready));
}

double tree_reduce_cost(const CollectiveArgs &args) {
  const CostConstants &c = args.hosts > 1 ? args.net : args.local;
  const int n = args.nranks;
  const double bytes = count_bytes(args);
  const int radix = tree_radix(n, bytes, kCostConstants);
  double t = 0;
  for (int64_t d = 1; d < n; d *= radix) {
    const double children = static_cast<double>(std::min<int64_t>(radix - 1, (n - 1) / d));
    t += c.alpha + (children - 1) * c.overhead + children * bytes * (c.beta + c.gamma);
  }
  return t;
}

double tree_allreduce_cost_radix(int nranks, double bytes, int radix, const RoundCosts &costs) {
  double t = 0;
  for (int64_t d = 1; d < nranks; d *= radix) {
    const int64_t farthest = std::min<int64_t>(radix - 1, (nranks - 1) / d);
    const double children = static_cast<double>(farthest);
    const CostConstants &c = costs.round(farthest * d);
    t += 2 * c.alpha + 2 * (children - 1) * c.overhead + children * bytes * (2 * c.beta + c.gamma);
  }
  return t;
}

int tree_radix(int nranks, double bytes, const CostConstants &c) {
  int best = 2;
  double best_cost = tree_allreduce_cost_radix(nranks, bytes, 2, RoundCosts{c});
  for (int k = 3; k <= nranks; ++k) {
    const double cost = tree_allreduce_cost_radix(nranks, bytes, k, RoundCosts{c});
    if (cost < best_cost) {
      best = k;
      best_cost = cost;
    }
  }
  return best;
}

double tree_allreduce_cost(int nranks, double bytes, const RoundCosts &costs) {
  return tree_allreduce_cost_radix(nranks, bytes, tree_radix(nranks, bytes, kCostConstants), costs);
}

}  // namespace ddl

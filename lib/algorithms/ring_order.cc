#include "lib/algorithms/ring_order.h"

#include <algorithm>
#include <numeric>

namespace ddl {

RingOrder::RingOrder(const CollectiveArgs &args, int first)
    : n_(args.nranks), rank_(args.nranks), position_(args.nranks) {
  const std::vector<std::vector<int>> &tiers = args.tiers;
  if (tiers.empty() || args.hosts <= 1) {
    // One host: rank order from `first`, as ever (the executor then finds the previous rank
    // sending first, and the call's signature rides on that message).
    for (int p = 0; p < n_; ++p) rank_[p] = ring_index(std::max(first, 0) + p, n_);
    for (int p = 0; p < n_; ++p) position_[rank_[p]] = p;
    return;
  }
  std::iota(rank_.begin(), rank_.end(), 0);
  // Slowest tier first: a rank's key is its group at each tier, slowest to fastest, then the
  // rank itself; `first` and its groups sort before everything else at each level.
  auto key_less = [&](int a, int b) {
    for (size_t t = tiers.size(); t-- > 0;) {
      const int ga = tiers[t][a], gb = tiers[t][b];
      if (ga == gb) continue;
      if (first >= 0 && (ga == tiers[t][first]) != (gb == tiers[t][first]))
        return ga == tiers[t][first];
      return ga < gb;
    }
    if (first >= 0 && (a == first) != (b == first)) return a == first;
    return a < b;
  };
  std::sort(rank_.begin(), rank_.end(), key_less);
  for (int p = 0; p < n_; ++p) position_[rank_[p]] = p;
}

}  // namespace ddl

// The ranks of a call grouped by host (CollectiveArgs::tiers[0]; one host without tiers):
// what hier's two-level schedules (hier_two_level.h, hier_alltoall.h) are built on.
#pragma once

#include <map>
#include <vector>

#include "lib/algorithms/schedule.h"

namespace ddl {

// The ranks by host (tiers[0]; one host without tiers), each host's ranks ascending.
struct Hosts {
  std::vector<std::vector<int>> ranks;  // per host
  std::vector<int> host_of, local_of;   // per rank

  explicit Hosts(const CollectiveArgs &args)
      : host_of(static_cast<size_t>(args.nranks)), local_of(static_cast<size_t>(args.nranks)) {
    std::map<int, int> index;  // group id -> host, in order of first rank
    for (int r = 0; r < args.nranks; ++r) {
      const int group = args.tiers.empty() ? 0 : args.tiers[0][static_cast<size_t>(r)];
      const int h = index.emplace(group, static_cast<int>(ranks.size())).first->second;
      if (h == static_cast<int>(ranks.size())) ranks.emplace_back();
      host_of[r] = h;
      local_of[r] = static_cast<int>(ranks[h].size());
      ranks[h].push_back(r);
    }
  }

  int count() const { return static_cast<int>(ranks.size()); }
  // Two or more hosts, every one with as many ranks as the first.
  bool even() const {
    if (count() < 2) return false;
    for (const auto &on : ranks)
      if (on.size() != ranks[0].size()) return false;
    return true;
  }
  // The rank of host g that takes rank r's block there.
  int agent(int g, int r) const {
    const std::vector<int> &on = ranks[static_cast<size_t>(g)];
    return on[static_cast<size_t>(local_of[r]) % on.size()];
  }
};

}  // namespace ddl

// parse_placement (lib/topology/tiers.h): every rank parses every other rank's placement, bytes
// straight off the bootstrap. The input holds up to 8 placements separated by 0xff; each is
// parsed; accepted ones must serialize and parse back to themselves; the accepted set is fed
// to build_tiers, whose groups must partition the ranks at every level and nest.
#include <algorithm>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lib/topology/tiers.h"

using ddl::topo::Placement;
using ddl::topo::Tier;
using ddl::topo::Tiers;

namespace {

constexpr int kMaxPlacements = 8;

void check_tiers(const Tiers &tiers, const std::vector<Placement> &by_rank) {
  const int n = static_cast<int>(by_rank.size());
  FUZZ_CHECK(tiers.nranks == n, "nranks %d for %d placements", tiers.nranks, n);
  for (int level = 0; level < ddl::topo::kTierLevels; ++level) {
    const Tier &t = tiers.levels[level];
    FUZZ_CHECK(t.group_of.size() == static_cast<size_t>(n) &&
                   t.index_in_group.size() == static_cast<size_t>(n),
               "level %d: per-rank vectors of the wrong size", level);
    FUZZ_CHECK(t.parent_group.size() == t.groups.size(), "level %d: parents", level);
    std::vector<int> seen(static_cast<size_t>(n), 0);
    int first_prev = -1;
    for (size_t g = 0; g < t.groups.size(); ++g) {
      const std::vector<int> &members = t.groups[g];
      FUZZ_CHECK(!members.empty(), "level %d: empty group %zu", level, g);
      FUZZ_CHECK(std::is_sorted(members.begin(), members.end()), "level %d: unsorted", level);
      FUZZ_CHECK(members.front() > first_prev, "level %d: groups not ordered by first rank", level);
      first_prev = members.front();
      for (size_t i = 0; i < members.size(); ++i) {
        int r = members[i];
        FUZZ_CHECK(r >= 0 && r < n, "level %d: rank %d", level, r);
        seen[r]++;
        FUZZ_CHECK(
            t.group_of[r] == static_cast<int>(g) && t.index_in_group[r] == static_cast<int>(i),
            "level %d: rank %d's indices disagree with the groups", level, r);
      }
      FUZZ_CHECK(t.leader(static_cast<int>(g)) == members.front() && t.is_leader(members.front()),
                 "level %d: leader", level);
      if (level == 0) {
        FUZZ_CHECK(t.parent_group[g] == -1, "host groups have no parent");
      } else {
        const Tier &up = tiers.levels[level - 1];
        int parent = t.parent_group[g];
        FUZZ_CHECK(parent >= 0 && parent < static_cast<int>(up.groups.size()), "parent %d", parent);
        for (int r : members)
          FUZZ_CHECK(up.group_of[r] == parent, "level %d group %zu does not nest", level, g);
      }
      // Ranks of one group agree on every key down to this level; ranks of two groups of the
      // same parent differ at this level.
      const Placement &a = by_rank[members.front()];
      for (int r : members) {
        const Placement &b = by_rank[r];
        FUZZ_CHECK(a.host_id == b.host_id, "host group mixes hosts");
        if (level >= 1) FUZZ_CHECK(a.socket == b.socket, "socket group mixes sockets");
        if (level >= 2) FUZZ_CHECK(a.numa == b.numa, "numa group mixes nodes");
        if (level >= 3) FUZZ_CHECK(a.pci_switch == b.pci_switch, "switch group mixes switches");
      }
    }
    for (int r = 0; r < n; ++r)
      FUZZ_CHECK(seen[r] == 1, "level %d: rank %d is in %d groups", level, r, seen[r]);
  }
  (void)ddl::topo::describe_tiers(tiers);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ddl_fuzz::Reader in(data, size);
  std::vector<Placement> accepted;
  // 8 ranks give every grouping build_tiers makes (hosts, sockets, NUMA nodes, switches, each
  // with several members); 16 doubled the cost of an input (a parse_placement is ~10 us under
  // ASan + UBSan: an istringstream each) for no coverage: 7k exec/s on a busy machine.
  for (int i = 0; i < kMaxPlacements && !in.empty(); ++i) {
    std::string raw = in.until(0xff);
    Placement p;
    p.hostname = "untouched";
    ddl::Status st = ddl::topo::parse_placement(raw, &p);
    if (!st.ok()) {
      FUZZ_CHECK(st.code() == DDL_ERR_REMOTE, "code %d: %s", st.code(), st.message().c_str());
      FUZZ_CHECK(p.hostname == "untouched", "output written on failure");
      continue;
    }
    FUZZ_CHECK(!p.host_id.empty(), "accepted without a host id");
    FUZZ_CHECK(p.socket >= -1 && p.numa >= -1, "socket %d numa %d", p.socket, p.numa);
    std::string again_text = ddl::topo::serialize(p);
    if (again_text.size() <= ddl::topo::kMaxPlacementBytes) {
      // Parsed back as it travels, padded with NULs to a fixed block. (Parsing the unpadded
      // text too doubled the target's cost for nothing: fuzzed inputs without NULs take that
      // path anyway, and serialize(q) == again_text below pins the round trip.)
      Placement q;
      std::string padded = again_text;
      padded.resize(ddl::topo::kMaxPlacementBytes, '\0');
      st = ddl::topo::parse_placement(padded, &q);
      FUZZ_CHECK(st.ok(), "'%s' does not parse back: %s", again_text.c_str(), st.message().c_str());
      FUZZ_CHECK(q == p && ddl::topo::serialize(q) == again_text,
                 "'%s' parses back to another placement", again_text.c_str());
    }
    accepted.push_back(p);
  }
  check_tiers(ddl::topo::build_tiers(accepted), accepted);
  return 0;
}

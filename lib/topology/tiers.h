// Tiers: which ranks share a host, a socket, a NUMA node, a PCIe switch. The input of the
// multi-tier (PowerAI DDL style) algorithms.
//
// At communicator init each rank describes where it runs (local_placement), the ranks
// allgather those descriptions (serialize / parse_placement), and every rank builds the same
// Tiers from the same list (build_tiers). See lib/topology/README.md.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

struct Placement {
  std::string hostname;  // for people and logs
  // What makes two ranks "the same host": the kernel's boot id, shared by every container on
  // one kernel and different on every other host (unlike /etc/machine-id, which cloned images
  // share). DDL_HOST_ID overrides it, e.g. for emulated hosts in network namespaces.
  std::string host_id;
  int socket = -1;         // OS index of the package (socket); -1 when unknown
  int numa = -1;           // OS index of the NUMA node; -1 when unknown
  std::string pci_switch;  // bus id of the outermost PCIe switch above its GPU; "" when none
  std::string gpu;         // bus id of its GPU; "" for a CPU-only rank
  bool operator==(const Placement &o) const {
    return hostname == o.hostname && host_id == o.host_id && socket == o.socket && numa == o.numa &&
           pci_switch == o.pci_switch && gpu == o.gpu;
  }
};

// Upper bound of serialize()'s length: allgather fixed blocks of this size, padded with '\0'.
constexpr size_t kMaxPlacementBytes = 512;

// This process: its host identity, its GPU (index into topology.gpus, or -1) and the NUMA node
// of the CPUs it may run on. A process bound within one NUMA node is placed there; otherwise
// it goes with its GPU's NUMA node; otherwise with the CPU it is running on now.
Placement local_placement(const Topology &topology, int gpu);

// The pure part of local_placement, for tests: the given host and CPU set.
Placement placement_on_cpus(const Topology &topology, int gpu, const std::string &hostname,
                            const std::string &host_id, const std::vector<int> &allowed_pus,
                            int current_pu);

// One line: "ddl-placement/1 host=n1 id=2dc0... socket=0 numa=1 switch=0000:02:00.0 gpu=-".
std::string serialize(const Placement &placement);
// The inverse; bytes from the network, so everything is checked (length, keys, characters,
// numbers). Trailing '\0' padding is accepted.
Status parse_placement(const std::string &text, Placement *placement);

enum class TierLevel : int { kHost = 0, kSocket = 1, kNuma = 2, kPciSwitch = 3 };
constexpr int kTierLevels = 4;
const char *tier_level_name(TierLevel level);  // "host", "socket", "numa", "pci_switch"

// One level of grouping. Groups nest: each group lies within one group of the level above
// (a NUMA group is "the ranks of this host, this socket and this NUMA node").
struct Tier {
  std::vector<std::vector<int>> groups;  // ranks of each group, ascending; ordered by first rank
  std::vector<int> group_of;             // rank -> index of its group
  std::vector<int> index_in_group;       // rank -> its position in its group (0 = leader)
  std::vector<int> parent_group;         // group -> its group one level up; -1 at kHost
  int leader(int group) const { return groups[group].front(); }
  bool is_leader(int rank) const { return index_in_group[rank] == 0; }
};

struct Tiers {
  int nranks = 0;
  std::array<Tier, kTierLevels> levels;
  const Tier &at(TierLevel level) const { return levels[static_cast<int>(level)]; }
};

// Groups ranks by host, then socket, then NUMA node, then PCIe switch. Ranks whose value at a
// level is unknown (-1, "") share one group at that level within their parent group.
Tiers build_tiers(const std::vector<Placement> &by_rank);

// "8 ranks: 2 hosts, 4 sockets, 4 NUMA nodes, 8 PCIe switch groups" for logs.
std::string describe_tiers(const Tiers &tiers);

}  // namespace topo
}  // namespace ddl

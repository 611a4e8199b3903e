#include "lib/topology/paths.h"

#include <algorithm>
#include <cctype>

namespace ddl {
namespace topo {
namespace {

// Rough figures, only used to rank choices and to print. NCCL models the CPU interconnect at
// 6-40 GB/s depending on the generation; peer traffic across sockets is the slow case, so we
// take the low end there, and more within one socket split into NUMA domains (SNC, NPS),
// where traffic stays on the die.
constexpr double kCrossSocketGBs = 10.0;
constexpr double kCrossNumaGBs = 20.0;
constexpr double kUnknownPciGBs = 12.0;  // PCIe Gen3 x16, when hwloc knows no link speed

const char *const kPathNames[kPathTypeCount] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"};

// Minimum of two link speeds where 0 means unknown.
double narrower(double a, double b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

double or_default(double gbs) {
  return gbs > 0 ? gbs : kUnknownPciGBs;
}

// Narrowest upstream link of the first `count` switches of a device's chain.
double switch_links(const Topology &topology, const PciLocation &loc, size_t count) {
  double gbs = 0;
  for (size_t i = 0; i < count && i < loc.switches.size(); ++i) {
    gbs = narrower(gbs, topology.pci_switches[loc.switches[i]].link_gbs);
  }
  return gbs;
}

}  // namespace

const char *path_type_name(PathType type) {
  int i = static_cast<int>(type);
  return (i >= 0 && i < kPathTypeCount) ? kPathNames[i] : "?";
}

bool parse_path_type(const std::string &text, PathType *type) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int i = 0; i < kPathTypeCount; ++i) {
    if (upper == kPathNames[i]) {
      *type = static_cast<PathType>(i);
      return true;
    }
  }
  return false;
}

Path pci_path(const Topology &topology, const PciLocation &a, const PciLocation &b) {
  double gbs = narrower(a.link_gbs, b.link_gbs);
  if (!a.bus_id.empty() && a.bus_id == b.bus_id)
    return Path{PathType::kLoc, or_default(gbs), false};
  // The innermost switch above both: the traffic turns there.
  for (size_t i = 0; i < a.switches.size(); ++i) {
    auto it = std::find(b.switches.begin(), b.switches.end(), a.switches[i]);
    if (it == b.switches.end()) continue;
    size_t j = static_cast<size_t>(it - b.switches.begin());
    gbs = narrower(gbs, narrower(switch_links(topology, a, i), switch_links(topology, b, j)));
    return Path{i + j == 0 ? PathType::kPix : PathType::kPxb, or_default(gbs), false};
  }
  gbs = narrower(gbs, narrower(switch_links(topology, a, a.switches.size()),
                               switch_links(topology, b, b.switches.size())));
  bool same_bridge = a.host_bridge >= 0 && a.host_bridge == b.host_bridge;
  bool same_numa = a.numa >= 0 && a.numa == b.numa;
  if (same_bridge || same_numa) return Path{PathType::kPhb, or_default(gbs), false};
  bool same_socket = a.socket >= 0 && a.socket == b.socket;
  gbs = narrower(gbs, same_socket ? kCrossNumaGBs : kCrossSocketGBs);
  return Path{PathType::kSys, gbs, !same_socket};
}

double nvswitch_gbs(const Topology &topology, int gpu) {
  double gbs = 0;
  for (const NvLink &link : topology.nvlinks) {
    bool a_is_gpu = link.a.kind == NvEndKind::kGpu && link.a.index == gpu;
    bool b_is_gpu = link.b.kind == NvEndKind::kGpu && link.b.index == gpu;
    if ((a_is_gpu && link.b.kind == NvEndKind::kNvSwitch) ||
        (b_is_gpu && link.a.kind == NvEndKind::kNvSwitch)) {
      gbs += link.gbs;
    }
  }
  return gbs;
}

double nvlink_gbs(const Topology &topology, int gpu_a, int gpu_b) {
  if (gpu_a == gpu_b) return 0;
  double direct = 0;
  for (const NvLink &link : topology.nvlinks) {
    if (link.a.kind != NvEndKind::kGpu || link.b.kind != NvEndKind::kGpu) continue;
    if ((link.a.index == gpu_a && link.b.index == gpu_b) ||
        (link.a.index == gpu_b && link.b.index == gpu_a)) {
      direct += link.gbs;
    }
  }
  return direct + std::min(nvswitch_gbs(topology, gpu_a), nvswitch_gbs(topology, gpu_b));
}

Path gpu_gpu_path(const Topology &topology, int gpu_a, int gpu_b) {
  if (gpu_a == gpu_b) return pci_path(topology, topology.gpus[gpu_a].pci, topology.gpus[gpu_b].pci);
  double nvlink = nvlink_gbs(topology, gpu_a, gpu_b);
  if (nvlink > 0) return Path{PathType::kNvl, nvlink, false};
  return pci_path(topology, topology.gpus[gpu_a].pci, topology.gpus[gpu_b].pci);
}

Path gpu_nic_path(const Topology &topology, int gpu, int nic) {
  const Nic &n = topology.nics[nic];
  Path path = pci_path(topology, topology.gpus[gpu].pci, n.pci);
  path.gbs = narrower(path.gbs, n.port_gbs());
  return path;
}

}  // namespace topo
}  // namespace ddl

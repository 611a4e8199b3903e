#include "lib/topology/report.h"

#include <algorithm>

#include "lib/topology/paths.h"

namespace ddl {
namespace topo {
namespace {

std::string gbs_text(double gbs) {
  return gbs >= 10 || gbs == static_cast<int>(gbs) ? strprintf("%.0f", gbs)
                                                   : strprintf("%.1f", gbs);
}

int innermost_switch(const PciLocation &loc) {
  return loc.switches.empty() ? -1 : loc.switches[0];
}

// Devices right under `sw` (or, with sw = -1, without a switch on NUMA node `numa`), then the
// switches below it, recursively.
void print_pci_subtree(const Topology &topo, int numa, int sw, int indent, std::string *out) {
  std::string pad(static_cast<size_t>(indent), ' ');
  auto here = [&](const PciLocation &loc) {
    return innermost_switch(loc) == sw && (sw >= 0 || loc.numa == numa);
  };
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    const Gpu &gpu = topo.gpus[g];
    if (!here(gpu.pci)) continue;
    *out +=
        strprintf("%sgpu%zu %s %s\n", pad.c_str(), g, gpu.pci.bus_id.c_str(), gpu.model.c_str());
  }
  for (const Nic &nic : topo.nics) {
    if (!here(nic.pci)) continue;
    *out += strprintf("%snic %s %s %s\n", pad.c_str(), nic.name.c_str(),
                      nic.pci.bus_id.empty() ? "(no PCI location)" : nic.pci.bus_id.c_str(),
                      nic_summary(nic).c_str());
  }
  for (size_t s = 0; s < topo.pci_switches.size(); ++s) {
    const PciSwitch &child = topo.pci_switches[s];
    if (child.parent != sw || (sw < 0 && child.numa != numa)) continue;
    std::string link = child.link_gbs > 0 ? ", " + gbs_text(child.link_gbs) + " GB/s up" : "";
    *out += strprintf("%sswitch %s [%s%s]\n", pad.c_str(), child.bus_id.c_str(),
                      child.pci_id.c_str(), link.c_str());
    print_pci_subtree(topo, numa, static_cast<int>(s), indent + 2, out);
  }
}

std::string end_name(const Topology &topo, const NvEnd &end) {
  switch (end.kind) {
    case NvEndKind::kGpu:
      return strprintf("gpu%d", end.index);
    case NvEndKind::kNvSwitch:
      return "nvswitch " + topo.nvswitches[end.index].bus_id;
    case NvEndKind::kCpu:
      return strprintf("cpu%d", topo.sockets[end.index].os_index);
  }
  return "?";
}

}  // namespace

std::string nic_summary(const Nic &nic) {
  std::string text;
  if (!nic.rdma) {
    text = "Ethernet";
  } else {
    std::string layer = nic.ports.empty() ? "" : nic.ports[0].link_layer;
    text = layer.empty() ? "RDMA" : layer;
    for (const NicPort &port : nic.ports) {
      text += strprintf(", port %d %s", port.number, port_state_name(port.state));
      if (port.speed_gbps > 0) text += " " + gbs_text(port.speed_gbps) + " Gb/s";
    }
  }
  if (nic.pci.link_gbs > 0) text += ", PCIe " + gbs_text(nic.pci.link_gbs) + " GB/s";
  return text;
}

std::string cpu_ranges(const std::vector<int> &pus) {
  std::string out;
  for (size_t i = 0; i < pus.size();) {
    size_t j = i;
    while (j + 1 < pus.size() && pus[j + 1] == pus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? strprintf("%d", pus[i]) : strprintf("%d-%d", pus[i], pus[j]);
    i = j + 1;
  }
  return out;
}

std::string topology_headline(const Topology &topo) {
  size_t rdma = static_cast<size_t>(
      std::count_if(topo.nics.begin(), topo.nics.end(), [](const Nic &n) { return n.rdma; }));
  std::string text = strprintf(
      "host %s (%s): %zu socket%s, %zu NUMA node%s, %d cores, %zu GPU%s, %zu RDMA NIC%s, "
      "%zu Ethernet NIC%s",
      topo.hostname.c_str(), topo.source.c_str(), topo.sockets.size(),
      topo.sockets.size() == 1 ? "" : "s", topo.numa_nodes.size(),
      topo.numa_nodes.size() == 1 ? "" : "s", topo.cores, topo.gpus.size(),
      topo.gpus.size() == 1 ? "" : "s", rdma, rdma == 1 ? "" : "s", topo.nics.size() - rdma,
      topo.nics.size() - rdma == 1 ? "" : "s");
  if (!topo.nvswitches.empty()) text += strprintf(", %zu NVSwitches", topo.nvswitches.size());
  return text;
}

std::string topology_tree(const Topology &topo) {
  std::string out = topology_headline(topo) + "\n";
  for (const Socket &socket : topo.sockets) {
    out += strprintf("socket %d%s%s\n", socket.os_index, socket.cpu_model.empty() ? "" : ": ",
                     socket.cpu_model.c_str());
    for (int n : socket.numa_nodes) {
      const NumaNode &numa = topo.numa_nodes[n];
      out += strprintf("  numa %d: %d cores, cpus %s\n", numa.os_index, numa.cores,
                       cpu_ranges(numa.pus).c_str());
      print_pci_subtree(topo, n, -1, 4, &out);
    }
  }
  std::string unplaced;
  print_pci_subtree(topo, -1, -1, 2, &unplaced);
  if (!unplaced.empty()) out += "no NUMA locality known:\n" + unplaced;

  // NVLinks: direct ones per GPU, the NVSwitch fabric once when every GPU has the same share.
  std::vector<double> fabric(topo.gpus.size());
  std::string fabric_gpus;
  bool uniform = true;
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    fabric[g] = nvswitch_gbs(topo, static_cast<int>(g));
    if (fabric[g] <= 0) continue;
    uniform = uniform && (fabric_gpus.empty() || fabric[g] == fabric[0]);
    fabric_gpus += strprintf("%sgpu%zu", fabric_gpus.empty() ? "" : " ", g);
  }
  if (!fabric_gpus.empty() && uniform) {
    out += strprintf("nvswitch: %zu NVSwitches, %s GB/s to each of %s\n", topo.nvswitches.size(),
                     gbs_text(fabric[0]).c_str(),
                     std::count(fabric.begin(), fabric.end(), 0.0) == 0
                         ? strprintf("the %zu GPUs", topo.gpus.size()).c_str()
                         : fabric_gpus.c_str());
  }
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    std::string peers;
    for (const NvLink &link : topo.nvlinks) {
      const NvEnd *other = nullptr;
      if (link.a.kind == NvEndKind::kGpu && link.a.index == static_cast<int>(g)) other = &link.b;
      if (link.b.kind == NvEndKind::kGpu && link.b.index == static_cast<int>(g)) other = &link.a;
      if (other == nullptr || other->kind == NvEndKind::kNvSwitch) continue;
      peers += strprintf("%s%s %s", peers.empty() ? "" : ", ", end_name(topo, *other).c_str(),
                         gbs_text(link.gbs).c_str());
    }
    if (fabric[g] > 0 && !uniform) {
      peers += strprintf("%sNVSwitches %s", peers.empty() ? "" : ", ", gbs_text(fabric[g]).c_str());
    }
    if (!peers.empty()) out += strprintf("nvlink gpu%zu: %s GB/s\n", g, peers.c_str());
  }
  return out;
}

std::string gpu_nic_lines(const Topology &topo, const std::vector<GpuNic> &pairs) {
  if (topo.gpus.empty()) return "no GPUs\n";
  std::string out;
  for (const GpuNic &pair : pairs) {
    const std::string &bus = topo.gpus[pair.gpu].pci.bus_id;
    if (pair.nic < 0) {
      out += strprintf("gpu %s nic none path - gdr no\n", bus.c_str());
    } else {
      out +=
          strprintf("gpu %s nic %s path %s gdr %s\n", bus.c_str(), topo.nics[pair.nic].name.c_str(),
                    path_type_name(pair.path.type), pair.gdr ? "yes" : "no");
    }
  }
  return out;
}

std::string path_matrix(const Topology &topo, const std::vector<int> &nics) {
  std::vector<std::string> names;
  std::vector<const PciLocation *> locs;
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    names.push_back(strprintf("gpu%zu", g));
    locs.push_back(&topo.gpus[g].pci);
  }
  for (int n : nics) {
    names.push_back(topo.nics[n].name);
    locs.push_back(&topo.nics[n].pci);
  }
  size_t width = 5;
  for (const std::string &name : names) width = std::max(width, name.size() + 1);
  std::string out(width, ' ');
  for (const std::string &name : names)
    out += strprintf("%-*s", static_cast<int>(width), name.c_str());
  while (out.back() == ' ') out.pop_back();
  out += "\n";
  size_t ngpus = topo.gpus.size();
  for (size_t i = 0; i < names.size(); ++i) {
    out += strprintf("%-*s", static_cast<int>(width), names[i].c_str());
    for (size_t j = 0; j < names.size(); ++j) {
      const char *cell = "X";
      if (i != j) {
        Path p = (i < ngpus && j < ngpus)
                     ? gpu_gpu_path(topo, static_cast<int>(i), static_cast<int>(j))
                     : pci_path(topo, *locs[i], *locs[j]);
        cell = path_type_name(p.type);
      }
      out += strprintf("%-*s", static_cast<int>(width), cell);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  return out;
}

}  // namespace topo
}  // namespace ddl

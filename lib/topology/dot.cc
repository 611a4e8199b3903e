#include "lib/topology/dot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "lib/topology/paths.h"

extern char **environ;

namespace ddl {
namespace topo {
namespace {

const char kFont[] = "Helvetica,Arial,sans-serif";
const char kNvidiaGreen[] = "#76b900";
const char kNicBlue[] = "#1f6fb2";

std::string html(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string short_model(std::string model) {
  for (const char *prefix : {"NVIDIA ", "Tesla "}) {
    if (model.compare(0, std::string(prefix).size(), prefix) == 0) {
      model = model.substr(std::string(prefix).size());
    }
  }
  return model;
}

std::string gbs_text(double gbs) {
  return strprintf("%.0f GB/s", gbs);
}

// Builds the DOT text; one method per kind of thing drawn.
class DotWriter {
 public:
  DotWriter(const Topology &topo, const std::vector<GpuNic> &pairs)
      : topo_(topo), pairs_(pairs), nics_(candidate_nics(topo, /*include_down_ports=*/true)) {
    drawn_nic_.assign(topo.nics.size(), false);
    for (int n : nics_) drawn_nic_[n] = true;
    needed_switch_.assign(topo.pci_switches.size(), false);
    auto need = [&](const PciLocation &loc) {
      for (int s : loc.switches) needed_switch_[s] = true;
    };
    for (const Gpu &gpu : topo.gpus) need(gpu.pci);
    for (int n : nics_) need(topo.nics[n].pci);
  }

  std::string write() {
    header();
    for (size_t s = 0; s < topo_.sockets.size(); ++s) socket_cluster(static_cast<int>(s));
    devices_in(-1, "  ");  // devices of unknown NUMA node, outside every box
    tree_edges();
    socket_links();
    nvlinks();
    nic_pairs();
    out_ += "}\n";
    return out_;
  }

 private:
  void header() {
    std::string title = strprintf(
        "<b>%s</b> &#183; %zu GPU%s, %zu NIC%s", html(topo_.hostname).c_str(), topo_.gpus.size(),
        topo_.gpus.size() == 1 ? "" : "s", nics_.size(), nics_.size() == 1 ? "" : "s");
    std::string legend = "thick green: NVLink &#183; dashed: each GPU's NIC (GDR: GPUDirect RDMA)";
    double uniform = uniform_gpu_nvlink_gbs();
    if (uniform > 0) legend += " &#183; NVLink " + gbs_text(uniform) + " per GPU pair";
    out_ += "graph topology {\n";
    out_ += strprintf(
        "  graph [fontname=\"%s\", fontsize=14, labelloc=t, newrank=true, nodesep=0.3, "
        "ranksep=0.5, pad=0.3, bgcolor=white,\n         label=<%s<br/><font point-size=\"10\" "
        "color=\"#666666\">%s<br/>%s</font>>];\n",
        kFont, title.c_str(), html(topo_.source).c_str(), legend.c_str());
    out_ += strprintf(
        "  node [fontname=\"%s\", fontsize=10, shape=box, style=\"rounded,filled\", "
        "penwidth=1.2];\n  edge [fontname=\"%s\", color=\"#9e9e9e\", penwidth=1.4];\n",
        kFont, kFont);
  }

  // The bandwidth every direct GPU-GPU NVLink has, or 0 when they differ or there are none.
  double uniform_gpu_nvlink_gbs() const {
    double value = 0;
    for (const NvLink &link : topo_.nvlinks) {
      if (link.a.kind != NvEndKind::kGpu || link.b.kind != NvEndKind::kGpu) continue;
      if (value != 0 && value != link.gbs) return 0;
      value = link.gbs;
    }
    return value;
  }

  void socket_cluster(int s) {
    const Socket &socket = topo_.sockets[s];
    out_ += strprintf(
        "  subgraph cluster_socket%d {\n    label=<<b>Socket %d</b><br/><font point-size=\"9\">%s"
        "</font>>; style=\"rounded,filled\"; fillcolor=\"#f4f4f4\"; color=\"#b0b0b0\";\n",
        s, socket.os_index, html(socket.cpu_model).c_str());
    bool split = socket.numa_nodes.size() > 1;
    for (int n : socket.numa_nodes) {
      const NumaNode &numa = topo_.numa_nodes[n];
      std::string indent = split ? "      " : "    ";
      if (split) {
        out_ += strprintf(
            "    subgraph cluster_numa%d {\n      label=\"NUMA %d\"; style=\"rounded,dashed\"; "
            "color=\"#b0b0b0\"; fillcolor=\"#fbfbfb\";\n",
            n, numa.os_index);
      }
      out_ += strprintf(
          "%snuma%d [label=<<b>CPU</b> &#183; NUMA %d<br/><font point-size=\"9\">%d cores</font>>, "
          "fillcolor=\"#e2e2e2\", color=\"#8a8a8a\"];\n",
          indent.c_str(), n, numa.os_index, numa.cores);
      devices_in(n, indent);
      if (split) out_ += "    }\n";
    }
    out_ += "  }\n";
  }

  // Switches, GPUs and NICs whose NUMA node is n (-1: unknown).
  void devices_in(int n, const std::string &indent) {
    for (size_t s = 0; s < topo_.pci_switches.size(); ++s) {
      const PciSwitch &sw = topo_.pci_switches[s];
      if (!needed_switch_[s] || sw.numa != n) continue;
      out_ += strprintf(
          "%ssw%zu [label=<PCIe switch<br/><font point-size=\"8\">%s</font>>, fontsize=9, "
          "style=filled, fillcolor=\"#fff4c8\", color=\"#c9a400\"];\n",
          indent.c_str(), s, html(sw.bus_id).c_str());
    }
    for (size_t g = 0; g < topo_.gpus.size(); ++g) {
      const Gpu &gpu = topo_.gpus[g];
      if (gpu.pci.numa != n) continue;
      out_ += strprintf(
          "%sgpu%zu [label=<<b>GPU%zu</b><br/><font point-size=\"9\">%s<br/>%s</font>>, "
          "fillcolor=\"#dcefc9\", color=\"%s\", penwidth=2];\n",
          indent.c_str(), g, g, html(short_model(gpu.model)).c_str(), html(gpu.pci.bus_id).c_str(),
          kNvidiaGreen);
    }
    for (int i : nics_) {
      const Nic &nic = topo_.nics[i];
      if (nic.pci.numa != n) continue;
      bool up = nic.usable();
      out_ += strprintf(
          "%snic%d [label=<<b>%s</b><br/><font point-size=\"8\">%s<br/>%s</font>>, "
          "fillcolor=\"%s\", color=\"%s\", fontcolor=\"%s\"];\n",
          indent.c_str(), i, html(nic.name).c_str(), nic_label(nic).c_str(),
          html(nic.pci.bus_id).c_str(), up ? "#d7e7f8" : "#eeeeee", up ? kNicBlue : "#9e9e9e",
          up ? "black" : "#777777");
    }
  }

  // "InfiniBand 200 Gb/s<br/>port 1 active" (HTML).
  static std::string nic_label(const Nic &nic) {
    if (!nic.rdma) return "Ethernet";
    std::string layer =
        nic.ports.empty() || nic.ports[0].link_layer.empty() ? "RDMA" : nic.ports[0].link_layer;
    double gbps = nic.port_gbs() * 8;
    if (gbps > 0) layer += strprintf(" %.0f Gb/s", gbps);
    std::string ports;
    for (const NicPort &port : nic.ports) {
      ports += strprintf("%sport %d %s", ports.empty() ? "" : ", ", port.number,
                         port_state_name(port.state));
    }
    return html(layer) + (ports.empty() ? "" : "<br/>" + html(ports));
  }

  // The node a device or switch hangs from.
  std::string parent_node(int innermost_switch, int numa) {
    if (innermost_switch >= 0) return strprintf("sw%d", innermost_switch);
    if (numa >= 0) return strprintf("numa%d", numa);
    if (!unknown_root_) {
      out_ += "  pcie_unknown [label=\"PCIe\\n(NUMA node unknown)\", fillcolor=\"#e2e2e2\"];\n";
      unknown_root_ = true;
    }
    return "pcie_unknown";
  }

  void tree_edges() {
    for (size_t s = 0; s < topo_.pci_switches.size(); ++s) {
      const PciSwitch &sw = topo_.pci_switches[s];
      if (!needed_switch_[s]) continue;
      out_ += strprintf("  %s -- sw%zu;\n", parent_node(sw.parent, sw.numa).c_str(), s);
    }
    auto edge = [&](const PciLocation &loc, const std::string &node) {
      int inner = loc.switches.empty() ? -1 : loc.switches[0];
      out_ += strprintf("  %s -- %s;\n", parent_node(inner, loc.numa).c_str(), node.c_str());
    };
    for (size_t g = 0; g < topo_.gpus.size(); ++g) edge(topo_.gpus[g].pci, strprintf("gpu%zu", g));
    for (int n : nics_) edge(topo_.nics[n].pci, strprintf("nic%d", n));
  }

  // CPU nodes on one row, and the CPUs' interconnect between sockets. An xlabel, because a
  // labelled edge within one rank makes dot open a gap above the whole drawing.
  void socket_links() {
    std::string row;
    for (size_t n = 0; n < topo_.numa_nodes.size(); ++n) row += strprintf(" numa%zu;", n);
    out_ += "  { rank=same;" + row + " }\n";
    for (size_t s = 1; s < topo_.sockets.size(); ++s) {
      if (topo_.sockets[s - 1].numa_nodes.empty() || topo_.sockets[s].numa_nodes.empty()) continue;
      out_ += strprintf(
          "  numa%d -- numa%d [xlabel=\"SYS\", fontsize=9, fontcolor=\"#777777\", penwidth=3, "
          "color=\"#bdbdbd\", constraint=false];\n",
          topo_.sockets[s - 1].numa_nodes[0], topo_.sockets[s].numa_nodes[0]);
    }
  }

  void nvlinks() {
    bool uniform = uniform_gpu_nvlink_gbs() > 0;
    // NVSwitches drawn as one fabric, as NCCL models them; one line per GPU.
    std::vector<double> fabric(topo_.gpus.size());
    double first = 0;
    bool uniform_fabric = true;
    for (size_t g = 0; g < topo_.gpus.size(); ++g) {
      fabric[g] = nvswitch_gbs(topo_, static_cast<int>(g));
      if (fabric[g] <= 0) continue;
      if (first > 0 && fabric[g] != first) uniform_fabric = false;
      if (first <= 0) first = fabric[g];
    }
    if (first > 0) {
      std::string per_gpu =
          uniform_fabric ? "<br/><font point-size=\"9\">" + gbs_text(first) + " per GPU</font>"
                         : "";
      out_ += strprintf(
          "  nvswitch [label=<<b>NVSwitch</b> &#215; %zu%s>, fillcolor=\"%s\", color=\"%s\", "
          "fontcolor=white];\n",
          topo_.nvswitches.size(), per_gpu.c_str(), kNvidiaGreen, kNvidiaGreen);
    }
    for (size_t g = 0; g < topo_.gpus.size(); ++g) {
      if (fabric[g] <= 0) continue;
      out_ += strprintf(
          "  gpu%zu -- nvswitch [color=\"%s\", penwidth=4, label=\"%s\", fontsize=8, "
          "fontcolor=\"#4d7a00\"];\n",
          g, kNvidiaGreen, uniform_fabric ? "" : gbs_text(fabric[g]).c_str());
    }
    for (const NvLink &link : topo_.nvlinks) {
      if (link.a.kind != NvEndKind::kGpu || link.b.kind == NvEndKind::kNvSwitch) continue;
      std::string other = link.b.kind == NvEndKind::kGpu ? strprintf("gpu%d", link.b.index)
                                                         : cpu_node(link.b.index);
      if (other.empty()) continue;
      std::string label = (uniform && link.b.kind == NvEndKind::kGpu) ? "" : gbs_text(link.gbs);
      out_ += strprintf(
          "  gpu%d -- %s [color=\"%s\", penwidth=4, constraint=false, label=\"%s\", fontsize=8, "
          "fontcolor=\"#4d7a00\"];\n",
          link.a.index, other.c_str(), kNvidiaGreen, label.c_str());
    }
  }

  std::string cpu_node(int socket) const {
    const std::vector<int> &numas = topo_.sockets[socket].numa_nodes;
    return numas.empty() ? std::string() : strprintf("numa%d", numas[0]);
  }

  void nic_pairs() {
    for (const GpuNic &pair : pairs_) {
      if (pair.nic < 0 || !drawn_nic_[pair.nic]) continue;
      out_ += strprintf(
          "  gpu%d -- nic%d [style=dashed, color=\"%s\", penwidth=2, constraint=false, "
          "label=\"%s%s\", fontsize=8, fontcolor=\"%s\"];\n",
          pair.gpu, pair.nic, pair.gdr ? kNicBlue : "#888888", path_type_name(pair.path.type),
          pair.gdr ? " GDR" : "", pair.gdr ? kNicBlue : "#666666");
    }
  }

  const Topology &topo_;
  const std::vector<GpuNic> &pairs_;
  std::vector<int> nics_;
  std::vector<bool> drawn_nic_;
  std::vector<bool> needed_switch_;
  bool unknown_root_ = false;
  std::string out_;
};

}  // namespace

std::string topology_dot(const Topology &topology, const std::vector<GpuNic> &pairs) {
  return DotWriter(topology, pairs).write();
}

Status render_png(const std::string &dot_text, const std::string &png_path) {
  char dot_path[] = "/tmp/ddl_topo_XXXXXX";
  int fd = mkstemp(dot_path);
  if (fd < 0) return system_error(errno, "mkstemp for the DOT file");
  close(fd);
  {
    std::ofstream out(dot_path);
    out << dot_text;
    if (!out) {
      unlink(dot_path);
      return system_error(errno, "writing %s", dot_path);
    }
  }
  std::string output = "-o" + png_path;
  const char *argv[] = {"dot", "-Tpng", "-Gdpi=110", output.c_str(), dot_path, nullptr};
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "dot", nullptr, nullptr, const_cast<char *const *>(argv), environ);
  if (rc != 0) {
    unlink(dot_path);
    return unsupported(
        "cannot run Graphviz 'dot' (%s): install graphviz, or use --dot and render "
        "the file elsewhere",
        std::strerror(rc));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  unlink(dot_path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status(DDL_ERR_SYSTEM, strprintf("Graphviz 'dot' failed writing %s (status %d)",
                                            png_path.c_str(), status));
  }
  return Status::Ok();
}

}  // namespace topo
}  // namespace ddl

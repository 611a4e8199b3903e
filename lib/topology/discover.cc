// Discovery: hwloc (live or XML) -> Topology, then NVML and ibverbs of the machine we run on,
// then the optional XML dump.
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "lib/common/log.h"
#include "lib/topology/ibverbs.h"
#include "lib/topology/nvml.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {
namespace {

constexpr uint16_t kNvidiaVendor = 0x10de;
constexpr uint16_t kClassVga = 0x0300, kClass3d = 0x0302, kClassOtherBridge = 0x0680;
constexpr uint16_t kClassEthernet = 0x0200, kClassInfiniBand = 0x0207;
const char kNvlinkMatrix[] = "NVLinkBandwidth";

struct HwlocDeleter {
  void operator()(hwloc_topology *t) const { hwloc_topology_destroy(t); }
};
using HwlocPtr = std::unique_ptr<hwloc_topology, HwlocDeleter>;
using PciAttr = hwloc_obj_attr_u::hwloc_pcidev_attr_s;

std::string bus_id_of(const PciAttr &pci) {
  return strprintf("%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain), pci.bus, pci.dev,
                   pci.func);
}

bool is_host_bridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

bool is_nvswitch(hwloc_obj_t pcidev) {
  const PciAttr &pci = pcidev->attr->pcidev;
  if (pcidev->subtype != nullptr && std::strcmp(pcidev->subtype, "NVSwitch") == 0) return true;
  return pci.vendor_id == kNvidiaVendor && pci.class_id == kClassOtherBridge;
}

bool is_gpu(hwloc_obj_t pcidev) {
  const PciAttr &pci = pcidev->attr->pcidev;
  return pci.vendor_id == kNvidiaVendor && (pci.class_id == kClassVga || pci.class_id == kClass3d);
}

hwloc_obj_t pci_parent(hwloc_obj_t osdev) {
  hwloc_obj_t p = osdev->parent;
  return (p != nullptr && p->type == HWLOC_OBJ_PCI_DEVICE) ? p : nullptr;
}

// Turns hwloc's object tree into the Topology model.
class Extractor {
 public:
  Extractor(hwloc_topology_t hwloc, Topology *topology) : hwloc_(hwloc), topo_(topology) {}

  void run() {
    add_cpus();
    add_gpus();
    add_nics();
    add_nvswitches();
    add_nvlink_matrix();
  }

 private:
  void add_cpus();
  void add_gpus();
  void add_nics();
  void add_nvswitches();
  void add_nvlink_matrix();
  bool nvlink_end(hwloc_obj_t obj, NvEnd *end) const;
  void locate_cpu_side(hwloc_obj_t obj, int *numa, int *socket) const;
  PciLocation locate(hwloc_obj_t pcidev);
  int switch_index(hwloc_obj_t upstream_port, int parent);
  int socket_of_package(hwloc_obj_t package) const;

  hwloc_topology_t hwloc_;
  Topology *topo_;
  std::map<hwloc_obj_t, int> switch_of_;
  std::map<hwloc_obj_t, int> host_bridge_of_;
};

void Extractor::add_cpus() {
  int packages = hwloc_get_nbobjs_by_type(hwloc_, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < packages; ++i) {
    hwloc_obj_t package = hwloc_get_obj_by_type(hwloc_, HWLOC_OBJ_PACKAGE, i);
    Socket socket;
    socket.os_index = static_cast<int>(package->os_index);
    const char *model = hwloc_obj_get_info_by_name(package, "CPUModel");
    if (model != nullptr) socket.cpu_model = model;
    topo_->sockets.push_back(socket);
  }
  if (topo_->sockets.empty()) topo_->sockets.push_back(Socket());  // hwloc saw no packages

  int numas = hwloc_get_nbobjs_by_type(hwloc_, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numas; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(hwloc_, HWLOC_OBJ_NUMANODE, i);
    if (obj->cpuset == nullptr || hwloc_bitmap_iszero(obj->cpuset)) continue;  // memory only
    NumaNode numa;
    numa.os_index = static_cast<int>(obj->os_index);
    numa.memory_bytes = obj->attr->numanode.local_memory;
    unsigned pu;
    hwloc_bitmap_foreach_begin(pu, obj->cpuset) {
      numa.pus.push_back(static_cast<int>(pu));
    }
    hwloc_bitmap_foreach_end();
    numa.cores = hwloc_get_nbobjs_inside_cpuset_by_type(hwloc_, obj->cpuset, HWLOC_OBJ_CORE);
    if (numa.cores <= 0) numa.cores = static_cast<int>(numa.pus.size());
    numa.socket = 0;
    for (int p = 0; p < packages; ++p) {
      hwloc_obj_t package = hwloc_get_obj_by_type(hwloc_, HWLOC_OBJ_PACKAGE, p);
      if (hwloc_bitmap_intersects(package->cpuset, obj->cpuset)) {
        numa.socket = p;
        break;
      }
    }
    topo_->sockets[numa.socket].numa_nodes.push_back(static_cast<int>(topo_->numa_nodes.size()));
    topo_->numa_nodes.push_back(numa);
  }
  for (const NumaNode &numa : topo_->numa_nodes) topo_->cores += numa.cores;
}

int Extractor::socket_of_package(hwloc_obj_t package) const {
  for (size_t i = 0; i < topo_->sockets.size(); ++i) {
    if (topo_->sockets[i].os_index == static_cast<int>(package->os_index)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// The NUMA node (and socket) of the CPUs an I/O object hangs off; -1 where hwloc attached it
// to something wider than one node (the whole machine, when the BIOS gives no locality).
void Extractor::locate_cpu_side(hwloc_obj_t obj, int *numa, int *socket) const {
  *numa = -1;
  *socket = topo_->sockets.size() == 1 ? 0 : -1;
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(hwloc_, obj);
  if (anchor == nullptr) return;
  int matches = 0;
  for (size_t i = 0; i < topo_->numa_nodes.size(); ++i) {
    if (anchor->nodeset != nullptr &&
        hwloc_bitmap_isset(anchor->nodeset, static_cast<unsigned>(topo_->numa_nodes[i].os_index))) {
      *numa = static_cast<int>(i);
      ++matches;
    }
  }
  if (matches != 1) *numa = -1;
  if (*numa >= 0) {
    *socket = topo_->numa_nodes[*numa].socket;
    return;
  }
  hwloc_obj_t package = anchor->type == HWLOC_OBJ_PACKAGE
                            ? anchor
                            : hwloc_get_ancestor_obj_by_type(hwloc_, HWLOC_OBJ_PACKAGE, anchor);
  if (package != nullptr) *socket = socket_of_package(package);
}

int Extractor::switch_index(hwloc_obj_t upstream_port, int parent) {
  auto it = switch_of_.find(upstream_port);
  if (it != switch_of_.end()) return it->second;
  PciSwitch sw;
  const PciAttr &pci = upstream_port->attr->bridge.upstream.pci;
  sw.bus_id = bus_id_of(pci);
  sw.pci_id = strprintf("%04x:%04x", pci.vendor_id, pci.device_id);
  sw.parent = parent;
  sw.link_gbs = pci.linkspeed;
  locate_cpu_side(upstream_port, &sw.numa, &sw.socket);
  int index = static_cast<int>(topo_->pci_switches.size());
  topo_->pci_switches.push_back(sw);
  switch_of_[upstream_port] = index;
  return index;
}

// Walks up from a PCI device to its host bridge. hwloc shows a PCIe switch as an upstream-port
// bridge whose children are downstream-port bridges, and a root port is a bridge right under
// the host bridge; so counting PCI bridges down from the root port, the odd ones (1, 3, ...)
// are switches and the even ones their downstream ports. NCCL walks sysfs two levels at a time
// for the same reason.
PciLocation Extractor::locate(hwloc_obj_t pcidev) {
  PciLocation location;
  location.bus_id = bus_id_of(pcidev->attr->pcidev);
  location.link_gbs = pcidev->attr->pcidev.linkspeed;
  std::vector<hwloc_obj_t> bridges;  // innermost first
  for (hwloc_obj_t p = pcidev->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
    if (is_host_bridge(p)) {
      auto it = host_bridge_of_.find(p);
      if (it == host_bridge_of_.end()) {
        it = host_bridge_of_.emplace(p, static_cast<int>(host_bridge_of_.size())).first;
      }
      location.host_bridge = it->second;
      break;
    }
    bridges.push_back(p);
  }
  int parent = -1;
  for (size_t k = 1; k < bridges.size(); k += 2) {  // k: bridges above, from the root port
    parent = switch_index(bridges[bridges.size() - 1 - k], parent);
    location.switches.insert(location.switches.begin(), parent);
  }
  locate_cpu_side(pcidev, &location.numa, &location.socket);
  return location;
}

void Extractor::add_gpus() {
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(hwloc_, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(hwloc_, obj)) {
    if (!is_gpu(obj)) continue;
    Gpu gpu;
    gpu.pci = locate(obj);
    gpu.device_id = obj->attr->pcidev.device_id;
    // hwloc names the model on its cuda/nvml/opencl OS devices; without them, pci.ids may.
    for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
      const char *model = hwloc_obj_get_info_by_name(child, "GPUModel");
      if (model != nullptr) {
        gpu.model = model;
        break;
      }
    }
    const char *pci_name = hwloc_obj_get_info_by_name(obj, "PCIDevice");
    if (gpu.model.empty() && pci_name != nullptr) gpu.model = pci_name;
    if (gpu.model.empty()) gpu.model = strprintf("NVIDIA 10de:%04x", gpu.device_id);
    topo_->gpus.push_back(gpu);
  }
  std::sort(topo_->gpus.begin(), topo_->gpus.end(),
            [](const Gpu &a, const Gpu &b) { return a.pci.bus_id < b.pci.bus_id; });
}

void Extractor::add_nics() {
  std::vector<Nic> rdma, ethernet;
  for (hwloc_obj_t os = hwloc_get_next_osdev(hwloc_, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(hwloc_, os)) {
    hwloc_obj_t pci = pci_parent(os);
    if (os->name == nullptr || pci == nullptr) continue;
    uint16_t pci_class = pci->attr->pcidev.class_id;
    if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      Nic nic;
      nic.name = os->name;
      nic.rdma = true;
      nic.pci = locate(pci);
      for (hwloc_obj_t sib = pci->io_first_child; sib != nullptr; sib = sib->next_sibling) {
        if (sib->type == HWLOC_OBJ_OS_DEVICE && sib->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
            sib->name != nullptr) {
          nic.netdevs.push_back(sib->name);
        }
      }
      // hwloc records "Port<N>State" (ibv_port_state values) from sysfs. The PCI class tells
      // the link layer: ConnectX in InfiniBand mode is 0x0207, in Ethernet (RoCE) mode 0x0200.
      for (unsigned i = 0; i < os->infos_count; ++i) {
        int number = 0, state = 0, used = 0;
        const char *name = os->infos[i].name;
        if (std::sscanf(name, "Port%dState%n", &number, &used) != 1 || name[used] != '\0' ||
            number <= 0 || number > 255) {
          continue;
        }
        NicPort port;
        port.number = number;
        state = std::atoi(os->infos[i].value);
        port.state = state == 5                   ? PortState::kActive  // ACTIVE_DEFER
                     : (state >= 1 && state <= 4) ? static_cast<PortState>(state)
                                                  : PortState::kUnknown;
        port.link_layer = pci_class == kClassInfiniBand ? "InfiniBand"
                          : pci_class == kClassEthernet ? "Ethernet"
                                                        : "";
        nic.ports.push_back(port);
      }
      std::sort(nic.ports.begin(), nic.ports.end(),
                [](const NicPort &a, const NicPort &b) { return a.number < b.number; });
      rdma.push_back(nic);
    }
  }
  // Plain Ethernet: a network interface on an Ethernet PCI function that has no verbs device.
  for (hwloc_obj_t os = hwloc_get_next_osdev(hwloc_, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(hwloc_, os)) {
    hwloc_obj_t pci = pci_parent(os);
    if (os->name == nullptr || pci == nullptr || os->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK ||
        (pci->attr->pcidev.class_id >> 8) != 0x02) {
      continue;
    }
    bool has_verbs = false;
    for (hwloc_obj_t sib = pci->io_first_child; sib != nullptr; sib = sib->next_sibling) {
      has_verbs |=
          sib->type == HWLOC_OBJ_OS_DEVICE && sib->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    }
    if (has_verbs) continue;
    Nic nic;
    nic.name = os->name;
    nic.netdevs.push_back(os->name);
    nic.pci = locate(pci);
    ethernet.push_back(nic);
  }
  auto by_name = [](const Nic &a, const Nic &b) { return natural_less(a.name, b.name); };
  std::sort(rdma.begin(), rdma.end(), by_name);
  std::sort(ethernet.begin(), ethernet.end(), by_name);
  topo_->nics = rdma;
  topo_->nics.insert(topo_->nics.end(), ethernet.begin(), ethernet.end());
}

void Extractor::add_nvswitches() {
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(hwloc_, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(hwloc_, obj)) {
    if (is_nvswitch(obj)) topo_->nvswitches.push_back(NvSwitch{bus_id_of(obj->attr->pcidev)});
  }
  std::sort(topo_->nvswitches.begin(), topo_->nvswitches.end(),
            [](const NvSwitch &a, const NvSwitch &b) { return a.bus_id < b.bus_id; });
}

// An object of hwloc's NVLink matrix: a GPU's OS device (nvmlN) or PCI device, an NVSwitch's
// PCI device, or a Package (POWER's CPU NVLinks).
bool Extractor::nvlink_end(hwloc_obj_t obj, NvEnd *end) const {
  if (obj->type == HWLOC_OBJ_PACKAGE) {
    *end = NvEnd{NvEndKind::kCpu, socket_of_package(obj)};
    return end->index >= 0;
  }
  if (obj->type == HWLOC_OBJ_OS_DEVICE) obj = pci_parent(obj);
  if (obj == nullptr || obj->type != HWLOC_OBJ_PCI_DEVICE) return false;
  std::string bus_id = bus_id_of(obj->attr->pcidev);
  int gpu = find_gpu(*topo_, bus_id);
  if (gpu >= 0) {
    *end = NvEnd{NvEndKind::kGpu, gpu};
    return true;
  }
  for (size_t i = 0; i < topo_->nvswitches.size(); ++i) {
    if (topo_->nvswitches[i].bus_id == bus_id) {
      *end = NvEnd{NvEndKind::kNvSwitch, static_cast<int>(i)};
      return true;
    }
  }
  return false;
}

void Extractor::add_nvlink_matrix() {
  unsigned count = 1;
  hwloc_distances_s *matrix = nullptr;
  if (hwloc_distances_get_by_name(hwloc_, kNvlinkMatrix, &count, &matrix, 0) != 0 || count == 0) {
    return;
  }
  unsigned n = matrix->nbobjs;
  std::vector<NvEnd> ends(n);
  std::vector<bool> known(n);
  for (unsigned i = 0; i < n; ++i) known[i] = nvlink_end(matrix->objs[i], &ends[i]);
  for (unsigned i = 0; i < n; ++i) {
    for (unsigned j = i + 1; j < n; ++j) {
      // MB/s; the diagonal holds a "local" sentinel and is skipped.
      uint64_t mbs = std::max(matrix->values[i * n + j], matrix->values[j * n + i]);
      if (mbs == 0 || !known[i] || !known[j]) continue;
      NvLink link;
      link.a = ends[i];
      link.b = ends[j];
      if (link.b.kind == NvEndKind::kGpu && link.a.kind != NvEndKind::kGpu)
        std::swap(link.a, link.b);
      link.gbs = static_cast<double>(mbs) / 1000.0;
      topo_->nvlinks.push_back(link);
    }
  }
  hwloc_distances_release(hwloc_, matrix);
}

// Puts NVLinks that NVML found into the hwloc topology, so that DDL_TOPO_DUMP keeps them in
// the form hwloc's own NVML backend writes (an "NVLinkBandwidth" matrix in MB/s).
void add_nvlinks_to_hwloc(hwloc_topology_t hwloc, const Topology &topo) {
  std::vector<hwloc_obj_t> objs;
  auto object_of = [&](const NvEnd &end) -> int {
    hwloc_obj_t obj = nullptr;
    if (end.kind == NvEndKind::kCpu) {
      obj = hwloc_get_obj_by_type(hwloc, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(end.index));
    } else {
      const std::string &bus = end.kind == NvEndKind::kGpu ? topo.gpus[end.index].pci.bus_id
                                                           : topo.nvswitches[end.index].bus_id;
      unsigned domain = 0, bus_nr = 0, dev = 0, func = 0;
      if (std::sscanf(bus.c_str(), "%x:%x:%x.%x", &domain, &bus_nr, &dev, &func) == 4) {
        obj = hwloc_get_pcidev_by_busid(hwloc, domain, bus_nr, dev, func);
      }
    }
    if (obj == nullptr) return -1;
    auto it = std::find(objs.begin(), objs.end(), obj);
    if (it != objs.end()) return static_cast<int>(it - objs.begin());
    objs.push_back(obj);
    return static_cast<int>(objs.size() - 1);
  };
  std::vector<std::pair<std::pair<int, int>, uint64_t>> entries;
  for (const NvLink &link : topo.nvlinks) {
    int a = object_of(link.a), b = object_of(link.b);
    if (a >= 0 && b >= 0) entries.push_back({{a, b}, static_cast<uint64_t>(link.gbs * 1000.0)});
  }
  if (objs.size() < 2) return;
  size_t n = objs.size();
  std::vector<hwloc_uint64_t> values(n * n, 0);
  for (const auto &e : entries) {
    values[e.first.first * n + e.first.second] = e.second;
    values[e.first.second * n + e.first.first] = e.second;
  }
  hwloc_distances_add_handle_t handle = hwloc_distances_add_create(
      hwloc, kNvlinkMatrix, HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH, 0);
  if (handle == nullptr ||
      hwloc_distances_add_values(hwloc, handle, static_cast<unsigned>(n), objs.data(),
                                 values.data(), 0) != 0 ||
      hwloc_distances_add_commit(hwloc, handle, 0) != 0) {
    DDL_WARN("topology: could not record NVLinks for the dump: %s", std::strerror(errno));
  }
}

Status load_hwloc(const DiscoverOptions &options, HwlocPtr *out) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return system_error(errno, "hwloc_topology_init");
  HwlocPtr hwloc(raw);
  // hwloc drops every bridge, PCI and OS device by default, in XML files too.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  // The whole machine, not only the CPUs our cgroup allows: a GPU's NUMA node must be found
  // even when this process may not run there (local_placement reads the affinity itself).
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (!options.xml_file.empty() && hwloc_topology_set_xml(raw, options.xml_file.c_str()) != 0) {
    return system_error(errno, "topology file %s (DDL_TOPO_FILE) cannot be read by hwloc",
                        options.xml_file.c_str());
  }
  if (hwloc_topology_load(raw) != 0) {
    return system_error(errno, "hwloc could not load the topology of %s",
                        options.xml_file.empty() ? "this machine" : options.xml_file.c_str());
  }
  *out = std::move(hwloc);
  return Status::Ok();
}

std::string hostname_of(hwloc_topology_t hwloc, bool live) {
  const char *name = hwloc_obj_get_info_by_name(hwloc_get_root_obj(hwloc), "HostName");
  if (name != nullptr) return name;
  char buf[256] = {};
  if (live && gethostname(buf, sizeof buf - 1) == 0) return buf;
  return "unknown";
}

}  // namespace

Status refresh_nic_ports(const DiscoverOptions &options, Topology *topology) {
  // Asked even when hwloc saw no OpenFabrics device: verbs also knows devices without a PCI
  // function (soft-RoCE), and on a machine without RDMA the answer is an empty list.
  const bool probe = options.xml_file.empty() || options.file_is_this_machine;
  if (!probe || options.ibverbs_library.empty()) return Status::Ok();
  std::vector<VerbsDevice> devices;
  DDL_RETURN_IF_ERROR(query_ibverbs(options.ibverbs_library, &devices));
  apply_ibverbs_ports(devices, topology);
  return Status::Ok();
}

Status discover(const DiscoverOptions &options, Topology *topology) {
  *topology = Topology();
  HwlocPtr hwloc;
  DDL_RETURN_IF_ERROR(load_hwloc(options, &hwloc));
  bool live = options.xml_file.empty();
  topology->from_file = !live;
  topology->source = live ? "this machine" : options.xml_file;
  topology->hostname = hostname_of(hwloc.get(), live);
  Extractor(hwloc.get(), topology).run();

  bool probe = live || options.file_is_this_machine;
  if (probe && !options.nvml_library.empty() && !topology->gpus.empty()) {
    NvmlReport report;
    Status s = query_nvml(options.nvml_library, &report);
    if (s.ok()) {
      bool had_nvlinks = !topology->nvlinks.empty();
      apply_nvml_report(report, topology);
      if (!had_nvlinks && !topology->nvlinks.empty()) add_nvlinks_to_hwloc(hwloc.get(), *topology);
    } else {
      DDL_INFO("topology: no NVLink information: %s", s.message().c_str());
    }
  }
  Status ports = refresh_nic_ports(options, topology);
  if (!ports.ok()) DDL_INFO("topology: port speeds unknown: %s", ports.message().c_str());
  if (!options.dump_file.empty() &&
      hwloc_topology_export_xml(hwloc.get(), options.dump_file.c_str(), 0) != 0) {
    return system_error(errno, "cannot write the topology to %s (DDL_TOPO_DUMP)",
                        options.dump_file.c_str());
  }
  DDL_INFO("topology of %s (%s): %zu sockets, %zu NUMA nodes, %zu GPUs, %zu NICs, %zu NVLinks",
           topology->hostname.c_str(), topology->source.c_str(), topology->sockets.size(),
           topology->numa_nodes.size(), topology->gpus.size(), topology->nics.size(),
           topology->nvlinks.size());
  return Status::Ok();
}

}  // namespace topo
}  // namespace ddl

// The machine as ddl sees it: sockets, NUMA nodes, the PCIe switches that matter, GPUs, NICs
// and NVLinks. Discovery fills it from hwloc (the live machine or an XML file), rdma-core and
// NVML; everything after that (paths, NIC pairing, tiers, pictures) is a pure function of this
// plain data, so tests can feed it topology files.
//
// Indices: fields named numa/socket/gpu/nic/switch hold indices into the vectors of Topology,
// not OS numbers; the OS numbers are in os_index fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace ddl {
namespace topo {

struct Socket {
  int os_index = 0;
  std::string cpu_model;        // "Intel(R) Xeon(R) Platinum 8480+", "" when unknown
  std::vector<int> numa_nodes;  // indices into Topology::numa_nodes
};

// A NUMA node with CPUs. Memory-only nodes (HBM, CXL, GPU memory) are left out: no rank runs
// there and no PCI device hangs off them.
struct NumaNode {
  int os_index = 0;
  int socket = 0;        // index into Topology::sockets
  int cores = 0;         // cores, or hardware threads where hwloc knows no cores
  std::vector<int> pus;  // OS indices of its hardware threads, ascending
  uint64_t memory_bytes = 0;
};

// A PCIe switch: its upstream port together with its downstream ports, counted as one hop as
// NCCL does. Only switches above a GPU or NIC are recorded.
struct PciSwitch {
  std::string bus_id;  // of the upstream port, "0000:49:00.0"
  std::string pci_id;  // "vendor:device" of the upstream port, e.g. "10b5:9781" (PLX)
  int parent = -1;  // enclosing switch (index into Topology::pci_switches); -1: below a root port
  double link_gbs = 0;  // upstream link bandwidth, GB/s; 0 when unknown
  int numa = -1;        // -1 when unknown
  int socket = -1;
};

// Where a PCI device sits in the PCIe tree.
struct PciLocation {
  std::string bus_id;         // "0000:4e:00.0"; "" when unknown (soft-RoCE, an ibverbs-only device)
  std::vector<int> switches;  // enclosing PCIe switches, innermost first
  int host_bridge = -1;       // ordinal of its host bridge (root complex); -1 when unknown
  int numa = -1;              // index into Topology::numa_nodes; -1 when unknown
  int socket = -1;            // index into Topology::sockets; -1 when unknown
  double link_gbs = 0;        // its own PCIe link, GB/s; 0 when unknown
};

struct Gpu {
  PciLocation pci;
  uint16_t device_id = 0;  // PCI device id (vendor is always NVIDIA, 10de)
  std::string model;       // "NVIDIA H100 80GB HBM3"; from hwloc/NVML, else "NVIDIA 10de:2330"
};

// Values follow enum ibv_port_state, as hwloc's "PortNState" infos do.
enum class PortState : int { kUnknown = 0, kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };
const char *port_state_name(PortState state);

struct NicPort {
  int number = 1;
  PortState state = PortState::kUnknown;
  std::string link_layer;  // "InfiniBand", "Ethernet", "" when unknown
  double speed_gbps = 0;   // signalling rate in Gb/s (lanes x lane rate); 0 when unknown
  int width = 0;           // lanes; 0 when unknown
};

struct Nic {
  std::string name;   // the verbs device ("mlx5_0"), or the netdev ("eno1") for plain Ethernet
  bool rdma = false;  // a verbs (OpenFabrics) device: can do RDMA and GPUDirect RDMA
  std::vector<std::string> netdevs;  // network interfaces of the same PCI function
  PciLocation pci;
  std::vector<NicPort> ports;
  // False only when every port is known to be down (or initialising): such a NIC carries nothing.
  bool usable() const;
  // Fastest usable port in GB/s; 0 when unknown.
  double port_gbs() const;
};

struct NvSwitch {
  std::string bus_id;
};

enum class NvEndKind : int { kGpu, kNvSwitch, kCpu };
struct NvEnd {
  NvEndKind kind = NvEndKind::kGpu;
  int index = -1;  // into Topology::gpus, ::nvswitches or ::sockets
};
// All NVLinks between two ends, summed: GB/s in each direction.
struct NvLink {
  NvEnd a, b;
  double gbs = 0;
};

struct Topology {
  std::string hostname;
  std::string source;      // "this machine" or the XML file's path
  bool from_file = false;  // described by a file rather than probed
  int cores = 0;
  std::vector<Socket> sockets;  // at least one (a pseudo-socket when hwloc knows none)
  std::vector<NumaNode> numa_nodes;
  std::vector<PciSwitch> pci_switches;  // a parent always comes before its children
  std::vector<Gpu> gpus;                // sorted by bus id, i.e. CUDA_DEVICE_ORDER=PCI_BUS_ID order
  std::vector<Nic> nics;                // RDMA devices, then Ethernet; each in natural name order
  std::vector<NvSwitch> nvswitches;     // sorted by bus id
  std::vector<NvLink> nvlinks;
};

struct DiscoverOptions {
  std::string xml_file;   // load this hwloc XML instead of probing the machine (DDL_TOPO_FILE)
  std::string dump_file;  // write what was found as hwloc XML (DDL_TOPO_DUMP)
  // The file describes the machine we run on (DDL_TOPO_FILE: a VM whose sysfs misleads
  // hwloc), so NVML and verbs are still asked. Otherwise (ddl_topo --input, tests) the file
  // stands for another machine, which this one's libraries know nothing about.
  bool file_is_this_machine = false;
  // "" skips a library.
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string ibverbs_library = "libibverbs.so.1";
};

// DiscoverOptions with xml_file = DDL_TOPO_FILE (this machine's) and dump_file = DDL_TOPO_DUMP.
DiscoverOptions discover_options_from_env();

// Fills *topology. A machine without GPUs or NICs is not an error; a missing or unreadable
// topology file, or an unwritable dump file, is.
Status discover(const DiscoverOptions &options, Topology *topology);

// The RDMA NICs' ports as verbs reports them now (state, speed), on a topology `discover`
// made with the same options: what may change while a process runs (a link goes down),
// where the rest of the machine does not. Nothing to do for a file of another machine.
Status refresh_nic_ports(const DiscoverOptions &options, Topology *topology);

// "0000:04:00.0", "00000000:04:00.0" (NVML), "04:00.0" (domain 0), any case -> "0000:04:00.0".
bool normalize_pci_bus_id(const std::string &text, std::string *normalized);

// Index of the GPU / NIC, or -1. find_gpu accepts any form normalize_pci_bus_id does.
int find_gpu(const Topology &topology, const std::string &bus_id);
int find_nic(const Topology &topology, const std::string &name);

// The outermost PCIe switch above a device (index into pci_switches), or -1 when none.
int outermost_switch(const Topology &topology, const PciLocation &location);

// Natural order: "mlx5_2" < "mlx5_10".
bool natural_less(const std::string &a, const std::string &b);

}  // namespace topo
}  // namespace ddl

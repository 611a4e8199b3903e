// Path classes between GPUs and NICs, as NCCL names them (nvidia-smi topo -m uses the same
// words), with a bandwidth estimate used to rank choices.
#pragma once

#include <string>

#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

// Ordered from closest to farthest; comparisons (<=) are meaningful.
enum class PathType : int {
  kLoc = 0,  // the same device
  kNvl = 1,  // NVLink, directly or through NVSwitches
  kPix = 2,  // through one PCIe switch
  kPxb = 3,  // through several PCIe switches, never the CPU
  kPhb = 4,  // through a PCIe host bridge (the CPU) of one NUMA node
  kSys = 5,  // across NUMA nodes: the CPUs' interconnect (UPI, Infinity Fabric, X-Bus)
};
constexpr int kPathTypeCount = 6;

// "LOC", "NVL", "PIX", "PXB", "PHB", "SYS".
const char *path_type_name(PathType type);
// Accepts those names in any case.
bool parse_path_type(const std::string &text, PathType *type);

struct Path {
  PathType type = PathType::kSys;
  double gbs = 0;  // estimated bandwidth of the narrowest link, GB/s per direction
  // SYS between sockets (or to a device of unknown socket), as opposed to SYS between NUMA
  // domains of one socket (SNC, NPS): farther, though NCCL gives both one name.
  bool cross_socket = false;
};

// Between two PCI devices.
Path pci_path(const Topology &topology, const PciLocation &a, const PciLocation &b);
// NVLink when there is one, else PCIe.
Path gpu_gpu_path(const Topology &topology, int gpu_a, int gpu_b);
// PCIe, capped by the NIC's port speed when known.
Path gpu_nic_path(const Topology &topology, int gpu, int nic);

// NVLink bandwidth between two GPUs: direct links plus, when both reach NVSwitches, the
// smaller of their bandwidths into the switches (NCCL too treats all NVSwitches as one).
double nvlink_gbs(const Topology &topology, int gpu_a, int gpu_b);
// A GPU's total NVLink bandwidth into NVSwitches.
double nvswitch_gbs(const Topology &topology, int gpu);

}  // namespace topo
}  // namespace ddl

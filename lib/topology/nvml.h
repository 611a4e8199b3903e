// NVLink and NVSwitch connectivity from NVML, opened with dlopen so that libddl loads on a
// machine without the NVIDIA driver. Used on the live machine when hwloc's topology has no
// NVLinkBandwidth matrix (hwloc builds without its NVML plugin, as Debian's, have none).
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

enum class NvRemoteKind : int { kUnknown, kGpu, kNvSwitch, kCpu };

struct NvmlGpu {
  std::string bus_id;  // normalized ("0000:04:00.0")
  std::string name;    // "NVIDIA H100 80GB HBM3"
  int cc_major = 0;    // CUDA compute capability major; 0 when unknown
};

// The active NVLinks from one GPU to one remote device, summed.
struct NvmlLink {
  std::string gpu_bus_id;
  std::string remote_bus_id;
  NvRemoteKind remote = NvRemoteKind::kUnknown;  // when NVML could say
  uint16_t remote_vendor = 0;                    // PCI vendor of the remote end
  int links = 0;
  double gbs = 0;  // per direction
};

struct NvmlReport {
  std::vector<NvmlGpu> gpus;
  std::vector<NvmlLink> links;
};

// DDL_ERR_UNSUPPORTED when the library is absent or finds no driver; other errors never.
Status query_nvml(const std::string &library, NvmlReport *report);

// Names the GPUs hwloc did not name and, unless the topology already has NVLinks, adds the
// report's links (NVSwitches too). Links of GPUs the topology does not know are dropped.
void apply_nvml_report(const NvmlReport &report, Topology *topology);

// Bandwidth of one NVLink in GB/s per direction for a GPU of this compute capability, the
// figures hwloc's NVML backend uses (20 for NVLink 1, 25 for 2-4, 50 for 5).
double nvlink_lane_gbs(int cc_major);

}  // namespace topo
}  // namespace ddl

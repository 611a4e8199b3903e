// The topology as a Graphviz picture: sockets and NUMA nodes as boxes, the PCIe switches
// below them, GPUs and NICs, NVLinks as thick green lines and each GPU's NIC as a dashed one.
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/topology/nic_pairing.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

// DOT text. The NICs drawn are the RDMA NICs (greyed when their ports are down), or the
// Ethernet ones where there is no RDMA NIC: those the GPUs pair with.
std::string topology_dot(const Topology &topology, const std::vector<GpuNic> &pairs);

// Runs Graphviz's `dot` (from PATH) to turn DOT text into a PNG file.
Status render_png(const std::string &dot_text, const std::string &png_path);

}  // namespace topo
}  // namespace ddl

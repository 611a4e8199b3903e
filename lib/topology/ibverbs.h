// Port state, link layer, speed and width of the RDMA NICs from libibverbs, opened with dlopen
// so that libddl loads where rdma-core is not installed. hwloc already gives port states (from
// sysfs); verbs adds what the port runs at.
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

struct VerbsDevice {
  std::string name;  // "mlx5_0"
  std::vector<NicPort> ports;
};

// DDL_ERR_UNSUPPORTED when the library is absent (or ddl was built without verbs.h).
Status query_ibverbs(const std::string &library, std::vector<VerbsDevice> *devices);

// Replaces the ports of the NICs of the same name; devices hwloc did not see (soft-RoCE,
// hwloc without I/O discovery) are added as RDMA NICs of unknown location.
void apply_ibverbs_ports(const std::vector<VerbsDevice> &devices, Topology *topology);

// ibv_port_attr's active_width / active_speed codes -> lanes / Gb/s per lane; 0 when unknown.
int ib_width_lanes(int active_width);
double ib_lane_gbps(int active_speed);

}  // namespace topo
}  // namespace ddl

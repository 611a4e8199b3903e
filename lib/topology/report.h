// The topology in words: a short tree for people, one greppable line per GPU for scripts, and
// an nvidia-smi-style matrix of path classes.
#pragma once

#include <string>
#include <vector>

#include "lib/topology/nic_pairing.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

// "InfiniBand, port 1 active 200 Gb/s" / "Ethernet".
std::string nic_summary(const Nic &nic);
// "0-13,112-125".
std::string cpu_ranges(const std::vector<int> &pus);
// "host x (source): 2 sockets, 8 NUMA nodes, 112 cores, 4 GPUs, 4 RDMA NICs, 2 Ethernet NICs".
std::string topology_headline(const Topology &topology);

// Sockets > NUMA nodes > PCIe switches > GPUs and NICs, then NVLinks per GPU.
std::string topology_tree(const Topology &topology);

// One line per GPU, in GPU order: "gpu <bus id> nic <name|none> path <class|-> gdr <yes|no>".
// "no GPUs" when there are none.
std::string gpu_nic_lines(const Topology &topology, const std::vector<GpuNic> &pairs);

// Path class between every two GPUs and the given NICs.
std::string path_matrix(const Topology &topology, const std::vector<int> &nics);

}  // namespace topo
}  // namespace ddl

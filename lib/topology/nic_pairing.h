// Which NIC each GPU sends through, and whether it may do so straight from GPU memory
// (GPUDirect RDMA).
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/topology/paths.h"
#include "lib/topology/topology.h"

namespace ddl {
namespace topo {

struct GdrPolicy {
  // Farthest GPU-NIC path GPUDirect RDMA may take. PXB by default, as NCCL: peer-to-peer
  // through PCIe switches is fast, while through the CPU's root complex it is slow or refused.
  PathType max_path = PathType::kPxb;
  // A peer-memory module (nvidia_peermem, nv_peer_mem) lets the NIC map GPU memory.
  bool peer_memory = false;
};

// The loaded peer-memory module ("nvidia_peermem", "nv_peer_mem"), or "" when none.
std::string loaded_peer_memory_module();

// max_path from DDL_GDR_LEVEL (LOC, PIX, PXB, PHB or SYS; LOC turns GDR off) and peer_memory
// from /sys/module of this machine. A malformed DDL_GDR_LEVEL is an error, not a guess.
Status gdr_policy_from_env(GdrPolicy *policy);

struct PairingOptions {
  GdrPolicy gdr;
  // Consider NICs whose every port is down. Off by default, as NCCL: a down port carries nothing.
  bool include_down_ports = false;
};

struct GpuNic {
  int gpu = -1;
  int nic = -1;  // -1: no NIC to pair with
  Path path;
  bool gdr = false;
};

// One entry per GPU, in GPU order. Candidates are the RDMA NICs, or the Ethernet ones where
// there is no RDMA NIC. Each GPU takes the NIC of the closest path class (within SYS, one on
// its own socket first); then the highest bandwidth once divided among the GPUs already on it
// (so two GPUs share a NIC only when no other is as close and as fast); then the least used,
// then the first. GPUs with the fewest close NICs choose first, so they are not crowded out.
std::vector<GpuNic> pair_gpus_with_nics(const Topology &topology, const PairingOptions &options);

// The NICs pair_gpus_with_nics chooses from.
std::vector<int> candidate_nics(const Topology &topology, bool include_down_ports);

// The NICs a host's ranks spread their traffic to other hosts over (DDL_RAILS=auto), named as
// UCX names devices: an RDMA NIC by its first usable port ("mlx5_0:1"), an Ethernet NIC by its
// interface ("eno1"). The candidate NICs with a usable port, sorted by name, so that rail k is
// the same NIC on hosts built alike. Empty when there is none.
std::vector<std::string> rail_devices(const Topology &topology);

// The NIC that carries a GPU's traffic to other hosts (pair_gpus_with_nics, ports that are up),
// as a rail list may name it.
struct GpuRail {
  std::string gpu;                 // the GPU's bus id, normalized; "" when the topology lacks it
  std::vector<std::string> names;  // as UCX names it (first), its own name, its interfaces
  Path path;                       // GPU to NIC
};
// For the GPU at `gpu_bus_id` (any form normalize_pci_bus_id takes). names is empty when the
// topology has no such GPU or no NIC for it.
GpuRail gpu_rail(const Topology &topology, const std::string &gpu_bus_id);
// Index of the entry of `rails` (DDL_RAILS's list, or rail_devices) that names rail's NIC, or -1.
int rail_index(const std::vector<std::string> &rails, const GpuRail &rail);

}  // namespace topo
}  // namespace ddl

#include "lib/topology/nic_pairing.h"

#include <sys/stat.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "lib/common/params.h"

namespace ddl {
namespace topo {

std::string loaded_peer_memory_module() {
  // nvidia_peermem ships with the driver since R470; nv_peer_mem is Mellanox's older module.
  for (const char *module : {"nvidia_peermem", "nv_peer_mem"}) {
    struct stat st;
    if (stat(strprintf("/sys/module/%s", module).c_str(), &st) == 0) return module;
  }
  return std::string();
}

Status gdr_policy_from_env(GdrPolicy *policy) {
  *policy = GdrPolicy();
  std::string level = env_string("DDL_GDR_LEVEL");
  if (!level.empty() && !parse_path_type(level, &policy->max_path)) {
    return invalid_argument("DDL_GDR_LEVEL=%s: expected LOC (off), PIX, PXB, PHB or SYS",
                            level.c_str());
  }
  policy->peer_memory = !loaded_peer_memory_module().empty();
  return Status::Ok();
}

std::vector<int> candidate_nics(const Topology &topology, bool include_down_ports) {
  std::vector<int> rdma, ethernet;
  for (size_t i = 0; i < topology.nics.size(); ++i) {
    (topology.nics[i].rdma ? rdma : ethernet).push_back(static_cast<int>(i));
  }
  std::vector<int> candidates = rdma.empty() ? ethernet : rdma;
  if (include_down_ports) return candidates;
  std::vector<int> up;
  for (int nic : candidates) {
    if (topology.nics[nic].usable()) up.push_back(nic);
  }
  // With every port down there is nothing better to offer; say what is there.
  return up.empty() ? candidates : up;
}

namespace {

// An RDMA NIC by its first usable port ("mlx5_0:1"), an Ethernet NIC by its interface.
std::string ucx_device_name(const Nic &nic) {
  if (!nic.rdma) return nic.name;
  int port = 1;  // verbs ports count from 1
  for (const NicPort &p : nic.ports) {
    if (p.state == PortState::kActive || p.state == PortState::kUnknown) {
      port = p.number;
      break;
    }
  }
  return nic.name + ":" + std::to_string(port);
}

}  // namespace

std::vector<std::string> rail_devices(const Topology &topology) {
  std::vector<std::string> devices;
  for (int index : candidate_nics(topology, /*include_down_ports=*/false)) {
    const Nic &nic = topology.nics[index];
    if (nic.usable()) devices.push_back(ucx_device_name(nic));  // all down: no rails
  }
  std::sort(devices.begin(), devices.end());
  return devices;
}

GpuRail gpu_rail(const Topology &topology, const std::string &gpu_bus_id) {
  GpuRail rail;
  const int gpu = find_gpu(topology, gpu_bus_id);
  if (gpu < 0) return rail;
  rail.gpu = topology.gpus[gpu].pci.bus_id;
  const GpuNic pair = pair_gpus_with_nics(topology, PairingOptions())[gpu];
  if (pair.nic < 0 || !topology.nics[pair.nic].usable()) return rail;
  const Nic &nic = topology.nics[pair.nic];
  rail.names.push_back(ucx_device_name(nic));
  rail.names.push_back(nic.name);
  rail.names.insert(rail.names.end(), nic.netdevs.begin(), nic.netdevs.end());
  rail.path = pair.path;
  return rail;
}

int rail_index(const std::vector<std::string> &rails, const GpuRail &rail) {
  for (size_t i = 0; i < rails.size(); ++i)
    if (std::find(rail.names.begin(), rail.names.end(), rails[i]) != rail.names.end())
      return static_cast<int>(i);
  return -1;
}

std::vector<GpuNic> pair_gpus_with_nics(const Topology &topology, const PairingOptions &options) {
  size_t ngpus = topology.gpus.size();
  std::vector<GpuNic> result(ngpus);
  for (size_t g = 0; g < ngpus; ++g) result[g].gpu = static_cast<int>(g);
  std::vector<int> nics = candidate_nics(topology, options.include_down_ports);
  if (nics.empty()) return result;

  std::vector<std::vector<Path>> paths(ngpus);  // [gpu][position in nics]
  for (size_t g = 0; g < ngpus; ++g) {
    for (int nic : nics) paths[g].push_back(gpu_nic_path(topology, static_cast<int>(g), nic));
  }
  // Most constrained first: closest class, then fewest NICs in it, then GPU order.
  auto closeness = [](const Path &p) { return std::make_pair(p.type, p.cross_socket); };
  std::vector<std::tuple<std::pair<PathType, bool>, size_t, size_t>> order;
  for (size_t g = 0; g < ngpus; ++g) {
    auto best = closeness(paths[g][0]);
    for (const Path &p : paths[g]) best = std::min(best, closeness(p));
    size_t at_best = static_cast<size_t>(std::count_if(
        paths[g].begin(), paths[g].end(), [&](const Path &p) { return closeness(p) == best; }));
    order.emplace_back(best, at_best, g);
  }
  std::sort(order.begin(), order.end());

  std::vector<int> load(nics.size(), 0);
  for (const auto &entry : order) {
    size_t g = std::get<2>(entry);
    size_t chosen = 0;
    for (size_t k = 1; k < nics.size(); ++k) {
      const Path &p = paths[g][k], &c = paths[g][chosen];
      double share = p.gbs / (load[k] + 1), chosen_share = c.gbs / (load[chosen] + 1);
      if (std::make_tuple(p.type, p.cross_socket, -share, load[k]) <
          std::make_tuple(c.type, c.cross_socket, -chosen_share, load[chosen])) {
        chosen = k;
      }
    }
    ++load[chosen];
    GpuNic &pair = result[g];
    pair.nic = nics[chosen];
    pair.path = paths[g][chosen];
    pair.gdr = topology.nics[pair.nic].rdma && options.gdr.peer_memory &&
               pair.path.type <= options.gdr.max_path;
  }
  return result;
}

}  // namespace topo
}  // namespace ddl

// Real GPU servers from ../shared/topologies (never copied into the project; skipped when
// absent). The expectations are what a person reading `lstopo --input FILE` would say.
#include <criterion/criterion.h>

#include "lib/topology/nic_pairing.h"
#include "lib/topology/paths.h"
#include "lib/topology/report.h"
#include "lib/topology/tiers.h"
#include "topology_test_util.h"

using namespace ddl::topo;
using topo_test::nic_of;

namespace {

Topology load_shared(const char *name) {
  std::string path = topo_test::shared_file(name);
  if (path.empty()) cr_skip_test("%s is not in $DDL_SHARED_DIR/topologies", name);
  return topo_test::load(path);
}

std::vector<std::string> bus_ids(const Topology &t) {
  std::vector<std::string> ids;
  for (const Gpu &g : t.gpus) ids.push_back(g.pci.bus_id);
  return ids;
}

}  // namespace

// Dell XE8640: 2 Sapphire Rapids in SNC4 (8 NUMA nodes), 4 H100 SXM all-to-all over NVLink.
// lstopo shows GPU0 (4e) sharing a Broadcom switch with a dual-port ConnectX-6 (mlx5_0/1) on
// NUMA 3, GPU1 (5f) with a ConnectX-7 (mlx5_2) on NUMA 1, GPU3 (db) with mlx5_3 on NUMA 5, and
// GPU2 (cb) alone on NUMA 7. Only mlx5_0's port is up (Port1State=4; the others say 1, down).
Test(real_topologies, dell_xe8640_4xh100) {
  Topology t = load_shared("dell-xe8640-2xspr-4xh100-4xmlx5.hwloc.xml");
  cr_assert_eq(t.sockets.size(), 2u);
  cr_assert_eq(t.numa_nodes.size(), 8u);
  cr_assert_eq(t.cores, 112);
  std::vector<std::string> expected = {"0000:4e:00.0", "0000:5f:00.0", "0000:cb:00.0",
                                       "0000:db:00.0"};
  cr_assert(bus_ids(t) == expected);
  cr_assert_eq(t.gpus[0].model, "NVIDIA H100 80GB HBM3");
  const int numa_of_gpu[] = {3, 1, 7, 5};
  for (int g = 0; g < 4; ++g)
    cr_assert_eq(t.numa_nodes[t.gpus[g].pci.numa].os_index, numa_of_gpu[g]);
  cr_assert_eq(t.nics.size(), 6u);  // mlx5_0..3, eno8303, eno8403
  // Only one NIC is up: DDL_RAILS=auto finds one rail (so none).
  cr_assert(rail_devices(t) == std::vector<std::string>({"mlx5_0:1"}));
  cr_assert_eq(t.nics[0].name, "mlx5_0");
  cr_assert_eq(t.nics[3].name, "mlx5_3");
  cr_assert(t.nics[0].usable());
  for (int n = 1; n < 4; ++n) cr_assert_not(t.nics[n].usable(), "%s", t.nics[n].name.c_str());
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) {
      Path p = gpu_gpu_path(t, a, b);
      cr_assert_eq(p.type, PathType::kNvl);
      cr_assert_float_eq(p.gbs, 150.0, 1e-9);
    }
  }
  cr_assert_eq(gpu_nic_path(t, 0, find_nic(t, "mlx5_0")).type, PathType::kPix);
  cr_assert_eq(gpu_nic_path(t, 1, find_nic(t, "mlx5_2")).type, PathType::kPix);
  cr_assert_eq(gpu_nic_path(t, 3, find_nic(t, "mlx5_3")).type, PathType::kPix);
  for (int n = 0; n < 4; ++n) cr_assert_eq(gpu_nic_path(t, 2, n).type, PathType::kSys);

  // What ddl does: down ports carry nothing, so everyone goes through mlx5_0.
  cr_assert_eq(gpu_nic_lines(t, topo_test::pair(t)),
               "gpu 0000:4e:00.0 nic mlx5_0 path PIX gdr yes\n"
               "gpu 0000:5f:00.0 nic mlx5_0 path SYS gdr no\n"
               "gpu 0000:cb:00.0 nic mlx5_0 path SYS gdr no\n"
               "gpu 0000:db:00.0 nic mlx5_0 path SYS gdr no\n");
  // With every port cabled, the pairing a person would draw: each GPU its switch's NIC, and
  // GPU2 the NIC of its own socket (mlx5_3) rather than one across the UPI link.
  cr_assert_eq(gpu_nic_lines(t, topo_test::pair(t, /*include_down_ports=*/true)),
               "gpu 0000:4e:00.0 nic mlx5_0 path PIX gdr yes\n"
               "gpu 0000:5f:00.0 nic mlx5_2 path PIX gdr yes\n"
               "gpu 0000:cb:00.0 nic mlx5_3 path SYS gdr no\n"
               "gpu 0000:db:00.0 nic mlx5_3 path PIX gdr yes\n");
}

// Penguin Relion X1904GT: 2 Broadwell sockets; one PLX switch on socket 0 holds both P100s
// and the ConnectX-5; socket 1 has no I/O at all.
Test(real_topologies, penguin_2xp100_1xmlx5) {
  Topology t = load_shared("penguin-relion-pascal-2xbdw-2xp100-1xmlx5.hwloc.xml");
  cr_assert_eq(t.hostname, "pascal4");
  cr_assert_eq(t.sockets.size(), 2u);
  std::vector<std::string> expected = {"0000:04:00.0", "0000:07:00.0"};
  cr_assert(bus_ids(t) == expected);
  cr_assert_eq(t.pci_switches.size(), 1u);
  cr_assert_eq(t.pci_switches[0].bus_id, "0000:02:00.0");
  cr_assert_eq(gpu_gpu_path(t, 0, 1).type, PathType::kPix);
  cr_assert(t.nvlinks.empty());
  int mlx5_0 = find_nic(t, "mlx5_0");
  cr_assert_eq(mlx5_0, 0);
  cr_assert_eq(t.nics[0].netdevs.size(), 1u);
  cr_assert_eq(t.nics[0].netdevs[0], "hsi0");
  cr_assert_eq(t.nics.size(), 3u);  // + enp12s0f0, enp12s0f1
  cr_assert_eq(gpu_nic_lines(t, topo_test::pair(t)),
               "gpu 0000:04:00.0 nic mlx5_0 path PIX gdr yes\n"
               "gpu 0000:07:00.0 nic mlx5_0 path PIX gdr yes\n");
  cr_assert(t.sockets[1].numa_nodes.size() == 1 && t.numa_nodes[1].pus.size() == 36);
}

// DGX-2H: 16 V100 behind two levels of PLX switches (2 GPUs per leaf switch, 4 per top
// switch, 8 per socket), 12 NVSwitches (one of them with a blank PCI id), no NICs in the file.
Test(real_topologies, dgx2h_16xv100_nvswitch) {
  Topology t = load_shared("nvidia-dgx2h-16xv100-nvswitch.hwloc.xml");
  cr_assert_eq(t.gpus.size(), 16u);
  cr_assert_eq(t.nvswitches.size(), 12u);
  cr_assert(t.nics.empty());
  // NVSwitches make one fabric (as NCCL models it): 6 x 25 GB/s from every GPU.
  for (int g = 0; g < 16; ++g) cr_assert_float_eq(nvswitch_gbs(t, g), 150.0, 1e-9);
  cr_assert_eq(gpu_gpu_path(t, 0, 15).type, PathType::kNvl);
  // The PCIe tree below the NVLinks.
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[1].pci).type, PathType::kPix);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[2].pci).type, PathType::kPxb);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[4].pci).type, PathType::kPhb);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[8].pci).type, PathType::kSys);
  cr_assert_eq(t.gpus[0].pci.switches.size(), 2u);
  for (const GpuNic &p : topo_test::pair(t)) cr_assert_eq(p.nic, -1);
  cr_assert(
      gpu_nic_lines(t, topo_test::pair(t)).find("gpu 0000:e7:00.0 nic none path - gdr no\n") !=
      std::string::npos);

  // Tiers of 2 such hosts, one rank per GPU: 2 hosts, 4 sockets, 8 top-level PCIe switches.
  std::vector<Placement> ranks;
  for (int host = 0; host < 2; ++host) {
    for (int g = 0; g < 16; ++g) {
      ranks.push_back(placement_on_cpus(t, g, "dgx" + std::to_string(host),
                                        "boot:" + std::to_string(host), {}, -1));
    }
  }
  Tiers tiers = build_tiers(ranks);
  cr_assert_eq(tiers.at(TierLevel::kHost).groups.size(), 2u);
  cr_assert_eq(tiers.at(TierLevel::kSocket).groups.size(), 4u);
  cr_assert_eq(tiers.at(TierLevel::kPciSwitch).groups.size(), 8u);
  cr_assert_eq(tiers.at(TierLevel::kPciSwitch).groups[0].size(), 4u);
}

// IBM Minsky: 2 POWER8 sockets, 2 P100 per socket, each pair NVLinked and NVLinked to its
// CPU (40 GB/s each); no link between the pairs; no NICs in the file.
Test(real_topologies, minsky_4xp100_nvlink) {
  Topology t = load_shared("ibm-s822lc-minsky-2xpower8-4xp100-nvlink.hwloc.xml");
  cr_assert_eq(t.gpus.size(), 4u);
  cr_assert_eq(gpu_gpu_path(t, 0, 1).type, PathType::kNvl);
  cr_assert_float_eq(gpu_gpu_path(t, 0, 1).gbs, 40.0, 1e-9);
  cr_assert_eq(gpu_gpu_path(t, 2, 3).type, PathType::kNvl);
  cr_assert_eq(gpu_gpu_path(t, 0, 2).type, PathType::kSys);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[1].pci).type, PathType::kPhb);
  int cpu_links = 0;
  for (const NvLink &l : t.nvlinks) {
    if (l.b.kind != NvEndKind::kCpu) continue;
    ++cpu_links;
    cr_assert_eq(l.b.index, t.gpus[l.a.index].pci.socket);
    cr_assert_float_eq(l.gbs, 40.0, 1e-9);
  }
  cr_assert_eq(cpu_links, 4);
  cr_assert(t.pci_switches.empty());
  std::string tree = topology_tree(t);
  cr_assert(tree.find("nvlink gpu0: gpu1 40, cpu0 40 GB/s\n") != std::string::npos, "%s",
            tree.c_str());
}

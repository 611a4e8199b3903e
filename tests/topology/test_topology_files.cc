// Discovery, paths, NIC pairing, GPUDirect decisions and the text/Graphviz views on the
// project's own topology files (tests/topology/data, written by data/generate.py).
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "lib/topology/dot.h"
#include "lib/topology/nic_pairing.h"
#include "lib/topology/paths.h"
#include "lib/topology/report.h"
#include "topology_test_util.h"

using namespace ddl::topo;
using topo_test::data_file;
using topo_test::load;
using topo_test::nic_of;

Test(topology_dgx_a100_like, finds_sockets_gpus_nics_and_nvswitches) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  cr_assert_eq(t.hostname, "dgx-a100-like");
  cr_assert(t.from_file);
  cr_assert_eq(t.sockets.size(), 2u);
  cr_assert_eq(t.numa_nodes.size(), 4u);
  cr_assert_eq(t.cores, 32);
  cr_assert_eq(t.gpus.size(), 8u);
  cr_assert_eq(t.nvswitches.size(), 6u);
  cr_assert_eq(t.nics.size(), 9u);  // mlx5_0..7, then eno1
  for (int i = 0; i < 8; ++i) {
    cr_assert_eq(t.nics[i].name, "mlx5_" + std::to_string(i));
    cr_assert(t.nics[i].rdma);
    cr_assert_eq(t.nics[i].ports.size(), 1u);
    cr_assert_eq(t.nics[i].ports[0].state, PortState::kActive);
    cr_assert_eq(t.nics[i].ports[0].link_layer, "InfiniBand");
  }
  cr_assert_eq(t.nics[8].name, "eno1");
  cr_assert_not(t.nics[8].rdma);
  // GPUs without cuda/nvml OS devices are still found, from their PCI class, in bus order.
  cr_assert_eq(t.gpus[0].pci.bus_id, "0000:15:00.0");
  cr_assert_eq(t.gpus[7].pci.bus_id, "0000:a4:00.0");
  cr_assert_eq(t.gpus[0].model, "NVIDIA 10de:20b0");
  cr_assert_eq(t.gpus[0].pci.numa, 0);
  cr_assert_eq(t.gpus[7].pci.numa, 3);
  cr_assert_eq(t.gpus[7].pci.socket, 1);
  // Nested switches: GPU0 sits below a sub-switch of NUMA 0's top switch.
  cr_assert_eq(t.gpus[0].pci.switches.size(), 2u);
  cr_assert_eq(t.pci_switches[outermost_switch(t, t.gpus[0].pci)].bus_id, "0000:11:00.0");
}

Test(topology_dgx_a100_like, classifies_paths) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  int mlx5_0 = find_nic(t, "mlx5_0"), mlx5_1 = find_nic(t, "mlx5_1"),
      mlx5_2 = find_nic(t, "mlx5_2"), mlx5_4 = find_nic(t, "mlx5_4");
  cr_assert_eq(gpu_nic_path(t, 0, mlx5_0).type, PathType::kPix);
  cr_assert_eq(gpu_nic_path(t, 0, mlx5_1).type, PathType::kPxb);
  cr_assert_eq(gpu_nic_path(t, 0, mlx5_2).type, PathType::kSys);  // NUMA 0 -> NUMA 1
  cr_assert_not(gpu_nic_path(t, 0, mlx5_2).cross_socket);
  cr_assert(gpu_nic_path(t, 0, mlx5_4).cross_socket);
  cr_assert_gt(gpu_nic_path(t, 0, mlx5_2).gbs, gpu_nic_path(t, 0, mlx5_4).gbs);
  cr_assert_eq(pci_path(t, t.gpus[4].pci, t.gpus[5].pci).type, PathType::kPix);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[1].pci).type, PathType::kPxb);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.gpus[0].pci).type, PathType::kLoc);
  // Every GPU reaches every other through the six NVSwitches: 6 x 50 GB/s.
  for (int a = 0; a < 8; ++a) {
    cr_assert_float_eq(nvswitch_gbs(t, a), 300.0, 1e-9);
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      Path p = gpu_gpu_path(t, a, b);
      cr_assert_eq(p.type, PathType::kNvl, "gpu%d-gpu%d", a, b);
      cr_assert_float_eq(p.gbs, 300.0, 1e-9);
    }
  }
}

Test(topology_dgx_a100_like, pairs_each_gpu_with_its_own_nic) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  std::vector<GpuNic> pairs = topo_test::pair(t);
  cr_assert_eq(pairs.size(), 8u);
  for (int g = 0; g < 8; ++g) {
    // GPUs 4-7 see both NICs of their switch as PIX: only balancing keeps them apart.
    cr_assert_eq(nic_of(t, pairs, g), "mlx5_" + std::to_string(g), "gpu%d got %s", g,
                 nic_of(t, pairs, g).c_str());
    cr_assert_eq(pairs[g].path.type, PathType::kPix);
    cr_assert(pairs[g].gdr);
  }
}

Test(topology_dgx_a100_like, bandwidth_then_balance) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  int mlx5_4 = find_nic(t, "mlx5_4");
  // Twice as fast (GPUs too): half of it is as much as all of mlx5_5, so GPU5 takes the idle one.
  t.nics[mlx5_4].pci.link_gbs = 63.0;
  for (int g : {4, 5}) t.gpus[g].pci.link_gbs = 63.0;
  std::vector<GpuNic> pairs = topo_test::pair(t);
  cr_assert_eq(nic_of(t, pairs, 4), "mlx5_4");
  cr_assert_eq(nic_of(t, pairs, 5), "mlx5_5");
  // Far faster: sharing it beats the slow one.
  t.nics[mlx5_4].pci.link_gbs = 200.0;
  for (int g : {4, 5}) t.gpus[g].pci.link_gbs = 200.0;
  pairs = topo_test::pair(t);
  cr_assert_eq(nic_of(t, pairs, 4), "mlx5_4");
  cr_assert_eq(nic_of(t, pairs, 5), "mlx5_4");
  // A down port is never chosen while an active NIC is as close.
  t = load(data_file("dgx-a100-like.xml"));
  t.nics[mlx5_4].ports[0].state = PortState::kDown;
  pairs = topo_test::pair(t);
  cr_assert_eq(nic_of(t, pairs, 4), "mlx5_5");
  cr_assert_eq(nic_of(t, pairs, 5), "mlx5_5");
}

Test(topology_dgx_a100_like, gdr_follows_level_and_module) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  PairingOptions options;
  options.gdr.peer_memory = false;
  for (const GpuNic &p : pair_gpus_with_nics(t, options)) cr_assert_not(p.gdr);
  options.gdr.peer_memory = true;
  options.gdr.max_path = PathType::kLoc;  // DDL_GDR_LEVEL=LOC: off
  for (const GpuNic &p : pair_gpus_with_nics(t, options)) cr_assert_not(p.gdr);
  options.gdr.max_path = PathType::kPix;
  for (const GpuNic &p : pair_gpus_with_nics(t, options)) cr_assert(p.gdr);
}

Test(topology_two_socket, gpus_far_from_the_only_nic) {
  Topology t = load(data_file("two-socket-far-nic.xml"));
  cr_assert_eq(t.gpus.size(), 4u);  // the Matrox VGA is not a GPU
  cr_assert_eq(t.gpus[0].model, "Tesla P100-PCIE-16GB");
  cr_assert_eq(cpu_ranges(t.numa_nodes[0].pus), "0-3,8-11");
  cr_assert_eq(t.numa_nodes[1].socket, 1);
  std::vector<GpuNic> pairs = topo_test::pair(t);
  const char *expected[][3] = {{"mlx5_0", "PIX", "yes"},
                               {"mlx5_0", "PIX", "yes"},
                               {"mlx5_0", "SYS", "no"},
                               {"mlx5_0", "SYS", "no"}};
  for (int g = 0; g < 4; ++g) {
    cr_assert_eq(nic_of(t, pairs, g), expected[g][0]);
    cr_assert_str_eq(path_type_name(pairs[g].path.type), expected[g][1]);
    cr_assert_str_eq(pairs[g].gdr ? "yes" : "no", expected[g][2]);
  }
  // DDL_GDR_LEVEL=SYS would allow even the far GPUs.
  PairingOptions options;
  options.gdr.peer_memory = true;
  options.gdr.max_path = PathType::kSys;
  cr_assert(pair_gpus_with_nics(t, options)[3].gdr);
  cr_assert_eq(gpu_nic_lines(t, pairs),
               "gpu 0000:04:00.0 nic mlx5_0 path PIX gdr yes\n"
               "gpu 0000:05:00.0 nic mlx5_0 path PIX gdr yes\n"
               "gpu 0000:84:00.0 nic mlx5_0 path SYS gdr no\n"
               "gpu 0000:85:00.0 nic mlx5_0 path SYS gdr no\n");
}

Test(topology_two_socket, device_without_numa_locality) {
  Topology t = load(data_file("two-socket-far-nic.xml"));
  int eth9 = find_nic(t, "eth9");
  cr_assert_geq(eth9, 0);
  cr_assert_eq(t.nics[eth9].pci.numa, -1);
  cr_assert_eq(t.nics[eth9].pci.socket, -1);
  cr_assert_eq(pci_path(t, t.gpus[0].pci, t.nics[eth9].pci).type, PathType::kSys);
  cr_assert(topology_tree(t).find("no NUMA locality known:\n  nic eth9") != std::string::npos);
}

Test(topology_no_gpu, no_gpus_no_pairs) {
  Topology t = load(data_file("no-gpu.xml"));
  cr_assert(t.gpus.empty());
  cr_assert_eq(t.nics.size(), 2u);
  // A ConnectX in Ethernet mode: a verbs device whose link layer is Ethernet (RoCE).
  cr_assert_eq(t.nics[0].name, "mlx5_0");
  cr_assert(t.nics[0].rdma);
  cr_assert_eq(t.nics[0].ports[0].link_layer, "Ethernet");
  cr_assert_eq(t.nics[0].ports[0].state, PortState::kDown);
  cr_assert_not(t.nics[0].usable());
  cr_assert_eq(t.nics[0].netdevs.size(), 1u);
  cr_assert_eq(t.nics[0].netdevs[0], "enp1s0f0np0");
  cr_assert_eq(t.nics[1].name, "eno1");
  cr_assert(pair_gpus_with_nics(t, PairingOptions()).empty());
  cr_assert_eq(gpu_nic_lines(t, {}), "no GPUs\n");
}

Test(topology_files, dump_round_trips) {
  char dir[] = "/tmp/ddl_topo_test_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  std::string dump = std::string(dir) + "/dump.xml";
  DiscoverOptions options;
  options.xml_file = data_file("dgx-a100-like.xml");
  options.dump_file = dump;
  Topology first, second;
  cr_assert(discover(options, &first).ok());
  second = load(dump);
  cr_assert_eq(second.gpus.size(), first.gpus.size());
  cr_assert_eq(second.nics.size(), first.nics.size());
  cr_assert_eq(second.nvlinks.size(), first.nvlinks.size());
  cr_assert_eq(second.pci_switches.size(), first.pci_switches.size());
  cr_assert_eq(gpu_nic_lines(second, topo_test::pair(second)),
               gpu_nic_lines(first, topo_test::pair(first)));
  unlink(dump.c_str());
  rmdir(dir);
}

Test(topology_files, missing_or_bad_file_is_an_error) {
  DiscoverOptions options;
  options.xml_file = "/nonexistent/topology.xml";
  Topology t;
  ddl::Status s = discover(options, &t);
  cr_assert_not(s.ok());
  cr_assert(s.message().find("/nonexistent/topology.xml") != std::string::npos, "%s",
            s.message().c_str());

  options.xml_file = data_file("dgx-a100-like.xml");
  options.dump_file = "/nonexistent/dir/dump.xml";
  s = discover(options, &t);
  cr_assert_eq(s.code(), DDL_ERR_SYSTEM);
  cr_assert(s.message().find("DDL_TOPO_DUMP") != std::string::npos, "%s", s.message().c_str());
}

Test(topology_files, gdr_level_from_env) {
  GdrPolicy policy;
  setenv("DDL_GDR_LEVEL", "phb", 1);
  cr_assert(gdr_policy_from_env(&policy).ok());
  cr_assert_eq(policy.max_path, PathType::kPhb);
  setenv("DDL_GDR_LEVEL", "sometimes", 1);
  ddl::Status s = gdr_policy_from_env(&policy);
  cr_assert_eq(s.code(), DDL_ERR_INVALID_ARGUMENT);
  cr_assert(s.message().find("DDL_GDR_LEVEL=sometimes") != std::string::npos);
  unsetenv("DDL_GDR_LEVEL");
  cr_assert(gdr_policy_from_env(&policy).ok());
  cr_assert_eq(policy.max_path, PathType::kPxb);
  cr_assert_eq(policy.peer_memory, !loaded_peer_memory_module().empty());
}

Test(topology_files, dot_draws_sockets_switches_gpus_nics_and_nvlinks) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  std::string dot = topology_dot(t, topo_test::pair(t));
  for (const char *needle :
       {"graph topology {", "subgraph cluster_socket0", "subgraph cluster_numa3", "numa0 -- sw0;",
        "gpu0 -- nvswitch", "NVSwitch</b> &#215; 6", "gpu7 -- nic7 [style=dashed", "PIX GDR",
        "numa0 -- numa2 [xlabel=\"SYS\""}) {
    cr_assert(dot.find(needle) != std::string::npos, "missing %s in\n%s", needle, dot.c_str());
  }
  cr_assert(dot.find("eno1") == std::string::npos);  // Ethernet is not drawn next to RDMA NICs
  cr_assert_eq(dot.back(), '\n');
}

Test(topology_files, png_through_graphviz) {
  if (system("command -v dot >/dev/null 2>&1") != 0) cr_skip_test("Graphviz is not installed");
  Topology t = load(data_file("two-socket-far-nic.xml"));
  char path[] = "/tmp/ddl_topo_png_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  ddl::Status s = render_png(topology_dot(t, topo_test::pair(t)), path);
  cr_assert(s.ok(), "%s", s.message().c_str());
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  cr_assert_eq(std::string(magic + 1, 3), "PNG");
  unlink(path);
}

Test(topology_helpers, bus_ids_and_names) {
  std::string out;
  cr_assert(normalize_pci_bus_id("00000000:4E:00.0", &out));
  cr_assert_eq(out, "0000:4e:00.0");
  cr_assert(normalize_pci_bus_id("04:00.1", &out));
  cr_assert_eq(out, "0000:04:00.1");
  for (const char *bad : {"", "4e:00", "0000:4e:00.8", "0000:4e:20.0", "zz:00.0", "0000:4e:000.0",
                          "1:2:3:4.0", "123456789:00:00.0"}) {
    cr_assert_not(normalize_pci_bus_id(bad, &out), "%s", bad);
  }
  cr_assert(natural_less("mlx5_2", "mlx5_10"));
  cr_assert_not(natural_less("mlx5_10", "mlx5_2"));
  cr_assert(natural_less("eth", "eth0"));
  cr_assert_not(natural_less("mlx5_0", "mlx5_0"));
  PathType type;
  cr_assert(parse_path_type("Pxb", &type));
  cr_assert_eq(type, PathType::kPxb);
  cr_assert_not(parse_path_type("PIXX", &type));
  cr_assert_eq(cpu_ranges({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

// DDL_RAILS=auto: the RDMA NICs with a usable port, as UCX names them, by name; Ethernet ones
// only where there is no RDMA NIC; down NICs never.
Test(rail_devices, rdma_ports_by_name_ethernet_only_without_rdma_down_never) {
  Topology t = load(data_file("dgx-a100-like.xml"));
  std::vector<std::string> expected;
  for (int i = 0; i < 8; ++i) expected.push_back("mlx5_" + std::to_string(i) + ":1");
  cr_assert(rail_devices(t) == expected);

  t.nics[3].ports[0].state = PortState::kDown;  // mlx5_3 unplugged
  expected.erase(expected.begin() + 3);
  cr_assert(rail_devices(t) == expected);

  Topology ethernet;
  for (const char *name : {"eth1", "eth0"}) {
    Nic nic;
    nic.name = name;
    ethernet.nics.push_back(nic);
  }
  cr_assert(rail_devices(ethernet) == std::vector<std::string>({"eth0", "eth1"}));

  Topology two_ports;
  Nic hca;
  hca.name = "mlx5_9";
  hca.rdma = true;
  hca.ports.resize(2);
  hca.ports[0].number = 1;
  hca.ports[0].state = PortState::kDown;
  hca.ports[1].number = 2;
  hca.ports[1].state = PortState::kActive;
  two_ports.nics.push_back(hca);
  cr_assert(rail_devices(two_ports) == std::vector<std::string>({"mlx5_9:2"}));
  cr_assert(rail_devices(Topology()).empty());
}

// A rank on a GPU drives the rail of the NIC paired with that GPU: found by the GPU's PCI
// address in any form CUDA or NVML print it, named as rail lists name it.
Test(rail_devices, a_gpu_takes_the_rail_of_its_paired_nic) {
  const Topology crossed = load(data_file("two-gpu-crossed-eth.xml"));
  const std::vector<std::string> rails = rail_devices(crossed);
  cr_assert(rails == std::vector<std::string>({"eth0", "eth1"}));
  const GpuRail first = gpu_rail(crossed, "0000:04:00.0");
  cr_assert_eq(first.gpu, "0000:04:00.0");
  cr_assert_eq(first.names.front(), "eth1");
  cr_assert_eq(rail_index(rails, first), 1);
  const GpuRail second = gpu_rail(crossed, "00000000:84:00.0");  // as NVML prints it
  cr_assert_eq(second.names.front(), "eth0");
  cr_assert_eq(rail_index(rails, second), 0);
  cr_assert_eq(rail_index({"eth2", "eth0"}, second), 1, "a DDL_RAILS list in any order");
  cr_assert_eq(rail_index({"eth2", "eth3"}, second), -1, "a list without the GPU's NIC");
  const GpuRail nowhere = gpu_rail(crossed, "0000:99:00.0");
  cr_assert(nowhere.gpu.empty() && nowhere.names.empty());
  cr_assert_eq(rail_index(rails, nowhere), -1);

  // An RDMA NIC answers to its UCX device name, its own name and its interfaces; GPU i of this
  // machine shares a PCIe switch with mlx5_i.
  const Topology dgx = load(data_file("dgx-a100-like.xml"));
  const std::vector<std::string> hcas = rail_devices(dgx);
  for (size_t g = 0; g < dgx.gpus.size(); ++g) {
    const GpuRail rail = gpu_rail(dgx, dgx.gpus[g].pci.bus_id);
    const std::string hca = "mlx5_" + std::to_string(g);
    cr_assert_eq(rail.names.at(0), hca + ":1");
    cr_assert_eq(rail.names.at(1), hca);
    cr_assert_eq(rail_index(hcas, rail), static_cast<int>(g), "GPU %zu", g);
    cr_assert_eq(rail_index({"x", rail.names.at(2)}, rail), 1, "by its interface");
  }
}

// NVML and libibverbs are opened with dlopen; without a GPU or an HCA here, stand-in
// libraries (fakes/) answer in their place, and absent libraries must be harmless.
#include <criterion/criterion.h>
#include <unistd.h>

#include "lib/topology/ibverbs.h"
#include "lib/topology/nvml.h"
#include "lib/topology/paths.h"
#include "topology_test_util.h"

using namespace ddl::topo;

Test(nvml, absent_library_is_unsupported_not_fatal) {
  NvmlReport report;
  ddl::Status s = query_nvml("libddl-no-such-nvml.so.1", &report);
  cr_assert_eq(s.code(), DDL_ERR_UNSUPPORTED);
  cr_assert(report.gpus.empty());
}

Test(nvml, reads_gpus_and_nvlinks) {
  NvmlReport report;
  ddl::Status s = query_nvml(FAKE_NVML, &report);
  cr_assert(s.ok(), "%s", s.message().c_str());
  cr_assert_eq(report.gpus.size(), 2u);
  cr_assert_eq(report.gpus[0].bus_id, "0000:04:00.0");
  cr_assert_eq(report.gpus[0].name, "Fake P100 #0");
  cr_assert_eq(report.gpus[0].cc_major, 6);
  // GPU0: 4 links to GPU1, 1 to the NVSwitch, 1 to the NPU; GPU1: 4 + 1 (its 6th is down).
  cr_assert_eq(report.links.size(), 5u);
  int to_gpu1 = 0;
  for (const NvmlLink &l : report.links) {
    if (l.gpu_bus_id == "0000:04:00.0" && l.remote_bus_id == "0000:05:00.0") {
      ++to_gpu1;
      cr_assert_eq(l.links, 4);
      cr_assert_float_eq(l.gbs, 80.0, 1e-9);
    }
  }
  cr_assert_eq(to_gpu1, 1);
}

Test(nvml, report_adds_nvlinks_to_a_topology_without_them) {
  Topology t = topo_test::load(topo_test::data_file("two-socket-far-nic.xml"));
  cr_assert(t.nvlinks.empty());
  NvmlReport report;
  cr_assert(query_nvml(FAKE_NVML, &report).ok());
  apply_nvml_report(report, &t);
  cr_assert_eq(t.gpus[0].model, "Fake P100 #0");
  cr_assert_eq(t.nvswitches.size(), 1u);
  cr_assert_eq(t.nvswitches[0].bus_id, "0000:99:00.0");
  // 4 direct links plus the shared switch: 80 + 20 GB/s.
  Path p = gpu_gpu_path(t, 0, 1);
  cr_assert_eq(p.type, PathType::kNvl);
  cr_assert_float_eq(p.gbs, 100.0, 1e-9);
  cr_assert_eq(gpu_gpu_path(t, 0, 2).type, PathType::kSys);
  int cpu_links = 0;
  for (const NvLink &l : t.nvlinks) {
    if (l.b.kind == NvEndKind::kCpu) {
      ++cpu_links;
      cr_assert_eq(l.a.index, 0);
      cr_assert_eq(l.b.index, 0);  // GPU0's socket
    }
  }
  cr_assert_eq(cpu_links, 1);
  // A second report changes nothing: NVLinks are only added where none were known.
  size_t before = t.nvlinks.size();
  apply_nvml_report(report, &t);
  cr_assert_eq(t.nvlinks.size(), before);
}

Test(nvml, lane_bandwidth_by_generation) {
  cr_assert_float_eq(nvlink_lane_gbs(6), 20.0, 1e-9);
  cr_assert_float_eq(nvlink_lane_gbs(7), 25.0, 1e-9);
  cr_assert_float_eq(nvlink_lane_gbs(9), 25.0, 1e-9);
  cr_assert_float_eq(nvlink_lane_gbs(10), 50.0, 1e-9);
}

Test(ibverbs, absent_library_is_unsupported_not_fatal) {
  std::vector<VerbsDevice> devices;
  ddl::Status s = query_ibverbs("libddl-no-such-ibverbs.so.1", &devices);
  cr_assert_eq(s.code(), DDL_ERR_UNSUPPORTED);
  cr_assert(devices.empty());
}

Test(ibverbs, port_speed_codes) {
  cr_assert_eq(ib_width_lanes(2), 4);
  cr_assert_eq(ib_width_lanes(8), 12);
  cr_assert_eq(ib_width_lanes(3), 0);
  cr_assert_float_eq(ib_lane_gbps(64), 50.0, 1e-9);
  cr_assert_float_eq(ib_lane_gbps(128), 100.0, 1e-9);
  cr_assert_float_eq(ib_lane_gbps(0), 0.0, 1e-9);
}

#ifdef FAKE_IBVERBS
Test(ibverbs, reads_ports_and_merges_them) {
  std::vector<VerbsDevice> devices;
  ddl::Status s = query_ibverbs(FAKE_IBVERBS, &devices);
  cr_assert(s.ok(), "%s", s.message().c_str());
  cr_assert_eq(devices.size(), 2u);
  cr_assert_eq(devices[0].name, "mlx5_0");
  cr_assert_eq(devices[0].ports.size(), 1u);
  cr_assert_eq(devices[0].ports[0].state, PortState::kActive);
  cr_assert_eq(devices[0].ports[0].link_layer, "InfiniBand");
  cr_assert_eq(devices[0].ports[0].width, 4);
  cr_assert_float_eq(devices[0].ports[0].speed_gbps, 100.0, 1e-9);
  cr_assert_eq(devices[1].ports[0].link_layer, "Ethernet");

  Topology t = topo_test::load(topo_test::data_file("two-socket-far-nic.xml"));
  apply_ibverbs_ports(devices, &t);
  int mlx5_0 = find_nic(t, "mlx5_0"), rxe0 = find_nic(t, "rxe0");
  cr_assert_float_eq(t.nics[mlx5_0].port_gbs(), 12.5, 1e-9);
  cr_assert_eq(t.nics[mlx5_0].pci.bus_id, "0000:06:00.0");  // its place in the tree is kept
  cr_assert_geq(rxe0, 0);
  cr_assert(t.nics[rxe0].rdma);
  cr_assert_eq(t.nics[rxe0].pci.bus_id, "");
  cr_assert(t.nics[0].rdma && t.nics[1].rdma && !t.nics.back().rdma);  // RDMA NICs first
  // The port speed now caps the path: 100 Gb/s = 12.5 GB/s below the 16 GB/s PCIe link.
  cr_assert_float_eq(gpu_nic_path(t, 0, mlx5_0).gbs, 12.5, 1e-9);
  // The unplaced soft-RoCE device is never closer than the switch's NIC.
  std::vector<GpuNic> pairs = topo_test::pair(t);
  cr_assert_eq(topo_test::nic_of(t, pairs, 0), "mlx5_0");
  cr_assert_eq(topo_test::nic_of(t, pairs, 1), "mlx5_0");
}
#endif

// DDL_TOPO_FILE describes the machine we run on: NVML is still asked, and what it adds goes
// into DDL_TOPO_DUMP as hwloc's own NVML backend would have written it.
Test(nvml, nvlinks_found_by_nvml_are_dumped) {
  char dir[] = "/tmp/ddl_topo_nvml_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  DiscoverOptions options;
  options.xml_file = topo_test::data_file("two-socket-far-nic.xml");
  options.file_is_this_machine = true;
  options.nvml_library = FAKE_NVML;
  options.ibverbs_library = "";
  options.dump_file = std::string(dir) + "/dump.xml";
  Topology t;
  ddl::Status s = discover(options, &t);
  cr_assert(s.ok(), "%s", s.message().c_str());
  cr_assert_float_eq(gpu_gpu_path(t, 0, 1).gbs, 100.0, 1e-9);

  // The NVSwitch has no place in hwloc's tree, so the dump keeps the GPU and CPU links.
  Topology reloaded = topo_test::load(options.dump_file);
  Path p = gpu_gpu_path(reloaded, 0, 1);
  cr_assert_eq(p.type, PathType::kNvl);
  cr_assert_float_eq(p.gbs, 80.0, 1e-9);
  bool cpu_link = false;
  for (const NvLink &l : reloaded.nvlinks) cpu_link |= l.b.kind == NvEndKind::kCpu;
  cr_assert(cpu_link);
  // Without file_is_this_machine the file stands for another machine: NVML is not asked.
  options.file_is_this_machine = false;
  options.dump_file = "";
  cr_assert(discover(options, &t).ok());
  cr_assert(t.nvlinks.empty());
  unlink((std::string(dir) + "/dump.xml").c_str());
  rmdir(dir);
}

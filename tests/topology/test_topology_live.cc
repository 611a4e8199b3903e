// Discovery of the machine the tests run on. On these machines there is no GPU: the answer is
// "no GPUs", not an error. On a GPU machine the same checks hold and GPUs are listed too.
#include <criterion/criterion.h>
#include <unistd.h>

#include <cstdlib>

#include "lib/topology/nic_pairing.h"
#include "lib/topology/report.h"
#include "topology_test_util.h"

using namespace ddl::topo;

Test(topology_live, discovers_this_machine) {
  Topology t;
  ddl::Status s = discover(DiscoverOptions(), &t);
  cr_assert(s.ok(), "%s", s.message().c_str());
  cr_assert_not(t.from_file);
  cr_assert_eq(t.source, "this machine");
  cr_assert_geq(t.sockets.size(), 1u);
  cr_assert_geq(t.numa_nodes.size(), 1u);
  cr_assert_geq(t.cores, 1);
  cr_assert_eq(static_cast<long>(t.numa_nodes[0].pus.empty()), 0L);
  GdrPolicy policy;
  cr_assert(gdr_policy_from_env(&policy).ok());
  PairingOptions options;
  options.gdr = policy;
  std::vector<GpuNic> pairs = pair_gpus_with_nics(t, options);
  cr_assert_eq(pairs.size(), t.gpus.size());
  std::string lines = gpu_nic_lines(t, pairs);
  if (t.gpus.empty()) {
    cr_assert_eq(lines, "no GPUs\n");
  } else {
    cr_assert(lines.compare(0, 4, "gpu ") == 0);
  }
  cr_assert(topology_tree(t).find("socket ") != std::string::npos);
}

Test(topology_live, dump_and_reload_through_the_environment) {
  char dir[] = "/tmp/ddl_topo_live_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  std::string dump = std::string(dir) + "/this.xml";
  setenv("DDL_TOPO_DUMP", dump.c_str(), 1);
  unsetenv("DDL_TOPO_FILE");
  Topology live;
  cr_assert(discover(discover_options_from_env(), &live).ok());
  cr_assert_eq(access(dump.c_str(), R_OK), 0);

  unsetenv("DDL_TOPO_DUMP");
  setenv("DDL_TOPO_FILE", dump.c_str(), 1);
  Topology reloaded;
  cr_assert(discover(discover_options_from_env(), &reloaded).ok());
  unsetenv("DDL_TOPO_FILE");
  cr_assert(reloaded.from_file);
  cr_assert_eq(reloaded.hostname, live.hostname);
  cr_assert_eq(reloaded.numa_nodes.size(), live.numa_nodes.size());
  cr_assert_eq(reloaded.cores, live.cores);
  cr_assert_eq(reloaded.gpus.size(), live.gpus.size());
  // NICs only verbs knows (soft-RoCE) have no place in hwloc's XML; the others come back.
  auto located = [](const Topology &t) {
    std::vector<std::string> names;
    for (const Nic &nic : t.nics) {
      if (!nic.pci.bus_id.empty()) names.push_back(nic.name);
    }
    return names;
  };
  cr_assert(located(reloaded) == located(live));
  unlink(dump.c_str());
  rmdir(dir);
}

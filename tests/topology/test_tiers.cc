// Placements (what each rank says about where it runs), their wire form, and the tiers built
// from them.
#include <criterion/criterion.h>

#include <cstdlib>

#include "lib/topology/tiers.h"
#include "topology_test_util.h"

using namespace ddl::topo;

namespace {

Placement make(const char *host, int socket, int numa, const char *sw, const char *gpu) {
  Placement p;
  p.hostname = host;
  p.host_id = std::string("boot:") + host;
  p.socket = socket;
  p.numa = numa;
  p.pci_switch = sw;
  p.gpu = gpu;
  return p;
}

}  // namespace

Test(placement, round_trips_through_its_wire_form) {
  Placement p = make("node-1.cluster", 1, 3, "0000:49:00.0", "0000:4e:00.0");
  std::string wire = serialize(p);
  cr_assert_eq(wire,
               "ddl-placement/1 host=node-1.cluster id=boot:node-1.cluster socket=1 numa=3 "
               "switch=0000:49:00.0 gpu=0000:4e:00.0");
  cr_assert_leq(wire.size(), kMaxPlacementBytes);
  Placement back;
  cr_assert(parse_placement(wire, &back).ok());
  cr_assert(back == p);

  // A CPU-only rank of unknown NUMA node, padded to a fixed-size block.
  Placement cpu = make("h", -1, -1, "", "");
  std::string padded = serialize(cpu);
  padded.resize(kMaxPlacementBytes, '\0');
  cr_assert(parse_placement(padded, &back).ok());
  cr_assert(back == cpu);
}

Test(placement, rejects_what_a_peer_should_not_send) {
  std::string good = serialize(make("h", 0, 0, "", "0000:04:00.0"));
  const std::string bad[] = {
      "",
      "hello",
      "ddl-placement/2 host=h id=boot:h socket=0 numa=0 switch=- gpu=-",
      "ddl-placement/1 host=h id=boot:h socket=0 numa=0 switch=-",
      "ddl-placement/1 host=h id=boot:h socket=0 numa=0 switch=- gpu=- extra=1",
      "ddl-placement/1 id=boot:h host=h socket=0 numa=0 switch=- gpu=-",
      "ddl-placement/1 host=h id=boot:h socket=zero numa=0 switch=- gpu=-",
      "ddl-placement/1 host=h id=boot:h socket=0 numa=99999999 switch=- gpu=-",
      "ddl-placement/1 host=h id=boot:h socket=-2 numa=0 switch=- gpu=-",
      "ddl-placement/1 host=h id=boot:h socket=0 numa=0 switch=- gpu=04:00",
      "ddl-placement/1 host=h;rm id=boot:h socket=0 numa=0 switch=- gpu=-",
      "ddl-placement/1 host=h id=- socket=0 numa=0 switch=- gpu=-",
      "ddl-placement/1 host= id=boot:h socket=0 numa=0 switch=- gpu=-",
      "ddl-placement/1 host=" + std::string(200, 'a') + " id=x socket=0 numa=0 switch=- gpu=-",
      good + std::string(1, '\0') + "x",
      good + std::string(kMaxPlacementBytes, ' '),
  };
  for (const std::string &text : bad) {
    Placement p;
    ddl::Status s = parse_placement(text, &p);
    cr_assert_eq(s.code(), DDL_ERR_REMOTE, "accepted: %s", text.c_str());
  }
}

Test(placement, follows_cpu_binding_then_gpu_then_current_cpu) {
  Topology t = topo_test::load(topo_test::data_file("two-socket-far-nic.xml"));
  // Bound to two threads of socket 1, whatever the GPU.
  Placement p = placement_on_cpus(t, 0, "n1", "boot:1", {4, 12}, 4);
  cr_assert_eq(p.numa, 1);
  cr_assert_eq(p.socket, 1);
  cr_assert_eq(p.gpu, "0000:04:00.0");
  cr_assert_eq(p.pci_switch, "0000:02:00.0");
  // Free to run anywhere: with its GPU.
  std::vector<int> all;
  for (int i = 0; i < 16; ++i) all.push_back(i);
  p = placement_on_cpus(t, 2, "n1", "boot:1", all, 0);
  cr_assert_eq(p.numa, 1);
  cr_assert_eq(p.pci_switch, "0000:82:00.0");
  // Free and without a GPU: where it runs now.
  p = placement_on_cpus(t, -1, "n1", "boot:1", all, 12);
  cr_assert_eq(p.numa, 1);
  cr_assert_eq(p.gpu, "");
  cr_assert_eq(p.pci_switch, "");
  // No host id: the host name stands in.
  p = placement_on_cpus(t, -1, "n1", "", all, 0);
  cr_assert_eq(p.host_id, "host:n1");
}

Test(placement, local_placement_on_this_machine) {
  Topology t;
  cr_assert(discover(DiscoverOptions(), &t).ok());
  unsetenv("DDL_HOST_ID");
  Placement p = local_placement(t, -1);
  cr_assert_neq(p.hostname, "");
  cr_assert(p.host_id.compare(0, 5, "boot:") == 0 || p.host_id.compare(0, 8, "machine:") == 0, "%s",
            p.host_id.c_str());
  cr_assert_geq(p.numa, 0);
  cr_assert_geq(p.socket, 0);
  Placement back;
  cr_assert(parse_placement(serialize(p), &back).ok());
  cr_assert(back == p);

  setenv("DDL_HOST_ID", "emulated-host-3", 1);
  cr_assert_eq(local_placement(t, -1).host_id, "env:emulated-host-3");
  setenv("DDL_HOST_ID", "bad id with spaces", 1);  // ignored, with a warning
  cr_assert_neq(local_placement(t, -1).host_id, "env:bad id with spaces");
  unsetenv("DDL_HOST_ID");
}

Test(tiers, groups_hosts_sockets_numa_and_switches) {
  // Two hosts; on each, two sockets with two GPUs behind one switch per socket; rank 7 is a
  // CPU-only helper on host b.
  std::vector<Placement> ranks = {
      make("a", 0, 0, "0000:02:00.0", "0000:04:00.0"),
      make("a", 0, 0, "0000:02:00.0", "0000:05:00.0"),
      make("a", 1, 1, "0000:82:00.0", "0000:84:00.0"),
      make("b", 0, 0, "0000:02:00.0", "0000:04:00.0"),
      make("a", 1, 1, "0000:82:00.0", "0000:85:00.0"),
      make("b", 0, 0, "0000:02:00.0", "0000:05:00.0"),
      make("b", 1, 1, "0000:82:00.0", "0000:84:00.0"),
      make("b", 1, 1, "", ""),
  };
  Tiers t = build_tiers(ranks);
  cr_assert_eq(t.nranks, 8);
  const Tier &host = t.at(TierLevel::kHost);
  cr_assert_eq(host.groups.size(), 2u);
  cr_assert(host.groups[0] == std::vector<int>({0, 1, 2, 4}));
  cr_assert(host.groups[1] == std::vector<int>({3, 5, 6, 7}));
  cr_assert_eq(host.index_in_group[4], 3);
  cr_assert_eq(host.leader(1), 3);
  cr_assert(host.is_leader(3));
  cr_assert_eq(host.parent_group[0], -1);

  const Tier &socket = t.at(TierLevel::kSocket);
  cr_assert_eq(socket.groups.size(), 4u);
  cr_assert(socket.groups[socket.group_of[4]] == std::vector<int>({2, 4}));
  cr_assert_eq(socket.parent_group[socket.group_of[6]], host.group_of[6]);
  // Socket 0 of host a and socket 0 of host b are different groups.
  cr_assert_neq(socket.group_of[0], socket.group_of[3]);

  const Tier &numa = t.at(TierLevel::kNuma);
  cr_assert_eq(numa.groups.size(), 4u);

  const Tier &sw = t.at(TierLevel::kPciSwitch);
  cr_assert_eq(sw.groups.size(), 5u);  // rank 7 (no GPU) is alone within b's socket 1
  cr_assert(sw.groups[sw.group_of[7]] == std::vector<int>({7}));
  cr_assert(sw.groups[sw.group_of[6]] == std::vector<int>({6}));
  cr_assert_eq(sw.index_in_group[5], 1);
  cr_assert_eq(describe_tiers(t),
               "8 ranks: 2 hosts, 4 sockets, 4 NUMA nodes, 5 PCIe switch groups");
}

Test(tiers, unknown_values_share_a_group_and_empty_is_fine) {
  std::vector<Placement> ranks = {make("a", -1, -1, "", ""), make("a", -1, -1, "", "")};
  Tiers t = build_tiers(ranks);
  for (int level = 0; level < kTierLevels; ++level) {
    cr_assert_eq(t.levels[level].groups.size(), 1u, "%s",
                 tier_level_name(static_cast<TierLevel>(level)));
    cr_assert_eq(t.levels[level].index_in_group[1], 1);
  }
  Tiers empty = build_tiers({});
  cr_assert_eq(empty.nranks, 0);
  cr_assert(empty.at(TierLevel::kHost).groups.empty());
}

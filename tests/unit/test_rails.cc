// Which NICs carry rails (lib/core/rails.h): every rank plans the same rails from every rank's
// offer. By network when some host has no RDMA NIC (names may differ between hosts), by name
// for RDMA NICs and for DDL_RAILS's list; what is left out says why.
#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "lib/core/rails.h"

using ddl::NetInterface;
using ddl::RailOffer;
using ddl::RailPlan;

namespace {

uint32_t net(int a, int b, int c) {
  return (uint32_t(a) << 24) | (uint32_t(b) << 16) | (uint32_t(c) << 8);
}

NetInterface iface(const char *name, uint32_t network, int64_t speed = 0) {
  NetInterface i;
  i.name = name;
  i.network = network;
  i.prefix = 24;
  i.speed_mbps = speed;
  return i;
}

RailOffer offer(std::vector<NetInterface> interfaces, std::vector<std::string> rdma = {},
                std::vector<std::string> gpu = {}) {
  RailOffer o;
  o.interfaces = std::move(interfaces);
  o.rdma = std::move(rdma);
  o.gpu_nic = std::move(gpu);
  return o;
}

bool mentions(const std::vector<std::string> &lines, const std::string &text) {
  for (const std::string &line : lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

Test(rails, every_common_network_in_address_order_whatever_the_names) {
  // Host 1 calls its NICs otherwise and lists them in another order.
  const RailPlan plan =
      ddl::plan_rails({offer({iface("eth0", net(10, 100, 0)), iface("eth1", net(10, 101, 0))}),
                       offer({iface("ens2", net(10, 101, 0)), iface("ens1", net(10, 100, 0))})},
                      {});
  cr_assert_eq(plan.rails(), 2u);
  cr_assert(plan.nics[0] == std::vector<std::string>({"eth0", "eth1"}));
  cr_assert(plan.nics[1] == std::vector<std::string>({"ens1", "ens2"}));
  cr_assert(plan.left_out[0].empty() && plan.left_out[1].empty());
}

Test(rails, a_network_some_host_lacks_is_left_out_saying_why) {
  const RailPlan plan =
      ddl::plan_rails({offer({iface("eth0", net(10, 100, 0)), iface("eth1", net(10, 101, 0)),
                              iface("tun0", net(172, 16, 5))}),
                       offer({iface("eth0", net(10, 100, 0)), iface("eth1", net(10, 101, 0))}),
                       offer({iface("eth0", net(10, 100, 0)), iface("eth1", net(10, 101, 0)),
                              iface("tun0", net(172, 16, 9))})},
                      {});
  cr_assert_eq(plan.rails(), 2u);
  cr_assert(mentions(plan.left_out[0], "tun0 (172.16.5.0/24): not every host"));
  cr_assert(mentions(plan.left_out[2], "tun0 (172.16.9.0/24): not every host"));
  cr_assert(plan.left_out[1].empty());
}

Test(rails, slower_networks_are_left_out_and_one_common_network_is_no_rails) {
  const RailPlan plan = ddl::plan_rails(
      {offer({iface("eno1", net(192, 168, 1), 1000), iface("ens5", net(10, 0, 0), 100000)}),
       offer({iface("eno1", net(192, 168, 1), 1000), iface("ens5", net(10, 0, 0), 100000)})},
      {});
  cr_assert_eq(plan.rails(), 1u, "only the 100 Gbit/s network: one rail, so none");
  cr_assert(plan.nics[0] == std::vector<std::string>({"ens5"}));
  cr_assert(mentions(plan.left_out[0], "eno1 (192.168.1.0/24): 1000 Mbit/s, slower"));
}

Test(rails, rdma_nics_by_name_when_every_host_has_one) {
  const RailPlan plan = ddl::plan_rails(
      {offer({iface("eth0", net(10, 100, 0))}, {"mlx5_0:1", "mlx5_1:1"}, {"mlx5_1"}),
       offer({iface("eth0", net(10, 100, 0))}, {"mlx5_0:1", "mlx5_1:1", "mlx5_2:1"})},
      {});
  cr_assert_eq(plan.rails(), 2u);
  cr_assert(plan.nics[1] == std::vector<std::string>({"mlx5_0:1", "mlx5_1:1"}));
  cr_assert(mentions(plan.left_out[1], "mlx5_2:1: another host has only 2"));
  cr_assert_eq(plan.preferred[0], -1, "'mlx5_1' names the device, not the port");
  // One host without RDMA: by network (here one, so no rails).
  const RailPlan mixed =
      ddl::plan_rails({offer({iface("eth0", net(10, 100, 0))}, {"mlx5_0:1", "mlx5_1:1"}),
                       offer({iface("eth0", net(10, 100, 0))})},
                      {});
  cr_assert_eq(mixed.rails(), 1u);
}

Test(rails, a_listed_set_by_name_and_the_gpu_preference) {
  const RailPlan plan = ddl::plan_rails(
      {offer({}, {}, {"mlx5_3:1", "mlx5_3", "eth1"}), offer({}, {}, {})}, {"eth0", "eth1"});
  cr_assert_eq(plan.rails(), 2u);
  cr_assert_eq(plan.preferred[0], 1, "the GPU's NIC goes by eth1");
  cr_assert_eq(plan.preferred[1], -1);
}

Test(rails, offers_cross_the_wire_intact_and_bad_ones_are_refused) {
  const RailOffer sent =
      offer({iface("eth0", net(10, 100, 0), 25000), iface("veth1", net(10, 1, 2))}, {"mlx5_0:1"},
            {"mlx5_0", "eth0"});
  RailOffer got;
  cr_assert(ddl::parse_offer(ddl::serialize_offer(sent), &got).ok());
  cr_assert(got.rdma == sent.rdma && got.gpu_nic == sent.gpu_nic);
  cr_assert_eq(got.interfaces.size(), 2u);
  cr_assert(got.interfaces[0].name == "eth0" && got.interfaces[0].network == net(10, 100, 0) &&
            got.interfaces[0].prefix == 24 && got.interfaces[0].speed_mbps == 25000);
  cr_assert(ddl::parse_offer(ddl::serialize_offer(RailOffer()), &got).ok());
  cr_assert(got.interfaces.empty() && got.rdma.empty());
  cr_assert(!ddl::parse_offer("R\nI eth0 1 2\nG", &got).ok());
  cr_assert(!ddl::parse_offer("garbage", &got).ok());
}

Test(rails, this_hosts_interfaces_are_up_addressed_and_not_loopback) {
  for (const NetInterface &i : ddl::kernel_interfaces()) {
    cr_assert_neq(i.name, "lo");
    cr_assert(i.prefix >= 0 && i.prefix <= 32);
  }
}

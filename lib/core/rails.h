// Rails: each rank of a multi-host job drives one NIC of its host with a UCX transport of its
// own, so that a host's ranks together use every NIC (DDL_RAILS; README, "Configuration").
//
// Which NICs: DDL_RAILS=eth0,eth1 names them (by name, on every host); DDL_RAILS=none turns
// rails off; unset or "auto", ddl takes every NIC the hosts have in common, as NCCL and Open
// MPI do: the RDMA NICs the topology finds when every rank's host has one (paired by name),
// else the kernel's network interfaces that are up, have an IPv4 address and are neither
// loopback nor a bridge (veth, macvlan and SR-IOV functions included, which hwloc does not
// list), paired by network: rail k is the k-th network every host has an interface on, so
// that names may differ between hosts. An interface on a network some host lacks, or slower
// than the fastest common one, is left out with one log line saying why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lib/common/status.h"

struct ddl_comm;

namespace ddl {

// A network interface as the kernel sees it: name, IPv4 network (host byte order) and prefix
// length, and link speed in Mbit/s (0: unknown, as for veth).
struct NetInterface {
  std::string name;
  uint32_t network = 0;
  int prefix = 0;
  int64_t speed_mbps = 0;
};

// This host's interfaces that may carry a rail (up, IPv4, not loopback, not a bridge).
std::vector<NetInterface> kernel_interfaces();

// What one rank offers: its RDMA NICs (UCX names), its interfaces, and the names its GPU's
// closest NIC goes by (empty without a GPU).
struct RailOffer {
  std::vector<std::string> rdma;
  std::vector<NetInterface> interfaces;
  std::vector<std::string> gpu_nic;
};
std::string serialize_offer(const RailOffer &offer);
Status parse_offer(const std::string &text, RailOffer *offer);

// The rails every rank agrees on, computed alike by every rank from every rank's offer.
struct RailPlan {
  // nics[r][k]: the NIC rank r would drive as rail k (every rank has the same number of rails;
  // fewer than 2 means no rails).
  std::vector<std::vector<std::string>> nics;
  // The rail whose NIC is closest to rank r's GPU, or -1.
  std::vector<int> preferred;
  // What was left out and why, for the log ("eth2 (10.0.3.0/24): ..."), for each rank.
  std::vector<std::vector<std::string>> left_out;
  size_t rails() const { return nics.empty() ? 0 : nics[0].size(); }
};
// listed: DDL_RAILS's names (every rank the same list), or empty for every NIC in common.
RailPlan plan_rails(const std::vector<RailOffer> &offers, const std::vector<std::string> &listed);

struct TransportSource;  // lib/core/comm.h

// Connects this rank's rail, if the plan has rails and the job spans several hosts. Collective.
// A shrink's communicator (source.parent) keeps the parent's rails where every rank drives the
// same NIC as there and every connection it needs is healthy (NetworkTransport::subset).
Status connect_rails(ddl_comm *comm, const TransportSource &source);

}  // namespace ddl

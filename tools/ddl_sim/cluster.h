// A modeled cluster: what ddl_sim times ddl's schedules on.
//
// A cluster description is a small text file of `key = value` lines (`#` starts a comment);
// tools/ddl_sim/clusters/ holds ready ones and README.md lists every key. Values take units:
// rates in Gbit/s or GB/s ("100Gbit", "12.5GB"), times in s/ms/us/ns ("1.5us"). What the
// model holds:
//
//   ranks       `hosts` hosts of `ranks_per_host` ranks each, rank r on host r / ranks_per_host
//   inside a    every rank has a port into its host's fabric (shared memory, NVLink) of
//   host        `local_rate` each way; all of a host's local traffic shares `local_bus_rate`
//               (a CPU's memory bus; 0: none, as with NVSwitch); `local_latency` per message
//   between     `nics` NICs per host of `nic_rate` each way, rank r driving NIC (local index
//   hosts       mod nics) as ddl's rails do; `net_latency` per message; `net_efficiency` of a
//               NIC's rate a stream reaches (protocol headers, the TCP stack)
//   fabric      `fabric = switch` (one non-blocking switch) or `fat_tree`: leaves of
//               `hosts_per_leaf` hosts whose uplinks carry 1/`oversubscription` of their
//               hosts' NIC rate, one plane per rail (rail-optimized); `link_sharing = fifo`
//               (a link serves its messages in turn) or `fair` (all at once, rate / n each)
//   ranks' CPU  `reduce_rate` bytes per second reduced (one operand's bytes), `copy_rate` for
//   or GPU      local copies, `message_overhead` per message handled, `step_overhead` per
//               copy, reduction or copy across the host started (a GPU's launch; default 0),
//               `call_overhead` per call,
//               `net_cpu_rate` bytes per second through the network stack (TCP); `gpu = yes`:
//               reductions and copies on the GPU, beside the CPU's messages; and, for
//               emulated hosts on one machine, `machine_cores` cores that every rank shares
#pragma once

#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"

namespace ddl_sim {

struct Cluster {
  std::string name;
  std::string source;  // the file it came from, or "" when built in code
  int hosts = 1;
  int ranks_per_host = 1;
  // Inside a host (bytes per second, seconds).
  double local_rate = 4e9;
  double local_bus_rate = 0;  // 0: unlimited
  double local_latency = 0.7e-6;
  // Ranks of one host may read and write each other's buffers (CMA, CUDA IPC): hier's
  // fastest tier goes single-copy, as on a real host where ddl finds cross-memory attach.
  bool single_copy = false;
  // Between hosts.
  int nics = 1;
  double nic_rate = 125e6;
  double net_latency = 15e-6;
  double net_efficiency = 1.0;
  // Fabric.
  bool fat_tree = false;
  // How a link serves the messages on it: first come, first served (false), or shared fairly
  // among them, each at rate / n (true; NICs arbitrate among queue pairs packet by packet).
  bool fair_links = false;
  int hosts_per_leaf = 1;
  double oversubscription = 1.0;
  // Each rank.
  double reduce_rate = 10e9;
  double copy_rate = 10e9;
  // The ranks are GPUs: reductions and copies run on the GPU, beside the CPU that posts and
  // completes messages (else one CPU does both, one thing at a time).
  bool gpu = false;
  double message_overhead = 0.2e-6;
  // Per copy, reduction or copy across the host a rank starts, on whatever does it: the
  // launch of a GPU's copy or kernel, a CPU's call. 0 (the default): schedules that cut the
  // same bytes into many small steps cost no more, which holds only for an executor that
  // fuses them.
  double step_overhead = 0;
  double call_overhead = 0;
  // Bytes per second a rank's CPU copies through the network stack, on each side of a message
  // between hosts (TCP's copies into and out of the kernel; 0: none, as with RDMA).
  double net_cpu_rate = 0;
  // Cores all the ranks of the cluster share (0: each rank has its own): emulated hosts on
  // one machine, where every rank's work competes for the same few cores.
  int machine_cores = 0;
  size_t chunk_bytes = 512 * 1024;  // the library's default pipelining chunk (DDL_CHUNK_BYTES)
  int hier_pieces = 0;              // hier's pieces (DDL_HIER_PIECES; 0: the models' choice)

  int nranks() const { return hosts * ranks_per_host; }
  int host_of(int rank) const { return rank / ranks_per_host; }
  int local_of(int rank) const { return rank % ranks_per_host; }
  int leaf_of(int host) const { return fat_tree ? host / hosts_per_leaf : 0; }
  int leaves() const { return fat_tree ? (hosts + hosts_per_leaf - 1) / hosts_per_leaf : 1; }
};

// Sets one key ("nic_rate", "100Gbit"); the error names the key and what was expected.
ddl::Status set_cluster_key(const std::string &key, const std::string &value, Cluster *cluster);

// Reads a description file; errors name the file and line.
ddl::Status load_cluster(const std::string &path, Cluster *cluster);

// Every key and its current value, as a description file would say it.
std::string describe_cluster(const Cluster &cluster);

// What the library would hand a schedule builder on this cluster for a call (as args_of in
// lib/core/collectives.cc does): tiers by host, single copy inside hosts, the chunk.
ddl::CollectiveArgs collective_args(const Cluster &cluster, ddl::Collective collective,
                                    size_t count, size_t elem_size, const std::string &algorithm);

}  // namespace ddl_sim

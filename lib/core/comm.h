// The communicator behind ddl_comm_t, and the registry that makes a destroyed or foreign
// handle an error instead of a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ddl/ddl.h"
#include "lib/algorithms/schedule.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/core/agreement.h"
#include "lib/core/config.h"
#include "lib/core/peer_buffers.h"
#include "lib/exec/executor.h"
#include "lib/exec/plan.h"
#include "lib/exec/signature.h"
#include "lib/topology/nic_pairing.h"
#include "lib/topology/tiers.h"
#include "lib/transports/network_transport.h"
#include "lib/transports/routed_transport.h"
#include "lib/transports/shm/cma.h"
#include "lib/transports/shm/flat_slots.h"
#include "lib/transports/shm/shared_buffers.h"
#include "lib/transports/shm/shm_transport.h"
#include "lib/transports/shm/write_gates.h"

namespace ddl {
class ProgressQueue;     // lib/core/progress.h
struct ParkedTransfers;  // lib/core/progress.h
namespace device {
struct DeviceState;  // lib/device/device_state.h
}  // namespace device
}  // namespace ddl

struct ddl_comm {
  int rank = 0;
  int nranks = 1;
  ddl::CommConfig config;
  std::unique_ptr<ddl::Bootstrap> bootstrap;
  std::unique_ptr<ddl::NetworkTransport> transport;  // every peer; notices
  // transport runs over the connections of the communicator this one was shrunk from
  // (NetworkTransport::subset); that one gave them up when the shrink returned.
  bool kept_parent_connections = false;
  // This communicator's connections went to the one shrunk from it (transport is retired).
  bool gave_connections = false;
  std::unique_ptr<ddl::ShmTransport> shm;       // peers on this host, when it works here
  std::unique_ptr<ddl::NetworkTransport> rail;  // this rank's own NIC (lib/core/rails.h), or null
  std::string rail_nic;                         // its NIC's name, when there is one
  std::vector<int> rail_of;                     // by rank: the rail it drives (rails_in_use > 1)
  bool kept_parent_rail = false;                // rail is the shrunk-from communicator's (subset)
  std::vector<std::string> rdma_rails;          // this host's RDMA NICs (lib/core/rails.h)
  // The rails every rank drives (1: none), the same on every rank: what the cost models are
  // told a host's ranks share between hosts (CollectiveArgs::rails).
  int rails_in_use = 1;
  ddl::topo::GpuRail gpu_rail;                   // the NIC closest to this rank's GPU, if any
  std::unique_ptr<ddl::RoutedTransport> routes;  // what collectives use: shm, rail, else UCX
  ddl::Carriers carriers;  // routes' transport for each peer, resolved once (ExecArgs::carriers)
  ddl::Executor executor;
  std::vector<pid_t> pids;                  // by rank; 0: in another PID namespace (unknown here)
  std::vector<std::string> pid_namespaces;  // by rank ("pid:[4026531836]")
  // The ranks on this host, ascending (this one included), and each rank's position among
  // its own host's ranks (the index of its shm channels, slots and gates).
  std::vector<int> host_ranks, host_index;
  // Every rank may read and write the memory of the ranks on its host directly
  // (lib/transports/shm/cma.h; a job-wide verdict): on one host large allreduces take the
  // single-copy path (direct_allreduce.h), across hosts hier's host tier goes single-copy.
  bool cma = false;
  // A CUDA driver is loaded (lib/device/cuda_driver.h; one answer for the process): a call's
  // buffers may be device memory, so each call locates them. Without one, all are host memory.
  bool device_buffers = false;
  // And each group of algorithm_tiers[0] lies on one host: hier's fastest tier goes
  // single-copy (CollectiveArgs::peer_memory).
  bool single_copy_tier = false;
  ddl::PeerBuffers peer_buffers;  // what they publish for a call (peer_buffers.h)
  std::unique_ptr<ddl::Plan> publish_exchange, publish_barrier;  // its plans, made on first use
  std::unique_ptr<ddl::WriteGates> gates;  // who may write into whose buffers, and when
  ddl::PeerBufferMaps peer_maps;           // peers' ddl_mem_alloc buffers, mapped here
  // Every rank shares this host and its shm segment: small collectives go through shared
  // slots (flat_collectives.h).
  std::unique_ptr<ddl::FlatSlots> flat;
  // The (collective, count, device memory)s the dispatch logged its choice for
  // (lib/core/dispatch.cc): once each, however calls of different shapes alternate.
  std::set<std::tuple<ddl::Collective, size_t, bool>> logged_shapes;
  // Which ranks share a host, socket, NUMA node, PCIe switch (identical on every rank).
  ddl::topo::Tiers tiers;
  // What hier and the cost models read (CollectiveArgs::tiers, hosts): by host, or DDL_TIERS.
  std::vector<std::vector<int>> algorithm_tiers;
  int hosts = 1;

  // Collectives started (never wraps). Its low 32 bits are the sequence number that message
  // matching and error messages use; the whole is FlatSlots' call number.
  uint64_t calls = 0;
  bool oversubscribed = false;       // this host's ranks outnumber its cores
  int spins_before_yield = 2000;     // see ExecArgs; short when ranks outnumber cores
  int yields_before_sleep = 100000;  // see ExecArgs; short when ranks outnumber cores
  // Plans of recent calls, by (collective, count, root, in place, element size).
  using PlanKey = std::tuple<int, size_t, int, bool, size_t>;
  std::map<PlanKey, std::unique_ptr<ddl::Plan>> plans;
  const ddl::Plan *last_plan = nullptr;  // the plan of the last call, and its key
  PlanKey last_plan_key;
  std::vector<unsigned char> scratch;
  // The plan of the last call with per-peer counts (the v forms), its key and its blocks:
  // the next call reuses it when both match (a training loop's uneven last batch, MoE's
  // routing when it repeats), else it is built again.
  std::unique_ptr<ddl::Plan> counts_plan;
  PlanKey counts_plan_key;
  std::shared_ptr<const ddl::BlockLayout> counts_plan_layout;
  // Point-to-point messages sent to and received from each (rank, tag) so far: the k-th
  // message of a pair and tag carries k as its sequence number (lib/core/point_to_point.h).
  std::map<std::pair<int, int>, uint32_t> pairs_sent, pairs_received;
  int last_any_source = 0;  // the sender a receive from any source found last
  // Receives are numbered as they are posted; by tag, the numbers of the receives from any
  // source not matched yet: a later receive of the tag waits behind them (MPI's order: the
  // earlier receive takes the first message).
  uint64_t receives_posted = 0;
  std::map<int, std::set<uint64_t>> any_source_open;

  // Failure notices: a standing receive from any rank, and what this rank sends when it
  // finds the job broken itself (mismatched calls, a dead rank).
  ddl::FailureNotice notice_in, notice_out;
  ddl::TransferRequest notice_recv;
  std::vector<ddl::TransferRequest> notice_sends;

  // Runs queued nonblocking collectives in call order; made by the first one (progress.h).
  // Destroyed first: it finishes what is queued while everything it uses is still there.
  std::unique_ptr<ddl::ProgressQueue> progress;
  // Sends and receives posted on the caller's thread, polled by their waiters until the
  // next call hands them to `progress` (progress.h); made by the first one.
  std::shared_ptr<ddl::ParkedTransfers> parked;
  // Pinned staging memory and streams for device buffers, made by the first device call
  // (lib/device/staging.h); freed by destroy_comm after the progress thread.
  ddl::device::DeviceState *device = nullptr;

  // Agreements on this communicator (lib/core/agreement.h), and the failed ranks the last one
  // (agree or shrink) settled on.
  std::unique_ptr<ddl::AgreementState> agreement;
  std::vector<int> agreed_failed;

  std::atomic<bool> aborted{false};
  std::atomic<bool> busy{false};  // a call is running: a second thread is an error
  ddl::Status failure;            // sticky: a failed collective leaves the comm unusable
  std::string last_error;
};

namespace ddl {

// The kind of network transport communicators make (lib/transports/network_transport.h):
// the main one to every peer and each rank's rail.
constexpr const char *kNetworkTransport = "ucx";

// Where a new communicator's network transport comes from: a new one, or (a shrink) the
// connections `parent` has to `members` (its ranks, ascending), when every member can keep
// them.
struct TransportSource {
  ddl_comm *parent = nullptr;
  std::vector<int> members;
};

// Creates the communicator: bootstrap, transport, address exchange.
Status create_comm(const BootstrapOptions &options, const CommConfig &config, ddl_comm **out,
                   const TransportSource &source = TransportSource());
void destroy_comm(ddl_comm *comm);
// Detaches every request the communicator left with its network transport (notices, the
// agreement's messages): before the transport goes, or goes to a shrunk communicator.
void detach_requests(ddl_comm *comm);
// Tells every other rank why this rank found the job broken (fire and forget).
void send_failure_notice(ddl_comm *comm, const Status &why);

// Live communicators: API calls check a handle here before touching it.
void register_comm(ddl_comm *comm);
bool unregister_comm(ddl_comm *comm);
bool comm_is_live(ddl_comm *comm);

}  // namespace ddl

#include "lib/core/comm.h"

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "lib/algorithms/schedule.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/dispatch.h"
#include "lib/core/progress.h"
#include "lib/core/rails.h"
#include "lib/device/cuda_driver.h"
#include "lib/device/staging.h"
#include "lib/topology/nic_pairing.h"

namespace ddl {
namespace {

std::mutex g_registry_mutex;
std::set<ddl_comm *> &registry() {
  static std::set<ddl_comm *> live;
  return live;
}
// Counts the communicators ever unregistered: a thread's last answer of comm_is_live holds
// while no communicator has been destroyed since (the lock and the lookup cost 7 % of an 8 B
// allreduce on 2 ranks, which asks once per call).
std::atomic<uint64_t> g_unregistered{0};

// How long destroy waits for UCX to flush what this rank sent.
constexpr int kCloseTimeoutMs = 5000;

// DDL_TIERS=2x4x8: tiers of 2 consecutive ranks, within groups of 8 (2x4), within the job
// (x8): for machines the topology does not describe (racks, switches), and for tests.
Status parse_tiers(const std::string &text, int nranks, std::vector<std::vector<int>> *tiers) {
  std::vector<int64_t> factors;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t x = std::min(text.find('x', start), text.size());
    int64_t factor = 0;
    if (!parse_int(text.substr(start, x - start), 1, nranks, &factor))
      return invalid_argument("DDL_TIERS=%s: expected sizes like 2x4x8, fastest tier first",
                              text.c_str());
    factors.push_back(factor);
    start = x + 1;
  }
  int64_t product = 1;
  for (int64_t f : factors) product *= f;
  if (product != nranks)
    return invalid_argument("DDL_TIERS=%s covers %lld ranks; the communicator has %d", text.c_str(),
                            static_cast<long long>(product), nranks);
  tiers->clear();
  int64_t span = 1;
  for (size_t t = 0; t + 1 < factors.size(); ++t) {
    span *= factors[t];
    std::vector<int> group_of(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) group_of[static_cast<size_t>(r)] = static_cast<int>(r / span);
    tiers->push_back(std::move(group_of));
  }
  return Status::Ok();
}

// Which ranks share this host, and each rank's position among its own host's ranks.
void index_hosts(ddl_comm *comm) {
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  comm->host_index.assign(comm->nranks, 0);
  comm->host_ranks.clear();
  std::map<int, int> seen;  // host group -> its ranks so far
  for (int r = 0; r < comm->nranks; ++r) {
    comm->host_index[r] = seen[hosts.group_of[r]]++;
    if (hosts.group_of[r] == hosts.group_of[comm->rank]) comm->host_ranks.push_back(r);
  }
}

// The tiers the algorithms see: hosts (each host a group), unless DDL_TIERS describes them.
Status choose_algorithm_tiers(ddl_comm *comm) {
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  comm->hosts = static_cast<int>(hosts.groups.size());
  comm->algorithm_tiers.clear();
  const std::string forced = env_string("DDL_TIERS");
  if (!forced.empty()) return parse_tiers(forced, comm->nranks, &comm->algorithm_tiers);
  if (comm->hosts > 1) comm->algorithm_tiers.push_back(hosts.group_of);
  return Status::Ok();
}

// The machine's topology, discovered once per process (for each topology file it is told
// of): every communicator made after the first (a split, a shrink, a grow) reuses it, with
// its NICs' ports asked again (a link may have gone down since). hwloc's discovery took
// 26-113 ms a process with 16 of them on this VM's 2 cores, most of what a shrink among 15 of
// them took (0.15 s, test_elastic). Asked to dump what it finds (DDL_TOPO_DUMP), it
// discovers every time.
Status discover_this_machine(topo::Topology *topology) {
  const topo::DiscoverOptions options = topo::discover_options_from_env();
  if (!options.dump_file.empty()) return topo::discover(options, topology);
  static std::mutex lock;
  // Never freed: a communicator made while the process exits must not meet it destroyed.
  static auto *known = new std::map<std::string, topo::Topology>();
  const std::string key = options.xml_file + '\n' + (options.file_is_this_machine ? "1" : "0") +
                          '\n' + options.nvml_library + '\n' + options.ibverbs_library;
  std::lock_guard<std::mutex> hold(lock);
  auto it = known->find(key);
  if (it == known->end()) {
    topo::Topology found;
    DDL_RETURN_IF_ERROR(topo::discover(options, &found));
    known->emplace(key, found);
    *topology = std::move(found);
    return Status::Ok();
  }
  *topology = it->second;
  Status ports = topo::refresh_nic_ports(options, topology);
  if (!ports.ok())
    DDL_DEBUG("topology: the NICs' ports as first found: %s", ports.message().c_str());
  return Status::Ok();
}

// Every rank says where it runs; every rank then builds the same tiers from the same list.
// A machine that hwloc cannot describe still gets a placement (its host identity).
Status exchange_placements(ddl_comm *comm) {
  topo::Topology topology;
  Status s = discover_this_machine(&topology);
  if (!s.ok())
    DDL_WARN("topology discovery failed, placing this rank by host only: %s", s.message().c_str());
  // The NICs rails may use (lib/core/rails.h): the topology's RDMA NICs; connect_rails adds
  // the kernel's interfaces. A rank that chose its GPU before creating the communicator (as
  // NCCL and PyTorch expect) sends to other hosts through the NIC closest to it.
  if (env_string("DDL_RAILS") != "none") {
    const bool rdma = std::any_of(topology.nics.begin(), topology.nics.end(),
                                  [](const topo::Nic &nic) { return nic.rdma && nic.usable(); });
    if (rdma) comm->rdma_rails = topo::rail_devices(topology);
    const std::string gpu = device::current_gpu_bus_id();
    if (!gpu.empty()) comm->gpu_rail = topo::gpu_rail(topology, gpu);
  }
  const topo::Placement mine = topo::local_placement(topology, -1);
  std::vector<std::string> all;
  s = comm->bootstrap->allgather(topo::serialize(mine), &all);
  if (!s.ok()) return s.prefix("exchanging placements: ");
  std::vector<topo::Placement> by_rank(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    s = topo::parse_placement(all[r], &by_rank[r]);
    if (!s.ok()) return s.prefix(strprintf("rank %zu's placement: ", r));
  }
  comm->tiers = topo::build_tiers(by_rank);
  DDL_INFO("%s", topo::describe_tiers(comm->tiers).c_str());
  index_hosts(comm);
  return choose_algorithm_tiers(comm);
}

// The kernel's name of this process's PID namespace ("pid:[4026531836]"); "" if unreadable.
std::string pid_namespace() {
  char link[64] = "";
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string();
}

// Every rank publishes its pid, its PID namespace and its UCX worker address; peers on this
// host are told apart so that the transport can pick shared memory and watch their pids. A
// peer of this host in another PID namespace (containers or pods that share the kernel's boot
// id) has pid 0 here, "unknown": its number would name another process in this namespace.
Status connect_transport(ddl_comm *comm) {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const std::string my_namespace = pid_namespace();
  std::string mine(reinterpret_cast<const char *>(&pid), sizeof pid);
  mine += my_namespace + '\n' + comm->transport->worker_address();
  std::vector<std::string> all;
  Status s = comm->bootstrap->allgather(mine, &all);
  if (!s.ok()) return s.prefix("exchanging UCX addresses: ");
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  std::vector<PeerAddress> peers(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t newline = all[r].find('\n', sizeof pid);
    if (all[r].size() <= sizeof pid || newline == std::string::npos)
      return remote_error("rank %zu sent a %zu-byte transport address", r, all[r].size());
    uint32_t peer_pid = 0;
    std::memcpy(&peer_pid, all[r].data(), sizeof peer_pid);
    const std::string their_namespace = all[r].substr(sizeof pid, newline - sizeof pid);
    const bool same_namespace = !my_namespace.empty() && their_namespace == my_namespace;
    peers[r].pid = same_namespace ? static_cast<pid_t>(peer_pid) : 0;
    peers[r].address = all[r].substr(newline + 1);
    peers[r].same_host = hosts.group_of[r] == hosts.group_of[comm->rank];
    comm->pids.push_back(peers[r].pid);
    comm->pid_namespaces.push_back(their_namespace);
  }
  return comm->transport->connect(peers);
}

// The network transport: the parent's connections where every rank can keep them (a shrink,
// unless DDL_SHRINK_KEEP_CONNECTIONS=0), which spares the address exchange and the
// endpoints (10-25 ms of a shrink among 15 ranks here, O(n) endpoints per rank at scale);
// else a new transport connected to every peer. Every rank takes the same branch.
Status make_transport(ddl_comm *comm, const TransportSource &source) {
  if (source.parent) {
    const ddl_comm *parent = source.parent;
    const bool mine = env_string("DDL_SHRINK_KEEP_CONNECTIONS") != "0" && parent->transport &&
                      parent->transport->can_subset(source.members);
    bool all = false;
    Status s = comm->bootstrap->all_true(mine, &all);
    if (!s.ok()) return s.prefix("agreeing on keeping the connections: ");
    if (all) {
      DDL_RETURN_IF_ERROR(parent->transport->subset(comm->rank, source.members, &comm->transport));
      for (int m : source.members) {
        comm->pids.push_back(parent->pids[m]);
        comm->pid_namespaces.push_back(parent->pid_namespaces[m]);
      }
      comm->kept_parent_connections = true;
      return Status::Ok();
    }
  }
  Status s = make_network_transport(kNetworkTransport, comm->rank, comm->nranks, NetworkOptions(),
                                    &comm->transport);
  if (!s.ok()) return s.prefix(strprintf("creating the %s transport: ", kNetworkTransport));
  return connect_transport(comm);
}

// The host's first rank creates the shared-memory segment and offers "pid fd"; the others
// map it. Every rank on the host must succeed, or the host falls back to UCX: a rank
// sending over shm to a peer that listens on UCX would hang. DDL_SHM=0 turns it off.
// The host's ranks share one memfd segment, which the others open through the creator's
// /proc/<pid>/fd: that needs one PID namespace, which containers and pods on one host (same
// boot id) may not share. Then the pid means another process there, or none: such ranks
// keep to UCX, and the warning says so in a container's words.
Status connect_shm(ddl_comm *comm) {
  const std::vector<int> &local = comm->host_ranks;
  const bool wanted = local.size() >= 2 && env_string("DDL_SHM") != "0";
  const bool creator = wanted && local.front() == comm->rank;
  std::unique_ptr<ShmSegment> segment;
  std::string offer;
  if (creator) {
    const ShmLayout layout = choose_shm_layout(static_cast<int>(local.size()));
    Status s = ShmSegment::create(layout.segment_bytes(), &segment);
    if (s.ok()) {
      ShmTransport::init_segment(segment.get(), layout);
      offer = strprintf("%d %d", static_cast<int>(getpid()), segment->fd());
    } else {
      DDL_WARN("no shared-memory transport on this host, using UCX: %s", s.message().c_str());
    }
  }
  std::vector<std::string> offers;
  Status s = comm->bootstrap->allgather(offer, &offers);
  if (!s.ok()) return s.prefix("exchanging shared-memory segments: ");
  const int creator_fd = creator && segment ? segment->fd() : -1;
  bool ready = false;
  if (wanted) {
    Status opened = Status::Ok();
    if (!creator) {
      std::istringstream text(offers[local.front()]);
      std::string pid_text, fd_text;
      text >> pid_text >> fd_text;
      int64_t pid = 0, fd = 0;
      const std::string &mine = comm->pid_namespaces[comm->rank];
      const std::string &theirs = comm->pid_namespaces[local.front()];
      if (comm->pids[local.front()] == 0)
        opened = unsupported(
            "rank %d, which holds this host's segment, runs in another PID namespace (%s there, "
            "%s here): the ranks share this host (its boot id) but not a process namespace, as "
            "containers or pods do, so its memory cannot be opened from here. Shared memory "
            "needs the host's ranks in one PID namespace (docker run --pid=host or "
            "--pid=container:NAME, a pod's shareProcessNamespace: true, or one container)",
            local.front(), theirs.c_str(), mine.c_str());
      else if (!parse_int(pid_text, 1, INT32_MAX, &pid) || !parse_int(fd_text, 0, INT32_MAX, &fd))
        opened = internal_error("rank %d offered no segment", local.front());
      else
        opened = ShmSegment::open(static_cast<pid_t>(pid), static_cast<int>(fd), &segment);
    } else if (!segment) {
      opened = internal_error("creating the segment failed");
    }
    if (opened.ok())
      opened = ShmTransport::create(comm->rank, comm->nranks, local, comm->pids, std::move(segment),
                                    &comm->shm);
    if (!opened.ok())
      DDL_WARN("no shared-memory transport to the ranks on this host, using UCX: %s",
               opened.message().c_str());
    ready = opened.ok();
  }
  std::vector<std::string> verdicts;
  s = comm->bootstrap->allgather(ready ? "1" : "0", &verdicts);
  if (!s.ok()) return s.prefix("agreeing on shared memory: ");
  // Everyone on the host has mapped the segment (or given up): the creator's descriptor can
  // go, and from now on nothing of it exists outside the ranks' mappings.
  if (comm->shm && creator_fd >= 0) comm->shm->close_segment_fd();
  bool host_ready = wanted;
  for (int r : local) host_ready = host_ready && verdicts[r] == "1";
  std::vector<bool> via_local(comm->nranks, false);
  if (host_ready) {
    for (int r : local) via_local[r] = r != comm->rank;
  } else {
    comm->shm.reset();
  }
  comm->routes.reset(new RoutedTransport(comm->transport.get(), comm->shm.get(), via_local));
  return Status::Ok();
}

bool all_on_one_host(const ddl_comm *comm) {
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  return std::all_of(hosts.group_of.begin(), hosts.group_of.end(),
                     [&](int group) { return group == hosts.group_of[0]; });
}

// Single-copy transfers need the kernel's permission, which Yama or a seccomp filter may
// withhold: every rank reads the probe word of every peer on its host, and all must succeed
// on every host (hier's schedules, built alike everywhere, count on it). DDL_CMA=0 turns it
// off. Every rank takes the same branches: the tiers and the shm verdict are job-wide here.
Status connect_cma(ddl_comm *comm) {
  const bool some_host_shares = comm->nranks > comm->hosts;
  if (!some_host_shares) return Status::Ok();
  // Under Yama's ptrace_scope 1 only an ancestor may read a process; ranks are siblings.
  // Let peers in, as Open MPI does for the same copies (no effect without Yama).
  const bool wanted = env_string("DDL_CMA") != "0";
  if (wanted) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  std::vector<std::string> addresses;
  Status s = comm->bootstrap->allgather(std::to_string(cma_probe_address()), &addresses);
  if (!s.ok()) return s.prefix("exchanging probe addresses: ");
  // A rank without shared memory to its host peers routes to them over UCX: none of them
  // takes part in single copies either.
  bool readable = wanted && (comm->shm || comm->host_ranks.size() < 2);
  for (int r : comm->host_ranks) {
    int64_t address = 0;
    if (r == comm->rank || !readable) continue;
    readable = parse_int(addresses[r], 1, INT64_MAX, &address) &&
               cma_probe(comm->pids[r], static_cast<uintptr_t>(address));
    if (!readable)
      DDL_INFO("no single-copy transfers: cannot read rank %d's memory (pid %d)", r,
               static_cast<int>(comm->pids[r]));
  }
  s = comm->bootstrap->all_true(readable, &comm->cma);
  if (!s.ok()) return s.prefix("agreeing on single-copy transfers: ");
  return Status::Ok();
}

// hier's fastest tier goes single-copy where its groups (by host, or DDL_TIERS') each lie on
// one host whose ranks may read and write each other's memory.
void choose_single_copy_tier(ddl_comm *comm) {
  comm->single_copy_tier = false;
  if (!comm->cma || comm->algorithm_tiers.empty()) return;
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  const std::vector<int> &tier = comm->algorithm_tiers[0];
  std::map<int, int> host_of_group;
  for (int r = 0; r < comm->nranks; ++r)
    if (host_of_group.emplace(tier[r], hosts.group_of[r]).first->second != hosts.group_of[r])
      return;
  comm->single_copy_tier = true;
}

// The shm segment's write gates serve every single copy into this host's ranks; its slots
// the collectives of a job whose ranks all share this host. A forced DDL_ALGO that needs them
// and finds none is said so.
void connect_slots(ddl_comm *comm) {
  if (comm->shm) {
    comm->gates.reset(new WriteGates(comm->shm->gates_region(),
                                     static_cast<int>(comm->host_ranks.size()),
                                     comm->host_index[comm->rank]));
    if (all_on_one_host(comm))
      comm->flat.reset(new FlatSlots(comm->shm->flat_region(), comm->rank));
  }
  warn_of_unavailable_way(comm);
}

// Ranks that outnumber this host's cores must hand the core over quickly when they wait:
// the rank they wait for may be queued behind them. DDL_SPIN_BEFORE_YIELD overrides the
// polls before the first yield.
void choose_waiting(ddl_comm *comm) {
  const long local = static_cast<long>(comm->host_ranks.size());
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const long cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                                   : sysconf(_SC_NPROCESSORS_ONLN);
  const bool oversubscribed = local > cores;
  comm->oversubscribed = oversubscribed;
  comm->spins_before_yield = oversubscribed ? 20 : 2000;
  comm->yields_before_sleep = oversubscribed ? 200 : 100000;
  int64_t forced = 0;
  const std::string text = env_string("DDL_SPIN_BEFORE_YIELD");
  if (!text.empty()) {
    if (parse_int(text, 0, 1 << 30, &forced))
      comm->spins_before_yield = static_cast<int>(forced);
    else
      DDL_WARN("ignoring DDL_SPIN_BEFORE_YIELD=%s: expected a count of polls", text.c_str());
  }
  DDL_INFO(
      "%ld ranks on this host's %ld cores: %d idle polls before yielding, %d yields "
      "before sleeping",
      local, cores, comm->spins_before_yield, comm->yields_before_sleep);
}

}  // namespace

void register_comm(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().insert(comm);
}

bool unregister_comm(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  const bool erased = registry().erase(comm) > 0;
  if (erased) g_unregistered.fetch_add(1, std::memory_order_release);
  return erased;
}

bool comm_is_live(ddl_comm *comm) {
  struct Answer {
    const ddl_comm *comm = nullptr;
    uint64_t unregistered = 0;
  };
  thread_local Answer last;
  const uint64_t unregistered = g_unregistered.load(std::memory_order_acquire);
  if (comm == last.comm && unregistered == last.unregistered) return true;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  if (registry().count(comm) == 0) return false;
  last = Answer{comm, g_unregistered.load(std::memory_order_relaxed)};
  return true;
}

Status create_comm(const BootstrapOptions &options, const CommConfig &config, ddl_comm **out,
                   const TransportSource &source) {
  std::unique_ptr<ddl_comm> comm(new ddl_comm());
  comm->rank = options.rank;
  comm->nranks = options.nranks;
  comm->config = config;
  comm->device_buffers = device::cuda_driver() != nullptr;

  DDL_RETURN_IF_ERROR(Bootstrap::create(options, &comm->bootstrap));
  DDL_RETURN_IF_ERROR(exchange_placements(comm.get()));
  DDL_RETURN_IF_ERROR(make_transport(comm.get(), source));
  DDL_RETURN_IF_ERROR(connect_shm(comm.get()));
  DDL_RETURN_IF_ERROR(connect_rails(comm.get(), source));
  comm->carriers = comm->routes->carriers();
  DDL_RETURN_IF_ERROR(connect_cma(comm.get()));
  choose_single_copy_tier(comm.get());
  connect_slots(comm.get());
  choose_waiting(comm.get());
  // Nobody leaves init (and could destroy its endpoints) before everyone has connected.
  Status s = comm->bootstrap->barrier();
  if (!s.ok()) return s.prefix("waiting for every rank to connect: ");
  // Posted last, when nothing can fail after it: a communicator given up here is freed
  // without destroy_comm, and its transport's worker may outlive it (a shrink's retry), so it
  // must leave no receive behind. A notice sent before it waits for it among UCX's messages.
  if (comm->nranks > 1) {
    s = comm->transport->post_recv_any(kNoticeTag, &comm->notice_in, sizeof comm->notice_in,
                                       &comm->notice_recv);
    if (!s.ok()) return s.prefix("listening for notices: ");
  }
  DDL_INFO("communicator ready: rank %d of %d, transport %s%s, timeout %d ms, chunk %zu B",
           comm->rank, comm->nranks, comm->routes->name(), comm->cma ? " and single-copy" : "",
           config.timeout_ms, config.chunk_bytes);
  *out = comm.release();
  register_comm(*out);
  return Status::Ok();
}

void send_failure_notice(ddl_comm *comm, const Status &why) {
  FailureNotice &notice = comm->notice_out;
  notice = FailureNotice();
  notice.rank = comm->rank;
  notice.seq = static_cast<uint32_t>(comm->calls);
  notice.code = static_cast<int32_t>(why.code());
  notice.length = static_cast<uint32_t>(std::min(why.message().size(), sizeof notice.text));
  std::memcpy(notice.text, why.message().data(), notice.length);
  comm->notice_sends.assign(comm->nranks, TransferRequest());
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank || !comm->transport->peer_status(peer).ok()) continue;
    Status s = comm->transport->post_send(peer, notice.seq, kNoticeTag, &notice, sizeof notice,
                                          &comm->notice_sends[peer]);
    if (!s.ok())
      DDL_WARN("could not tell rank %d about the mismatch: %s", peer, s.message().c_str());
  }
  comm->transport->progress();
}

void detach_requests(ddl_comm *comm) {
  if (!comm->transport) return;
  comm->transport->cancel(&comm->notice_recv);
  for (TransferRequest &send : comm->notice_sends) comm->transport->cancel(&send);
  cancel_agreement(comm);
}

void destroy_comm(ddl_comm *comm) {
  hand_over_parked(comm);  // parked sends and receives end on the progress thread, as queued ones
  comm->progress.reset();
  device::destroy_device_state(comm);
  detach_requests(comm);
  if (comm->transport) comm->transport->close(kCloseTimeoutMs);
  if (comm->rail) comm->rail->close(kCloseTimeoutMs);
  comm->routes.reset();
  comm->rail.reset();
  comm->shm.reset();
  comm->transport.reset();
  comm->bootstrap.reset();
  delete comm;
}

}  // namespace ddl

#include "lib/transports/ucx/ucx_connections.h"

#include <ucs/config/global_opts.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/common/process_liveness.h"

namespace ddl {
namespace {

constexpr long long kPidCheckIntervalNs = 20 * 1000 * 1000;
// After an endpoint to a same-host peer could not be created: how long to watch its pid for
// a death in progress (a killed process loses its descriptors, which UCX maps, a little
// before it becomes a zombie).
constexpr int kDeathWatchMs = 500;

// UCX settings that ddl changes unless the user set them (UCX_<name> in the environment).
// The goal: a SIGKILL at any moment (a chaos test, an OOM kill, a scheduler's preemption)
// leaves no file in /dev/shm and no SysV segment behind; such leftovers live until reboot and
// fill /dev/shm job after job.
//  - TLS: everything but UCX's shared-memory transports, posix and sysv. posix shm_open()s
//    /dev/shm/ucx_shm_posix_<id>, writes the whole segment (to check the space exists), and
//    only then shm_unlink()s it (UCX_POSIX_USE_PROC_LINK=y, the default; with =n the name
//    stays for the segment's whole life). sysv shmget()s, shmat()s, then marks the segment
//    IPC_RMID. UCX makes such segments when a worker starts and again whenever its pools grow.
//    A kill inside those windows leaks: killing a 1-rank ddl_perf at a random moment of its
//    first 100 ms left a /dev/shm file 25 times in 400 (UCX 1.13, this 2-core machine);
//    without posix and sysv, 0 in 400. Same-host peers then talk over tcp (loopback) and cma
//    (process_vm_readv, for large messages), or whatever fabric UCX finds; same-host data
//    goes through ddl's own shared-memory transport (lib/transports/shm), whose memfd segment
//    never has a name, so this costs nothing on the default path. ddlrun -n 2 ddl_perf on
//    this 2-core machine when idle (float32 sum, out-of-place time, 3 alternating runs each),
//    these settings vs UCX's defaults. With ddl's shm (the default): 8 B 0.8-1.2 vs 0.6-1.2 us,
//    4 KiB 2.0-3.4 vs 1.9-2.6 us, 256 KiB 45-67 vs 45-51 us, 2 MiB 495-548 vs 517-540 us,
//    16 MiB 7.6-7.8 vs 7.7-7.9 ms: the same within the noise. Over UCX alone (DDL_SHM=0, the
//    fallback when ddl's shm cannot be set up) tcp is slower than UCX's shm for small
//    messages: 8 B 13-20 vs 2.6-3.2 us, 32 KiB 47-66 vs 15-18 us, 256 KiB 92-122 vs 53-65 us,
//    2 MiB 593-754 vs 543-588 us, 16 MiB 8.6-9.3 vs 7.7-8.2 ms. UCX_TLS=^posix (sysv kept)
//    is as fast as the defaults there (8 B 2.7-3.0 us, 32 KiB 18-19 us; 0 segments leaked in
//    400 kills), at the price of sysv's short shmget..IPC_RMID window.
//  - RCACHE_ENABLE=no: UCP's own registration cache. Creating it installs UCM's memory hooks,
//    which test themselves with a 4 KiB SysV segment (shmget, shmat, shmdt, IPC_RMID): two
//    more leak windows in every ucp_init (2 segments leaked in 400 kills above, 0 in 400
//    without the cache). tcp and cma register no memory; the verbs transports keep their own
//    cache (UCX_IB_RCACHE_*). What remains is the same self-test once when libucs is loaded,
//    before any ddl code runs: only UCX_MEM_EVENTS=no in the environment removes it, at the
//    cost of the verbs transports' cache, so ddl leaves that to the user.
struct UcxDefault {
  const char *name;  // without the UCX_ prefix
  const char *value;
};
constexpr UcxDefault kUcxDefaults[] = {{"TLS", "^posix,sysv"}, {"RCACHE_ENABLE", "no"}};

// On hosts without RDMA devices UCX carries data between hosts over TCP, where its rendezvous
// protocol (the default from a few KB up) costs a request-to-send and its reply before every
// large message's data may flow, with nothing to gain: TCP copies through socket buffers
// either way. ddl's schedules send 64 KB chunks, so eager sending up to 128 KB lets each
// chunk stream at once. Measured on emulated hosts at 1 Gbit/s, 64 MB allreduce, alternating
// runs (load ~4): 2 hosts x 2 ranks 585 -> 575 ms (median of 8), 2 hosts x 2 ranks x 2 rails
// (DDL_RAILS) 350 -> 320 ms (median of 6). Hosts with RDMA devices keep UCX's threshold, whose
// rendezvous moves large messages by zero-copy RDMA.
//
// And TCP sends copy (bcopy), never zero-copy: UCX 1.13 aborts the process
// (uct_iface.h:884, "Assertion `comp->count > 0' failed", in uct_tcp_iface_progress) when a
// peer's endpoint times out while zero-copy fragments of an eager message to it are still
// outstanding: UCP completes the failed request, then tcp completes its fragments again. A
// killed host hit it in 7 of 30 runs of tests/multiproc/test_host_failure, 0 of 30 with
// copies. TCP copies into the socket either way.
constexpr UcxDefault kTcpOnlyDefaults[] = {{"RNDV_THRESH", "128k"}, {"ZCOPY_THRESH", "inf"}};

bool host_has_rdma_devices() {
  DIR *dir = opendir("/sys/class/infiniband");
  if (!dir) return false;
  bool any = false;
  while (dirent *entry = readdir(dir))
    if (entry->d_name[0] != '.') any = true;
  closedir(dir);
  return any;
}

// This host's name in messages about its ranks: what tells emulated hosts apart, else the
// machine's name.
std::string host_label() {
  std::string id = env_string("DDL_HOST_ID");
  if (!id.empty()) return id.substr(0, 64);
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// worker_address() is three length-prefixed fields: the worker's address, the heartbeat
// worker's (empty when off) and the host label.
void append_field(std::string *out, const std::string &field) {
  const uint32_t length = static_cast<uint32_t>(field.size());
  out->append(reinterpret_cast<const char *>(&length), sizeof length);
  out->append(field);
}

bool take_field(const std::string &in, size_t *at, std::string *field) {
  uint32_t length = 0;
  if (in.size() - *at < sizeof length) return false;
  std::memcpy(&length, in.data() + *at, sizeof length);
  *at += sizeof length;
  if (in.size() - *at < length) return false;
  field->assign(in, *at, length);
  *at += length;
  return true;
}

Status ucx_error(ucs_status_t status, const char *what) {
  return Status(DDL_ERR_SYSTEM, strprintf("%s: UCX error: %s", what, ucs_status_string(status)));
}

void request_init(void *request) {
  static_cast<UcxRequest *>(request)->detached = false;
}

void on_endpoint_error_cb(void *arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto *ctx = static_cast<UcxConnections::ErrorContext *>(arg);
  ctx->connections->on_endpoint_error(ctx->index, status);
}

// Closing endpoints at the end of a job, a flush towards a peer that has already closed its
// side fails, and UCX logs each such failure as an ERROR on stdout ("error during flush:
// Endpoint timeout"), in the middle of the program's output. close() handles those failures
// itself (it closes by force and warns when a flush is still running at the deadline), so
// UCX's own logging is lowered to fatal errors for its length, unless the user asked for a
// log level with UCX_LOG_LEVEL.
class QuietUcx {
 public:
  QuietUcx() : saved_(ucs_global_opts.log_component.log_level) {
    const char *user = std::getenv("UCX_LOG_LEVEL");
    if (!user || !*user) ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
  }
  ~QuietUcx() { ucs_global_opts.log_component.log_level = saved_; }
  QuietUcx(const QuietUcx &) = delete;
  QuietUcx &operator=(const QuietUcx &) = delete;

 private:
  const ucs_log_level_t saved_;
};

}  // namespace

int shown_rank(const std::vector<int> &rank_of, int index) {
  return rank_of.empty() ? index : rank_of[index];
}

Status UcxConnections::create(int index, int count, const NetworkOptions &options,
                              std::shared_ptr<UcxConnections> *out) {
  std::shared_ptr<UcxConnections> t(new UcxConnections(index, count));
  ucp_config_t *config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return ucx_error(st, "reading the UCX configuration (UCX_* variables)");
  std::vector<UcxDefault> defaults(std::begin(kUcxDefaults), std::end(kUcxDefaults));
  if (!host_has_rdma_devices())
    defaults.insert(defaults.end(), std::begin(kTcpOnlyDefaults), std::end(kTcpOnlyDefaults));
  for (const UcxDefault &setting : defaults) {
    const char *user = std::getenv(strprintf("UCX_%s", setting.name).c_str());
    if (user && *user) continue;
    st = ucp_config_modify(config, setting.name, setting.value);
    if (st != UCS_OK) {
      ucp_config_release(config);
      return ucx_error(st, strprintf("setting UCX_%s=%s", setting.name, setting.value).c_str());
    }
  }
  if (!options.net_device.empty()) {
    st = ucp_config_modify(config, "NET_DEVICES", options.net_device.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return ucx_error(st,
                       strprintf("setting UCX_NET_DEVICES=%s", options.net_device.c_str()).c_str());
    }
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                      UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.request_size = sizeof(UcxRequest);
  params.request_init = request_init;
  params.estimated_num_eps = static_cast<size_t>(count);
  // The heartbeat worker is driven by a thread of its own.
  const int timeout_ms = count > 1 && options.heartbeats ? peer_timeout_ms() : 0;
  params.mt_workers_shared = timeout_ms > 0 ? 1 : 0;
  st = ucp_init(&params, config, &t->context_);
  ucp_config_release(config);
  if (st != UCS_OK) return ucx_error(st, "ucp_init");

  ucp_worker_params_t wparams = {};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time: the communicator's (after a shrink, the shrunk communicator's).
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(t->context_, &wparams, &t->worker_);
  if (st != UCS_OK) return ucx_error(st, "ucp_worker_create");

  ucp_address_t *address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(t->worker_, &address, &length);
  if (st != UCS_OK) return ucx_error(st, "ucp_worker_get_address");
  std::string main_address(reinterpret_cast<const char *>(address), length);
  ucp_worker_release_address(t->worker_, address);
  if (timeout_ms > 0) {
    Status s = UcxHeartbeat::create(t->context_, index, count, timeout_ms, &t->heartbeat_);
    if (!s.ok()) return s;
  }
  append_field(&t->address_, main_address);
  append_field(&t->address_, t->heartbeat_ ? t->heartbeat_->address() : std::string());
  append_field(&t->address_, host_label());
  *out = std::move(t);
  return Status::Ok();
}

Status UcxConnections::connect(const std::vector<PeerAddress> &peers) {
  DDL_CHECK(static_cast<int>(peers.size()) == count_);
  peers_ = peers;
  last_pid_check_ns_.assign(count_, 0);
  pid_dead_.assign(count_, false);
  endpoints_.assign(count_, nullptr);
  peer_errors_.assign(count_, UCS_OK);
  error_contexts_.clear();
  error_contexts_.reserve(count_);
  for (int peer = 0; peer < count_; ++peer) error_contexts_.push_back(ErrorContext{this, peer});
  std::vector<std::string> addresses(count_), beats(count_);
  hosts_.assign(count_, std::string());
  for (int peer = 0; peer < count_; ++peer) {
    if (!peers[peer].wanted) continue;
    size_t at = 0;
    if (!take_field(peers[peer].address, &at, &addresses[peer]) ||
        !take_field(peers[peer].address, &at, &beats[peer]) ||
        !take_field(peers[peer].address, &at, &hosts_[peer]) || addresses[peer].empty())
      return Status(DDL_ERR_SYSTEM, strprintf("rank %d sent a malformed transport address (%zu B)",
                                              peer, peers[peer].address.size()));
    // Heartbeats go between hosts, and only to peers that beat too (DDL_PEER_TIMEOUT_MS=0 on
    // either side turns them off for the pair): a peer that does not beat is never silent.
    if (peers[peer].same_host || !heartbeat_) beats[peer].clear();
  }
  for (int peer = 0; peer < count_; ++peer) {
    if (peer == index_ || !peers[peer].wanted) continue;
    ucp_ep_params_t ep = {};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t *>(addresses[peer].data());
    ep.err_mode = peers[peer].same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_endpoint_error_cb;
    ep.err_handler.arg = &error_contexts_[peer];
    ucs_status_t st = ucp_ep_create(worker_, &ep, &endpoints_[peer]);
    if (st != UCS_OK) {
      endpoints_[peer] = nullptr;
      DDL_RETURN_IF_ERROR(endpoint_failed(peer, st));
    }
  }
  if (heartbeat_) {
    Status s = heartbeat_->start(beats, hosts_);
    if (!s.ok()) return s.prefix("starting heartbeats: ");
  }
  return Status::Ok();
}

Status UcxConnections::send_failed(int peer, ucs_status_t status, const std::vector<int> &rank_of) {
  switch (status) {
    // The connection broke (over tcp, a dead peer's socket resets or times out): the peer's
    // failure. Remembered, so that peer_status says so from now on.
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED: {
      on_endpoint_error(peer, status);
      if (peers_[peer].same_host && !pid_dead_[peer]) last_pid_check_ns_[peer] = 0;  // look now
      Status dead = peer_status(peer, rank_of);
      return Status(DDL_ERR_REMOTE, strprintf("sending to rank %d: %s", shown_rank(rank_of, peer),
                                              dead.message().c_str()));
    }
    default:
      return ucx_error(status, strprintf("sending to rank %d", shown_rank(rank_of, peer)).c_str());
  }
}

Status UcxConnections::endpoint_failed(int peer, ucs_status_t status) {
  const PeerAddress &p = peers_[peer];
  if (p.same_host) {
    // A dead peer is the usual cause: UCX cannot map its shared memory any more ("Shared
    // memory error"). Not an error of this rank's: the peer is recorded as dead (peer_status
    // says so, post_send refuses it) and init goes on to its next exchange through the
    // bootstrap, which fails on every rank naming the dead one, instead of this rank
    // leaving alone and the others blaming it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDeathWatchMs);
    for (;;) {
      if (!process_is_alive(p.pid)) {
        pid_dead_[peer] = true;
        DDL_WARN(
            "rank %d: the UCX endpoint to rank %d (pid %d on this host) failed (UCX error: "
            "%s): rank %d has died",
            index_, peer, static_cast<int>(p.pid), ucs_status_string(status), peer);
        return Status::Ok();
      }
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Status(DDL_ERR_SYSTEM,
                  strprintf("creating the UCX endpoint to rank %d (pid %d on this host, alive): "
                            "UCX error: %s",
                            peer, static_cast<int>(p.pid), ucs_status_string(status)));
  }
  return Status(DDL_ERR_SYSTEM,
                strprintf("creating the UCX endpoint to rank %d (on another host): UCX error: %s",
                          peer, ucs_status_string(status)));
}

void UcxConnections::on_endpoint_error(int peer, ucs_status_t status) {
  if (peer_errors_[peer] == UCS_OK) {
    DDL_INFO("UCX endpoint to rank %d failed: %s", peer, ucs_status_string(status));
    peer_errors_[peer] = status;
  }
}

Status UcxConnections::peer_status(int peer, const std::vector<int> &rank_of) const {
  if (peer < 0 || peer >= static_cast<int>(peer_errors_.size())) return Status::Ok();
  if (peers_[peer].same_host) {
    const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
    if (!pid_dead_[peer] && now - last_pid_check_ns_[peer] >= kPidCheckIntervalNs) {
      last_pid_check_ns_[peer] = now;
      pid_dead_[peer] = !process_is_alive(peers_[peer].pid);
    }
    if (pid_dead_[peer])
      return Status(DDL_ERR_REMOTE,
                    strprintf("rank %d (pid %d on this host) has died", shown_rank(rank_of, peer),
                              static_cast<int>(peers_[peer].pid)));
  }
  if (heartbeat_ && heartbeat_->lost(peer))
    return Status(DDL_ERR_REMOTE, heartbeat_->describe(peer, rank_of));
  if (peer_errors_[peer] == UCS_OK) return Status::Ok();
  return Status(
      DDL_ERR_REMOTE,
      strprintf("connection to rank %d (host %s) lost: UCX error: %s%s", shown_rank(rank_of, peer),
                hosts_[peer].c_str(), ucs_status_string(peer_errors_[peer]),
                heartbeat_ ? heartbeat_->others_lost(peer, rank_of).c_str() : ""));
}

bool UcxConnections::healthy(int index) const {
  if (index == index_ || !peers_[index].wanted) return true;  // no endpoint by design
  return endpoints_[index] && peer_status(index, {}).ok();
}

void UcxConnections::close(int timeout_ms) {
  if (!worker_) return;
  QuietUcx quiet;
  const int n = static_cast<int>(endpoints_.size());
  std::vector<bool> alive(n, false);
  for (int peer = 0; peer < n; ++peer) alive[peer] = endpoints_[peer] && peer_status(peer, {}).ok();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // Flush what this rank sent to live peers, with the deadline; then close, by force where
  // the flush did not finish: a flush towards a host whose link is down never ends, and a
  // flushing close cannot be cancelled (a cancelled one left the endpoint's requests behind
  // and UCX 1.13 aborted in ucp_worker_destroy: "Assertion ... proto_reqs ... failed").
  std::vector<ucs_status_ptr_t> flushes(n, nullptr);
  std::vector<bool> flushed(n, false);
  for (int peer = 0; peer < n; ++peer) {
    if (!alive[peer]) continue;
    ucp_request_param_t param = {};
    ucs_status_ptr_t p = ucp_ep_flush_nbx(endpoints_[peer], &param);
    if (p == nullptr)
      flushed[peer] = true;
    else if (!UCS_PTR_IS_ERR(p))
      flushes[peer] = p;
  }
  for (int peer = 0; peer < n; ++peer) {
    if (!flushes[peer]) continue;
    // The heartbeats still run: a peer they find unreachable meanwhile (this rank may have
    // failed on another rank's notice, before its own heartbeats spoke) ends the wait.
    while (ucp_request_check_status(flushes[peer]) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline && !(heartbeat_ && heartbeat_->lost(peer)))
      ucp_worker_progress(worker_);
    const ucs_status_t status = ucp_request_check_status(flushes[peer]);
    flushed[peer] = status == UCS_OK;
    // A flush that failed (the peer closed its side first, as it may at the end of a job)
    // has nothing left to deliver; only one still running at the deadline is news.
    if (status == UCS_INPROGRESS && !(heartbeat_ && heartbeat_->lost(peer)))
      DDL_WARN(
          "flushing what was sent to rank %d (host %s) did not finish within %d ms; closing "
          "by force",
          peer, hosts_[peer].c_str(), timeout_ms);
  }
  // Goodbye: from now on this rank's silence is no failure to its peers.
  heartbeat_.reset();
  const std::vector<void *> closing = close_endpoints_of(&endpoints_, flushed);
  // What is left closes quickly: flushed endpoints, or forced ones (which also complete the
  // unfinished flushes, with UCS_ERR_CANCELED).
  const auto close_deadline =
      std::max(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(1000));
  for (ucs_status_ptr_t p : closing) {
    while (ucp_request_check_status(p) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < close_deadline)
      ucp_worker_progress(worker_);
    if (ucp_request_check_status(p) == UCS_INPROGRESS)
      DDL_WARN("closing a UCX endpoint did not finish; leaving it to UCX");
    ucp_request_free(p);
  }
  for (ucs_status_ptr_t p : flushes)
    if (p) ucp_request_free(p);
  // A forced close completes the endpoint's outstanding requests (those of a failed
  // collective, detached by cancel()) from deferred callbacks: run them now, so that every
  // request is back in UCX's pool before the worker is destroyed.
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (ucp_worker_progress(worker_) != 0 && std::chrono::steady_clock::now() < drain_until) {
  }
}

UcxConnections::~UcxConnections() {
  close(1000);
  heartbeat_.reset();  // its worker belongs to the context
  // Messages nobody received wait in the worker: those of the communicators shrunk away
  // (an agreement's messages to ranks that had decided, a failed call's) and of this one's
  // end. UCX warns of each at destroy; they are expected, and dropped.
  QuietUcx quiet;
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

}  // namespace ddl

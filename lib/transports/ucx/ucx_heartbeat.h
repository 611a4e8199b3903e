// Heartbeats between ranks on different hosts, so that a host whose link went down is an
// error within seconds instead of a wait for the whole DDL_TIMEOUT_MS.
//
// Why ddl's own and not UCX's keepalive: over tcp, UCX's keepalive (UCX_KEEPALIVE_INTERVAL,
// UCX_TCP_KEEPIDLE/KEEPINTVL/KEEPCNT) is the kernel's SO_KEEPALIVE, which only probes an idle
// connection. A link that goes down in the middle of an allreduce leaves unacknowledged data
// in the socket, the kernel retransmits for tcp_retries2 (~15 min), and no probe is ever sent:
// measured with both set to 1 s, a 64 MB allreduce across two namespaces whose link went down
// was not noticed in 40 s. RST-based detection (a killed process) already works without it.
//
// Each rank runs one thread with a UCX worker of its own that sends a small beat to every
// watched peer every interval and records when it last heard each one. The thread runs
// whatever the application does, so a peer busy outside ddl (computing, writing a
// checkpoint) still beats; only a peer that cannot be reached, or whose process is frozen,
// falls silent. A peer silent for the limit (DDL_PEER_TIMEOUT_MS) is declared lost, and the
// collective waiting for it fails naming it (UcxTransport::peer_status).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/status.h"

namespace ddl {

// Closes every endpoint (and nulls it), forcing those not `flushed`: a flush towards an
// unreachable host never ends, and a flushing close cannot be cancelled. Returns the close
// requests still running, for the caller to progress and free.
std::vector<void *> close_endpoints_of(std::vector<ucp_ep_h> *endpoints,
                                       const std::vector<bool> &flushed);

class UcxHeartbeat {
 public:
  // Creates the worker on `context`, which must have been made with mt_workers_shared (this
  // worker is driven by its own thread). timeout_ms > 0.
  static Status create(ucp_context_h context, int rank, int nranks, int timeout_ms,
                       std::unique_ptr<UcxHeartbeat> *out);
  // Says goodbye to every watched peer (so that its silence from now on is no failure),
  // stops the thread and closes the endpoints.
  ~UcxHeartbeat();

  const std::string &address() const { return address_; }
  // Watches the peers with a non-empty address (their heartbeat workers) and starts the
  // thread. hosts[peer] names each peer's host in messages.
  Status start(const std::vector<std::string> &addresses, const std::vector<std::string> &hosts);
  // Whether `peer` was declared lost (silent past the limit, or its connection broke).
  bool lost(int peer) const {
    return peer >= 0 && peer < nranks_ && lost_[peer].load(std::memory_order_relaxed) != 0;
  }
  // "rank 2 (host h1) unreachable: nothing heard for 5.0 s" and the other lost peers, each
  // named by its rank in the asking communicator (shown_rank in ucx_connections.h).
  std::string describe(int peer, const std::vector<int> &rank_of) const;
  // "; also unreachable: rank 3 (host h1), ..." for the lost peers other than `peer`; "" if none.
  std::string others_lost(int peer, const std::vector<int> &rank_of) const;

 private:
  UcxHeartbeat(int rank, int nranks, int timeout_ms);
  void run();
  void post_receive();
  void received(ucs_status_t status);
  void send_all(uint32_t kind);
  void check_silence(std::chrono::steady_clock::time_point now);
  void close_endpoints();
  void drain_unexpected();
  static void on_receive(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                         void *user_data);
  static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);

  struct Beat {
    uint32_t rank;
    uint32_t kind;  // kBeat or kGoodbye
  };
  struct ErrorContext {
    UcxHeartbeat *self;
    int peer;
  };

  const int rank_, nranks_, timeout_ms_;
  const std::chrono::milliseconds interval_;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  std::vector<ucp_ep_h> endpoints_;  // null for peers not watched
  std::vector<ErrorContext> error_contexts_;
  std::vector<std::string> hosts_;
  // Written by the thread only.
  std::vector<std::chrono::steady_clock::time_point> last_heard_;
  std::vector<bool> said_goodbye_;
  std::vector<ucs_status_t> endpoint_errors_;
  // Read by the communicator's thread: 0 while fine; else the silence in ms when declared
  // (-1: the connection broke).
  std::unique_ptr<std::atomic<int>[]> lost_;
  Beat beat_ = {}, goodbye_ = {}, in_ = {};
  void *receive_ = nullptr;  // the posted receive
  bool receive_done_ = false;
  ucs_status_t receive_status_ = UCS_OK;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace ddl

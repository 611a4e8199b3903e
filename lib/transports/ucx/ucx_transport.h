// UCX (ucp tag matching) transport: whatever UCX selects on the machine — shared memory and
// cma within a host, verbs on InfiniBand/RoCE, TCP otherwise. One ucp context and worker
// per communicator; an endpoint per peer with peer-failure handling, so that a dead peer
// becomes an error instead of a hang.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "lib/transports/network_transport.h"
#include "lib/transports/ucx/ucx_heartbeat.h"

namespace ddl {

// The kind "ucx" of make_network_transport (network_transport.h). options.net_device becomes
// UCX_NET_DEVICES of this transport alone.
class UcxTransport : public NetworkTransport {
 public:
  // Creates the context and worker. Step 1 of 2: then exchange worker_address() with the
  // peers (through the bootstrap) and call connect().
  static Status create(int rank, int nranks, std::unique_ptr<UcxTransport> *out,
                       const NetworkOptions &options = NetworkOptions());
  ~UcxTransport() override;

  // What to send to every peer: this worker's address, the heartbeat worker's (when
  // DDL_PEER_TIMEOUT_MS is not 0) and this host's name for messages.
  const std::string &worker_address() const override { return address_; }
  // Creates an endpoint to every peer. A same-host peer that has died gets none and is
  // marked dead (peer_status), so that the error names it and comes from every rank's next
  // exchange; any other failure is DDL_ERR_SYSTEM naming the peer.
  // Peers on other hosts get UCX's peer-failure handling
  // (it breaks the connection of a dead peer); on this host that mode would disable UCX's
  // shared-memory transports (UCX 1.13), so there a dead peer is noticed by its pid instead.
  // Peers on other hosts are also watched by heartbeats (ucx_heartbeat.h): one silent for
  // DDL_PEER_TIMEOUT_MS is unreachable.
  Status connect(const std::vector<PeerAddress> &peers) override;
  // Closes endpoints, flushing what was sent, waiting at most timeout_ms; endpoints that
  // could not flush by then (an unreachable peer) are closed by force.
  void close(int timeout_ms) override;

  const char *name() const override { return "ucx"; }
  Status post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                   TransferRequest *req) override;

 private:
  Status post_tag_recv(uint64_t tag, uint64_t mask, void *buf, size_t bytes, TransferRequest *req,
                       const char *from);
  // An endpoint that could not be created: OK when the peer has died (it is marked dead,
  // and the caller's next exchange fails naming it); else the error naming the peer.
  Status endpoint_failed(int peer, ucs_status_t status);
  // A send that failed at once: a broken connection is the peer's failure (DDL_ERR_REMOTE
  // naming it, its death when its pid says so), anything else this rank's.
  Status send_failed(int peer, ucs_status_t status);

 public:
  Status post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) override;
  bool probe(int peer, uint32_t seq, uint32_t tag) override;
  bool progress() override;
  void cancel(TransferRequest *req) override;
  Status peer_status(int peer) const override;
  bool peer_death_final(int peer) const override {
    return peer >= 0 && peer < static_cast<int>(pid_dead_.size()) && pid_dead_[peer];
  }

  // Called by UCX when an endpoint fails (err_handler.arg points at one of these).
  void on_endpoint_error(int peer, ucs_status_t status);
  struct ErrorContext {
    UcxTransport *transport;
    int peer;
  };

 private:
  UcxTransport(int rank, int nranks) : rank_(rank), nranks_(nranks) {}

  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  std::unique_ptr<UcxHeartbeat> heartbeat_;  // null when off or before create() made it
  std::vector<std::string> hosts_;           // each peer's host, for messages
  std::vector<ucp_ep_h> endpoints_;
  std::vector<ucs_status_t> peer_errors_;  // UCS_OK while alive
  std::vector<PeerAddress> peers_;
  uint8_t empty_sink_ = 0;  // lands the placeholder byte of empty messages
  // peer_status() looks at local pids at most this often: /proc reads are not free.
  mutable std::vector<long long> last_pid_check_ns_;
  mutable std::vector<bool> pid_dead_;
  std::vector<ErrorContext> error_contexts_;  // stable addresses for UCX's err_handler.arg
};

}  // namespace ddl

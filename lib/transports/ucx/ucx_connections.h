// What a communicator's UCX transport is made of beyond its message tags: the ucp context
// and worker, the heartbeats, one endpoint per peer and what is known of each peer's health,
// indexed by the peer's rank in the communicator that made them ("index"). A shrink hands
// them to the shrunk communicator (UcxTransport::subset), so that the survivors keep the
// connections they have instead of making new ones in the middle of a recovery.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "lib/transports/network_transport.h"
#include "lib/transports/ucx/ucx_heartbeat.h"

namespace ddl {

// Our state inside each UCX request (ucp_params.request_size). The owner travels as the
// callback's user_data, because UCX may run the callback before the posting call returns;
// `detached` (set by cancel) tells the callback that the owner is gone. UCX recycles
// requests without re-running request_init, so the callback resets the flag.
struct UcxRequest {
  bool detached;
};

// A peer's rank in a communicator, given its index: rank_of[index], or the index itself when
// rank_of is empty (the communicator that made the connections). -1: not a member.
int shown_rank(const std::vector<int> &rank_of, int index);

class UcxConnections {
 public:
  // Creates the context and worker (and the heartbeats' worker when options.heartbeats and
  // DDL_PEER_TIMEOUT_MS allow) for the peer of index `index` among `count`.
  static Status create(int index, int count, const NetworkOptions &options,
                       std::shared_ptr<UcxConnections> *out);
  // Closes what is still open (a second of flushing) and frees the worker and context.
  ~UcxConnections();
  UcxConnections(const UcxConnections &) = delete;
  UcxConnections &operator=(const UcxConnections &) = delete;

  // The worker's address, the heartbeats' and this host's name (what connect() reads).
  const std::string &address() const { return address_; }
  // An endpoint to every wanted peer; see UcxTransport::connect.
  Status connect(const std::vector<PeerAddress> &peers);
  // Flushes what was sent to live peers (at most timeout_ms), says goodbye, closes.
  void close(int timeout_ms);

  int index() const { return index_; }
  int count() const { return count_; }
  ucp_worker_h worker() const { return worker_; }
  ucp_ep_h endpoint(int index) const { return endpoints_[index]; }
  // OK while the peer of `index` looks alive; else why not. Messages name each peer by its
  // rank in the asking communicator (shown_rank; -1: not a member, left out of lists).
  Status peer_status(int index, const std::vector<int> &rank_of) const;
  bool death_final(int index) const { return pid_dead_[index]; }
  // A send to `index` that failed at once: the peer's failure when its connection broke.
  Status send_failed(int index, ucs_status_t status, const std::vector<int> &rank_of);
  // Called by UCX when an endpoint fails.
  void on_endpoint_error(int index, ucs_status_t status);
  // Whether `index` is this rank, a peer this transport does not carry (a rail's), or one
  // whose endpoint exists and looks alive.
  bool healthy(int index) const;

  // Lands the placeholder byte of empty messages (written by several receives; never read).
  uint8_t *empty_sink() { return &empty_sink_; }

  struct ErrorContext {
    UcxConnections *connections;
    int index;
  };

 private:
  UcxConnections(int index, int count) : index_(index), count_(count) {}
  // An endpoint that could not be created: OK when the peer has died (it is marked dead);
  // else the error naming the peer.
  Status endpoint_failed(int index, ucs_status_t status);

  const int index_, count_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  std::unique_ptr<UcxHeartbeat> heartbeat_;  // null when off
  std::vector<std::string> hosts_;           // each peer's host, for messages
  std::vector<ucp_ep_h> endpoints_;
  std::vector<ucs_status_t> peer_errors_;  // UCS_OK while alive
  std::vector<PeerAddress> peers_;
  uint8_t empty_sink_ = 0;
  // peer_status() looks at local pids at most this often: /proc reads are not free.
  mutable std::vector<long long> last_pid_check_ns_;
  mutable std::vector<bool> pid_dead_;
  std::vector<ErrorContext> error_contexts_;  // stable addresses for UCX's err_handler.arg
};

}  // namespace ddl

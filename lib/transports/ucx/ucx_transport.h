// UCX (ucp tag matching) transport: whatever UCX selects on the machine — shared memory and
// cma within a host, verbs on InfiniBand/RoCE, TCP otherwise. One ucp context and worker
// per communicator (ucx_connections.h), with an endpoint per peer and peer-failure handling,
// so that a dead peer becomes an error instead of a hang; a shrink's communicator takes over
// its parent's (subset).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/transports/network_transport.h"
#include "lib/transports/ucx/ucx_connections.h"

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
  const std::string &worker_address() const override;
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
  // could not flush by then (an unreachable peer) are closed by force. Not while a shrunk
  // communicator's transport holds them too: the last one closes them.
  void close(int timeout_ms) override;

  // A transport over these connections (the same worker, endpoints and heartbeats) for a
  // communicator of `members` (this communicator's ranks, ascending), where this rank is
  // `rank`; its messages carry the next generation of tags, so that nothing sent on this one
  // (a late message of a failed call, a notice) ever matches a receive of the new one.
  // Refused (DDL_ERR_UNSUPPORTED) when a member's connection is not healthy, or after
  // kGenerations - 1 subsets in a row.
  bool can_subset(const std::vector<int> &members) const override;
  Status subset(int rank, const std::vector<int> &members,
                std::unique_ptr<NetworkTransport> *out) override;
  // Gives the connections up to the subset made of them (see NetworkTransport::retire).
  void retire(const std::string &why) override;

  const char *name() const override { return "ucx"; }
  Status post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) override;
  bool probe(int peer, uint32_t seq, uint32_t tag) override;
  bool progress() override;
  void cancel(TransferRequest *req) override;
  Status peer_status(int peer) const override;
  bool peer_death_final(int peer) const override;

  // Generations of tags: a communicator and the shrunk ones made of it in a row, after
  // which a shrink builds its transport afresh.
  static constexpr uint32_t kGenerations = 16;

 private:
  UcxTransport(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  Status post_tag_recv(uint64_t tag, uint64_t mask, void *buf, size_t bytes, TransferRequest *req,
                       const char *from);
  Status retired_error() const;
  // A rank here: its index in connections_.
  int index_of(int peer) const { return index_of_.empty() ? peer : index_of_[peer]; }

  int rank_;
  int nranks_;
  uint32_t generation_ = 0;
  std::shared_ptr<UcxConnections> connections_;  // null once retired
  // By rank here: the peer's index in connections_; and by index: its rank here (-1: not a
  // member). Both empty while they are the same (the communicator that made them).
  std::vector<int> index_of_, rank_of_;
  std::string retired_;  // why this transport no longer carries anything
};

}  // namespace ddl

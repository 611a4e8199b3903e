// One Transport over up to three: ddl's shared memory for the peers on this host that it
// serves, this rank's rail (a UCX transport bound to its own NIC) for the peers on other
// hosts on the same rail, UCX for everyone else. Notices (receive-from-any) always travel
// over the main UCX transport, which reaches every rank.
#pragma once

#include <vector>

#include "lib/transports/transport.h"

namespace ddl {

class RoutedTransport : public Transport {
 public:
  // `local` may be null (no host-local transport); via_local[peer] says who it serves.
  RoutedTransport(Transport *network, Transport *local, std::vector<bool> via_local);
  // Sends the messages of every peer with via_rail[peer] over `rail` (never a local peer).
  void add_rail(Transport *rail, std::vector<bool> via_rail);

  const char *name() const override { return local_ ? "shm+ucx" : network_->name(); }
  Status post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                   TransferRequest *req) override;
  Status post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) override;
  bool probe(int peer, uint32_t seq, uint32_t tag) override;
  bool reduces_on_receive(int peer) const override;
  Status post_recv_reduce(int peer, uint32_t seq, uint32_t tag, void *dst, const void *src,
                          size_t bytes, const ReduceSpec &spec, TransferRequest *req) override;
  bool carries_stamps(int peer) const override;
  void begin_call(uint32_t seq, const CallStamp &stamp) override;
  bool stamp_mismatch(int *peer, CallStamp *theirs) const override;
  bool stamp_seen(int peer) const override;
  bool progress() override;
  bool progress_all() override;
  void cancel(TransferRequest *req) override;
  Status peer_status(int peer) const override;
  bool peer_death_final(int peer) const override;
  // Where each peer's messages go (notices aside), for callers that post to them directly;
  // requests posted so are cancelled on the transport they were posted to, not here.
  Carriers carriers() const;

 private:
  enum Route : uint8_t { kNetwork = 1, kLocal = 2, kRail = 3 };
  bool local_peer(int peer, uint32_t tag) const;
  // Where a message to or from peer goes, and the transport for a route (anything but kLocal
  // and kRail, such as a request never posted, is the network's).
  Route route_of(int peer, uint32_t tag) const;
  Transport *transport_of(Route route) const;

  Transport *network_;
  Transport *local_;
  Transport *rail_ = nullptr;
  std::vector<bool> via_local_;
  std::vector<bool> via_rail_;
  bool all_local_ = false;  // every peer is served locally: UCX only carries notices
  unsigned polls_ = 0;
};

}  // namespace ddl

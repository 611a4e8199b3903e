#include "lib/transports/routed_transport.h"

#include <algorithm>

#include "lib/common/tags.h"

namespace ddl {
namespace {

// With every peer on shared memory, UCX only ever carries failure notices, which the
// executor looks for every few hundred idle polls: polling UCX on every call would only add
// its fixed cost to the latency of small collectives.
constexpr unsigned kNetworkPollEvery = 1024;

}  // namespace

RoutedTransport::RoutedTransport(Transport *network, Transport *local, std::vector<bool> via_local)
    : network_(network), local_(local), via_local_(std::move(via_local)) {
  if (!local_) via_local_.assign(via_local_.size(), false);
  // A rank's own slot is false; "all local" means every other rank.
  size_t served = static_cast<size_t>(std::count(via_local_.begin(), via_local_.end(), true));
  all_local_ = local_ && served + 1 >= via_local_.size();
}

void RoutedTransport::add_rail(Transport *rail, std::vector<bool> via_rail) {
  rail_ = rail;
  via_rail_ = std::move(via_rail);
}

bool RoutedTransport::local_peer(int peer, uint32_t tag) const {
  return tag != kNoticeTag && peer >= 0 && static_cast<size_t>(peer) < via_local_.size() &&
         via_local_[peer];
}

RoutedTransport::Route RoutedTransport::route_of(int peer, uint32_t tag) const {
  if (local_peer(peer, tag)) return kLocal;
  if (rail_ && tag != kNoticeTag && peer >= 0 && static_cast<size_t>(peer) < via_rail_.size() &&
      via_rail_[peer])
    return kRail;
  return kNetwork;
}

Transport *RoutedTransport::transport_of(Route route) const {
  return route == kLocal ? local_ : route == kRail ? rail_ : network_;
}

Status RoutedTransport::post_send(int peer, uint32_t seq, uint32_t tag, const void *buf,
                                  size_t bytes, TransferRequest *req) {
  const Route route = route_of(peer, tag);
  // Set after the transport's post: it starts by resetting *req.
  Status s = transport_of(route)->post_send(peer, seq, tag, buf, bytes, req);
  req->route = route;
  return s;
}

Status RoutedTransport::post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                                  TransferRequest *req) {
  const Route route = route_of(peer, tag);
  Status s = transport_of(route)->post_recv(peer, seq, tag, buf, bytes, req);
  req->route = route;
  return s;
}

Status RoutedTransport::post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) {
  req->route = kNetwork;
  return network_->post_recv_any(tag, buf, bytes, req);
}

bool RoutedTransport::probe(int peer, uint32_t seq, uint32_t tag) {
  return transport_of(route_of(peer, tag))->probe(peer, seq, tag);
}

bool RoutedTransport::reduces_on_receive(int peer) const {
  return local_peer(peer, 0) && local_->reduces_on_receive(peer);
}

Status RoutedTransport::post_recv_reduce(int peer, uint32_t seq, uint32_t tag, void *dst,
                                         const void *src, size_t bytes, const ReduceSpec &spec,
                                         TransferRequest *req) {
  const Route route = route_of(peer, tag);
  Status s = transport_of(route)->post_recv_reduce(peer, seq, tag, dst, src, bytes, spec, req);
  req->route = route;
  return s;
}

bool RoutedTransport::carries_stamps(int peer) const {
  return local_peer(peer, 0) && local_->carries_stamps(peer);
}

void RoutedTransport::begin_call(uint32_t seq, const CallStamp &stamp) {
  if (local_) local_->begin_call(seq, stamp);
}

bool RoutedTransport::stamp_mismatch(int *peer, CallStamp *theirs) const {
  return local_ && local_->stamp_mismatch(peer, theirs);
}

bool RoutedTransport::stamp_seen(int peer) const {
  return local_peer(peer, 0) && local_->stamp_seen(peer);
}

bool RoutedTransport::progress() {
  bool any = local_ && local_->progress();
  if (rail_) any = rail_->progress() || any;
  if (!all_local_ || ++polls_ % kNetworkPollEvery == 0) any = network_->progress() || any;
  return any;
}

bool RoutedTransport::progress_all() {
  bool any = local_ && local_->progress();
  if (rail_) any = rail_->progress() || any;
  return network_->progress() || any;
}

void RoutedTransport::cancel(TransferRequest *req) {
  transport_of(static_cast<Route>(req->route))->cancel(req);  // unset (0): the network
}

bool RoutedTransport::peer_death_final(int peer) const {
  return transport_of(route_of(peer, 0))->peer_death_final(peer);
}

Carriers RoutedTransport::carriers() const {
  Carriers c;
  for (size_t peer = 0; peer < via_local_.size(); ++peer) {
    Transport *t = transport_of(route_of(static_cast<int>(peer), 0));
    c.by_peer.push_back(t);
    if (std::find(c.distinct.begin(), c.distinct.end(), t) == c.distinct.end())
      c.distinct.push_back(t);
  }
  return c;
}

Status RoutedTransport::peer_status(int peer) const {
  const Route route = route_of(peer, 0);
  if (route == kLocal) return local_->peer_status(peer);
  // A rail peer is also watched by the main transport's heartbeats.
  if (route == kRail) DDL_RETURN_IF_ERROR(rail_->peer_status(peer));
  return network_->peer_status(peer);
}

}  // namespace ddl

// Transports that reach other processes by address, made by kind (make_network_transport):
// each process creates one, publishes its worker_address() through the bootstrap, then
// connects to every peer's. lib/core holds them through this interface alone, so that it
// neither sees UCX's headers nor names a concrete transport; UCX is the one kind so far.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "lib/transports/transport.h"

namespace ddl {

// How long a peer may be silent (remote: no heartbeat) before it counts as lost:
// DDL_PEER_TIMEOUT_MS, default 5000; 0: never.
int peer_timeout_ms();

struct NetworkOptions {
  // The one NIC this transport drives ("eth1", "mlx5_1:1"), as a rail's does. Empty: the
  // kind's own choice (for UCX, the UCX_* variables).
  std::string net_device;
  // Heartbeats to peers on other hosts (DDL_PEER_TIMEOUT_MS). One transport per
  // communicator watches them; a rail's transport leaves it to the main one.
  bool heartbeats = true;
};

// What connect() needs to know of each peer.
struct PeerAddress {
  std::string address;     // its worker_address()
  bool same_host = false;  // shares this host's memory
  pid_t pid = 0;           // its process id, meaningful when same_host
  bool wanted = true;      // false: no endpoint (this transport never carries its messages)
};

class NetworkTransport : public Transport {
 public:
  // What to send to every peer before connect().
  virtual const std::string &worker_address() const = 0;
  // Creates an endpoint to every wanted peer (peers[r] is rank r's). A same-host peer that
  // has died is marked dead (peer_status) rather than failing the call.
  virtual Status connect(const std::vector<PeerAddress> &peers) = 0;
  // Closes the endpoints, flushing what was sent, waiting at most timeout_ms.
  virtual void close(int timeout_ms) = 0;

  // A shrink keeps the survivors' connections: subset() makes a transport over this one's
  // for a communicator of `members` (this one's ranks, ascending; this rank is `rank`
  // there), whose messages never match this one's. can_subset says whether it can (every
  // member's connection healthy); kinds that cannot keep connections say no.
  virtual bool can_subset(const std::vector<int> & /*members*/) const { return false; }
  virtual Status subset(int /*rank*/, const std::vector<int> & /*members*/,
                        std::unique_ptr<NetworkTransport> * /*out*/) {
    return unsupported("the %s transport cannot hand its connections on", name());
  }
  // After a subset was made and took over: this transport carries nothing from now on
  // (every call fails with `why`) and closes nothing, for the subset's communicator may
  // drive the connections from another thread. The caller detaches its requests first.
  virtual void retire(const std::string & /*why*/) {}
};

// A transport of the given kind ("ucx") for `rank` of `nranks`, not yet connected; an
// unknown kind is DDL_ERR_INVALID_ARGUMENT naming the known ones.
Status make_network_transport(const std::string &kind, int rank, int nranks,
                              const NetworkOptions &options,
                              std::unique_ptr<NetworkTransport> *out);

}  // namespace ddl

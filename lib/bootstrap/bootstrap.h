// The bootstrap: a small TCP rendezvous served by rank 0, through which ranks exchange a few
// blobs (their UCX worker addresses) before talking over the real transports. It knows nothing
// of transports, as gloo keeps gloo/rendezvous/ apart from gloo/transport/.
//
// Topology: a star, and beyond 64 ranks a tree of relays (relay.h). Rank 0 listens; every
// other rank opens one connection to it, presents a hello (magic, protocol version, job token,
// rank, nranks; see wire.h) and gets an ack. An exchange sends each rank's blob to rank 0,
// which answers with all of them: every rank directly in a star; its children in a tree, which
// pass the answer on to theirs (each relay listens for its children, which connect to it as to
// rank 0). It is not meant to carry data.
//
// Never hangs: every wait is a poll() against a deadline (timeout_ms for the connect phase and
// for each exchange). Strangers (wrong token, garbage, stalls) are dropped with a warning while
// rank 0 keeps waiting for the real ranks. When rank 0 gives up (a rank died or never came), it
// tells every other rank why before closing, so each survivor's error names the culprit.
//
// Not thread-safe: one thread drives a Bootstrap's collectives at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/bootstrap/launch_env.h"
#include "lib/bootstrap/relay.h"
#include "lib/common/status.h"

namespace ddl {
namespace bootstrap {
class Deadline;  // socket.h
}  // namespace bootstrap

struct BootstrapOptions {
  int rank = -1, nranks = -1;
  // host:port (IPv4, hostnames, [v6]:port) of rank 0's rendezvous. Rank 0 binds that port on
  // every interface (only on loopback when the host is a loopback address), so that a hostname
  // that resolves differently on rank 0 (Debian's 127.0.1.1) still works for the others.
  // Port 0 is invalid unless rendezvous_file is used.
  std::string root_addr;
  // Used when root_addr is empty (or has port 0, then its host is the one bound): rank 0 binds
  // an ephemeral port on listen_host (an address, host name or interface name), else on
  // 127.0.0.1 when all_local, else on a non-loopback address of its hostname (or of its first
  // up interface, docker bridges skipped), writes "host:port[ token]" there atomically
  // (tmp + rename) and removes it once every rank has arrived (at the latest at destruction);
  // the others poll the file until the deadline, reading it again on every attempt (it may be
  // a stale file from an earlier job).
  std::string rendezvous_file;
  // Used when root_addr is empty: rank 0's address goes through the launcher's PMIx server
  // (pmix.h), the same way as to a rendezvous file but reaching every host. rendezvous_file,
  // when set, is the fallback where libpmix cannot be loaded (every rank decides alike).
  bool pmix = false;
  std::string job_token;  // shared secret (at most 256 bytes); "" is a valid (empty) token
  // Rank 0 makes a fresh random token (token.h) and publishes it with its address (through
  // PMIx, or in the rendezvous file, created 0600); the others use the published one and
  // ignore job_token. Without either path it has no effect. A rank 0 that serves with an empty
  // token warns once per process that its rendezvous is open.
  bool fresh_token = false;
  // Deadline for the whole connect phase and for each later exchange. Ranks other than 0 wait
  // for an exchange a little longer (10%, at least 0.2 s, at most 5 s more), so that rank 0,
  // which sees every rank, times out first and tells them which ranks are missing.
  int timeout_ms = 300000;
  bool all_local = false;   // every rank runs on this host (rendezvous-file mode only)
  std::string listen_host;  // rendezvous-file mode: the address rank 0 binds and publishes
  // Rank 0: a socket already listening at root_addr (from open_group_listener), which the
  // bootstrap serves on and closes. A new group's rank 0 binds it before announcing its port.
  int listen_fd = -1;
  // The rendezvous at root_addr was open before its address was handed out (a new group's,
  // BootstrapOptions::listen_fd on its rank 0): a refused connection means rank 0 closed it,
  // having given up, and ends the wait at once instead of at the deadline.
  bool root_listening = false;
  // How many ranks each rank passes rank 0's answers on to (relay.h): 0 takes
  // DDL_BOOTSTRAP_FANOUT, else a star up to 64 ranks and 8 beyond. Every rank of a job must
  // use the same (a rank that differs fails its first exchange as a mismatched collective).
  int relay_fanout = 0;
  // Called about every kWatchMs while a wait for other ranks lasts (connecting, accepting,
  // each exchange): an error ends the wait with it. A shrink watches the members of its new
  // communicator through the old one's transport, so that one dying is no wait for the deadline.
  std::function<Status()> watch;
  // Test hook (ranks other than 0): called with rank 0's address once it is known (from
  // root_addr, PMIx or the file; again if the file changes) and before connecting to it, so
  // that a test can play a stranger against the real rendezvous.
  std::function<void(const std::string &root_addr)> on_root_found;
};

// Options for a job described by the launcher (launch_info_from_env).
BootstrapOptions bootstrap_options_from(const LaunchInfo &info, int timeout_ms);

class Bootstrap {
 public:
  // Largest blob one rank may contribute to allgather.
  static constexpr size_t kMaxBlobBytes = 64 * 1024;
  // How often BootstrapOptions::watch is called while waiting.
  static constexpr int kWatchMs = 20;

  // Rank 0 listens and accepts nranks-1 peers; the others connect, retrying until the deadline
  // (rank 0 may start later). nranks == 1 touches no network.
  static Status create(const BootstrapOptions &opts, std::unique_ptr<Bootstrap> *out);
  ~Bootstrap();  // closes every socket (and removes the rendezvous file if still there)
  Bootstrap(const Bootstrap &) = delete;
  Bootstrap &operator=(const Bootstrap &) = delete;

  // Every rank contributes `mine` (at most 64 KiB); `all` gets every rank's blob in rank
  // order. Collective. A peer that disconnects is DDL_ERR_REMOTE naming it; after such a
  // failure every later call returns the same error. Messages number exchanges ("allgather
  // #3"), counting allgathers and barriers together.
  Status allgather(const std::string &mine, std::vector<std::string> *all);
  Status barrier();
  // *all: whether every rank passed true (an allgather of one flag each). Collective; how
  // ranks that decide a way of their own take the same one.
  Status all_true(bool mine, bool *all);

  // Socket fds of the connections to rank 0 (rank 0: one per peer, in rank order; others:
  // one; the relays' are not among them). Owned by the Bootstrap: do not close or read them.
  std::vector<int> fds() const;

  int rank() const { return opts_.rank; }
  int nranks() const { return opts_.nranks; }
  // host:port of rank 0's rendezvous as this rank used it ("" when nranks == 1).
  const std::string &root_address() const { return root_addr_; }

  // Opens a listening socket on an ephemeral port of the address this rank's bootstrap
  // connections use (which its peers can reach), for the rendezvous of a new group of ranks
  // (ddl_comm_split); *served is its host:port. Pass the fd as BootstrapOptions::listen_fd.
  Status open_group_listener(int *fd, std::string *served) const;

 private:
  explicit Bootstrap(const BootstrapOptions &opts);
  // The relays' setup (relay.cc): every relay listens, rank 0 tells each rank where its
  // parent listens, children connect to their parents.
  Status connect_relays(const bootstrap::Deadline &deadline);
  // A relayed rank waiting for its parent's answer: Ok once fd has something to read (or the
  // deadline passed), or rank 0's word if rank 0 gave up meanwhile (relay.cc).
  Status wait_for_parent(int fd, uint32_t op, uint32_t seq,
                         const bootstrap::Deadline &deadline) const;
  // Rank 0's reason for giving up when it sent one to this relayed rank within wait_ms (its
  // error, as the rank returns it); Ok when there is none (relay.cc).
  Status root_word(uint32_t op, uint32_t seq, int wait_ms) const;
  // Rank 0's answer, as received, to this rank's children (relay.cc).
  Status forward(const std::string &answer, uint32_t op, uint32_t seq,
                 const bootstrap::Deadline &deadline) const;
  Status exchange(uint32_t op, const std::string &mine, std::vector<std::string> *all);
  Status root_exchange(uint32_t op, uint32_t seq, const std::string &mine,
                       std::vector<std::string> *all);
  Status peer_exchange(uint32_t op, uint32_t seq, const std::string &mine,
                       std::vector<std::string> *all);
  // Waits, calling opts_.watch, until fd has something to read or the deadline passed.
  Status wait_readable(int fd, const bootstrap::Deadline &deadline) const;
  // Rank 0 after a failure: best-effort error frame to every peer, then shut the sockets so
  // that no peer waits for its deadline.
  void abort_peers(const std::string &why);
  // Any other rank after a failure: shuts its connections, so that rank 0 sees it leave and
  // tells the others (rather than them timing out) and the ranks it relays to learn at once
  // that no answer will come through it (relay.cc).
  void leave();

  BootstrapOptions opts_;  // job_token: the one presented (a fresh one as published)
  bootstrap::RelayTree tree_;
  std::vector<int> peers_;     // rank 0: fd of rank r at [r] ([0] = -1); others: [0] = root
  int parent_fd_ = -1;         // a rank whose parent is not rank 0: the connection to it
  std::vector<int> children_;  // the connections to this rank's children (rank 0: none here)
  int listen_fd_ = -1;
  std::string root_addr_;
  std::string published_file_;  // rendezvous file this rank wrote (rank 0)
  std::string published_addr_;
  uint32_t seq_ = 0;
  Status failed_;
};

}  // namespace ddl

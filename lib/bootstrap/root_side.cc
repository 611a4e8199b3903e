// Rank 0's side of the connect phase: the listener, the published address, and the accept
// loop that admits exactly the ranks of this job while strangers come and go.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"

namespace ddl {
namespace bootstrap {
namespace {

// A connection that may stall in its hello this long before it is dropped (strangers must not
// hold file descriptors for the whole connect phase), and how many may wait at once.
constexpr int kHelloStallMs = 10000;
constexpr size_t kMaxPending = 256;

Status bind_and_listen(const struct sockaddr *addr, socklen_t len, bool dual_stack, int rank,
                       int *out) {
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return system_error(errno, "bootstrap: rank %d: socket()", rank);
  int one = 1, zero = 0;
  // SO_REUSEADDR: a restarted job can rebind the port while the last one's sockets sit in
  // TIME_WAIT. It does not let two live listeners share a port on Linux.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (dual_stack) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(fd, addr, len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd);
    std::string where = sockaddr_string(addr, len);
    if (err == EADDRINUSE)
      return system_error(err,
                          "bootstrap: rank %d: listening on %s (another process holds the port; "
                          "torchrun's store holds MASTER_PORT; pick another with DDL_ROOT)",
                          rank, where.c_str());
    return system_error(err, "bootstrap: rank %d: listening on %s", rank, where.c_str());
  }
  *out = fd;
  return Status::Ok();
}

// Binds host:port (host resolved; the first address that binds wins).
Status listen_on(const std::string &host, int port, int rank, int *fd) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo *res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    return system_error(EINVAL, "bootstrap: rank %d: resolving '%s': %s", rank, host.c_str(),
                        gai_strerror(rc));
  Status st = internal_error("bootstrap: rank %d: '%s' has no address", rank, host.c_str());
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    st = bind_and_listen(ai->ai_addr, ai->ai_addrlen, false, rank, fd);
    if (st.ok()) break;
  }
  freeaddrinfo(res);
  return st;
}

// Every interface: IPv6 dual-stack, or IPv4 where the kernel has no IPv6.
Status listen_wildcard(int port, int rank, int *fd) {
  struct sockaddr_in6 a6;
  std::memset(&a6, 0, sizeof a6);
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_any;
  a6.sin6_port = htons(static_cast<uint16_t>(port));
  Status st = bind_and_listen(reinterpret_cast<struct sockaddr *>(&a6), sizeof a6, true, rank, fd);
  if (st.ok()) return st;
  struct sockaddr_in a4;
  std::memset(&a4, 0, sizeof a4);
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(static_cast<uint16_t>(port));
  Status st4 =
      bind_and_listen(reinterpret_cast<struct sockaddr *>(&a4), sizeof a4, false, rank, fd);
  return st4.ok() ? st4 : st;
}

bool usable_address(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<const struct sockaddr_in *>(sa)->sin_addr.s_addr);
    return (a >> 24) != 127 && a != 0;
  }
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr &a = reinterpret_cast<const struct sockaddr_in6 *>(sa)->sin6_addr;
    return !IN6_IS_ADDR_LOOPBACK(&a) && !IN6_IS_ADDR_LINKLOCAL(&a) && !IN6_IS_ADDR_UNSPECIFIED(&a);
  }
  return false;
}

std::string numeric_host(const struct sockaddr *sa, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

// An address of this host that other hosts can reach: the hostname's, unless it resolves to
// loopback only (Debian maps it to 127.0.1.1), then the first up, non-loopback interface's
// (IPv4 first; docker bridges skipped, as NCCL does). 127.0.0.1 when there is none.
std::string auto_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) {
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &res) == 0) {
      std::string found;
      for (struct addrinfo *ai = res; ai && found.empty(); ai = ai->ai_next)
        if (usable_address(ai->ai_addr)) found = numeric_host(ai->ai_addr, ai->ai_addrlen);
      freeaddrinfo(res);
      if (!found.empty()) return found;
    }
  }
  struct ifaddrs *ifs = nullptr;
  std::string found;
  if (getifaddrs(&ifs) == 0) {
    for (int family : {AF_INET, AF_INET6}) {
      for (struct ifaddrs *i = ifs; i && found.empty(); i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family) continue;
        if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        if (std::strncmp(i->ifa_name, "docker", 6) == 0) continue;
        if (!usable_address(i->ifa_addr)) continue;
        socklen_t len =
            family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        found = numeric_host(i->ifa_addr, len);
      }
    }
    freeifaddrs(ifs);
  }
  if (!found.empty()) return found;
  DDL_WARN(
      "bootstrap: no non-loopback address found; publishing 127.0.0.1 (ranks on other "
      "hosts will not reach it)");
  return "127.0.0.1";
}

// The address of interface `name`: its first IPv4 address, else its first IPv6 one that is
// not link-local; "" when it has none.
std::string interface_address(const std::string &name) {
  struct ifaddrs *ifs = nullptr;
  std::string found;
  if (getifaddrs(&ifs) != 0) return found;
  for (int family : {AF_INET, AF_INET6}) {
    for (struct ifaddrs *i = ifs; i && found.empty(); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != family || name != i->ifa_name) continue;
      socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
      if (family == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<struct sockaddr_in6 *>(i->ifa_addr)->sin6_addr))
        continue;
      found = numeric_host(i->ifa_addr, len);
    }
  }
  freeifaddrs(ifs);
  return found;
}

}  // namespace

Status open_listener(const BootstrapOptions &opts, int *fd, std::string *served) {
  std::string host;
  int port = 0;
  if (!opts.root_addr.empty()) DDL_RETURN_IF_ERROR(parse_host_port(opts.root_addr, &host, &port));
  if (port != 0) {
    // A fixed, announced port: bind it on every interface, because the name in root_addr may
    // resolve here to an address the others cannot reach. Loopback stays loopback.
    if (is_loopback_host(host)) {
      DDL_RETURN_IF_ERROR(listen_on(host, port, opts.rank, fd));
    } else {
      DDL_RETURN_IF_ERROR(listen_wildcard(port, opts.rank, fd));
    }
    *served = join_host_port(host, port);
    return Status::Ok();
  }
  // Rendezvous file or PMIx: an ephemeral port on one concrete address, which is what gets
  // published.
  if (host.empty() && !opts.listen_host.empty()) {
    host = opts.listen_host;
    // An interface name (DDL_ROOT_HOST=eth1) stands for its address.
    if (if_nametoindex(host.c_str()) != 0) {
      std::string addr = interface_address(host);
      if (addr.empty())
        return invalid_argument("bootstrap: rank %d: interface %s has no IP address", opts.rank,
                                host.c_str());
      host = addr;
    }
  }
  if (host.empty()) host = opts.all_local ? "127.0.0.1" : auto_host();
  DDL_RETURN_IF_ERROR(listen_on(host, 0, opts.rank, fd));
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(*fd, reinterpret_cast<struct sockaddr *>(&ss), &len) != 0) {
    int err = errno;
    close_fd(fd);
    return system_error(err, "bootstrap: rank %d: getsockname", opts.rank);
  }
  *served = sockaddr_string(reinterpret_cast<struct sockaddr *>(&ss), len);
  return Status::Ok();
}

std::string published_text(const std::string &addr, const std::string &token) {
  return token.empty() ? addr : addr + " " + token;
}

bool parse_published(const std::string &text, std::string *addr, std::string *token,
                     bool *has_token, std::string *why) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  std::string body = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  const size_t space = body.find(' ');
  std::string where = body.substr(0, space);
  std::string secret = space == std::string::npos ? "" : body.substr(space + 1);
  std::string host;
  int port = 0;
  if (!parse_host_port(where, &host, &port).ok() || port == 0) {
    *why = "does not hold a host:port";
    return false;
  }
  if (space != std::string::npos && (secret.empty() || secret.size() > wire::kMaxToken ||
                                     secret.find_first_of(" \t\r\n") != std::string::npos)) {
    *why = "holds a host:port followed by something that is not a job token";
    return false;
  }
  *addr = join_host_port(host, port);
  *token = secret;
  *has_token = space != std::string::npos;
  return true;
}

Status publish_address(const std::string &file, const std::string &text) {
  std::string tmp = strprintf("%s.tmp.%d", file.c_str(), static_cast<int>(getpid()));
  // O_EXCL | O_NOFOLLOW: in a shared directory (/tmp) a file or link planted under our name
  // must not receive the secret. A leftover of our own (a crashed earlier run with this pid)
  // is removed once and the creation retried.
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), flags, 0600);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0)
    fd = ::open(tmp.c_str(), flags, 0600);
  if (fd < 0) return system_error(errno, "bootstrap: rank 0: creating %s", tmp.c_str());
  std::string line = text + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    ::unlink(tmp.c_str());
    return system_error(n < 0 ? err : EIO, "bootstrap: rank 0: writing %s", tmp.c_str());
  }
  // rename() is atomic: readers see the old file, no file, or the whole new line.
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return system_error(err, "bootstrap: rank 0: renaming %s to %s", tmp.c_str(), file.c_str());
  }
  return Status::Ok();
}

void unpublish_address(const std::string &file, const std::string &text) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[1400];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n > 0 && std::string(buf, static_cast<size_t>(n)) == text + "\n") ::unlink(file.c_str());
}

int WaitNotice::cap(int wait_ms) const {
  int64_t until = next_ms_ - deadline_.elapsed_ms();
  if (until <= 0) return 0;
  return until < wait_ms ? static_cast<int>(until) : wait_ms;
}

bool WaitNotice::due() {
  int64_t now = deadline_.elapsed_ms();
  if (now < next_ms_ || deadline_.passed()) return false;
  while (next_ms_ <= now) next_ms_ += kEveryMs;
  return true;
}

std::string WaitNotice::times() const {
  int64_t elapsed = deadline_.elapsed_ms();
  int64_t left = deadline_.remaining_ms();
  return strprintf("%.1f s so far, %.1f s left of the %.0f s timeout",
                   static_cast<double>(elapsed) / 1000.0, static_cast<double>(left) / 1000.0,
                   static_cast<double>(elapsed + left) / 1000.0);
}

std::string rank_list(const std::vector<int> &ranks) {
  std::string out;
  size_t items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == 32) {
      out += strprintf(" and %zu more", ranks.size() - i);
      break;
    }
    if (!out.empty()) out += ", ";
    out += j == i ? strprintf("%d", ranks[i]) : strprintf("%d-%d", ranks[i], ranks[j]);
    ++items;
    i = j + 1;
  }
  return out;
}

namespace {

// A connection that has not finished its hello yet.
struct Pending {
  int fd = -1;
  std::string from;
  // What has arrived of the hello. Never more than wire::check_hello asked for: the token
  // length is validated before the token is read.
  std::string hello;
  std::chrono::steady_clock::time_point stall_at;
};

enum class Step { kMore, kAccept, kDrop };

// Why the last stranger was dropped, for the timeout message.
struct Drops {
  int count = 0;
  std::string last;
};

class Acceptor {
 public:
  Acceptor(const BootstrapOptions &opts, const std::vector<bool> &expected, std::vector<int> *peers)
      : opts_(opts), expected_(expected), peers_(*peers) {}

  // Reads what has arrived of p's hello; on kAccept *rank is set, on kDrop *why.
  Step advance(Pending &p, int *rank, std::string *why) {
    IoStatus io;
    wire::HelloCheck check;
    for (;;) {
      check = wire::check_hello(reinterpret_cast<const uint8_t *>(p.hello.data()), p.hello.size(),
                                opts_.job_token, opts_.nranks);
      if (check.verdict == wire::HelloCheck::kDrop) return drop(why, check.why);
      if (check.verdict == wire::HelloCheck::kAck) break;
      const size_t have = p.hello.size();
      p.hello.resize(check.need);
      ssize_t n = recv_some(p.fd, &p.hello[have], check.need - have, &io);
      p.hello.resize(have + static_cast<size_t>(n > 0 ? n : 0));
      if (n < 0)
        return drop(why, (have < wire::kHelloBytes ? "closed before its hello: "
                                                   : "closed during its hello: ") +
                             io.describe());
      if (n == 0) return Step::kMore;
    }
    const uint32_t r = check.rank;
    uint16_t code = check.code;
    *why = check.why;
    if (code == wire::kAccepted && !expected_[r]) {
      code = wire::kBadRank;
      *why = strprintf("claims rank %u, which connects to another rank than %d", r, opts_.rank);
    } else if (code == wire::kAccepted && peers_[r] >= 0) {
      code = wire::kDuplicateRank;
      *why = strprintf("claims rank %u, which already arrived from %s", r,
                       peer_string(peers_[r]).c_str());
    }
    // The ack: tiny, on a fresh socket, so it fits the send buffer; the short deadline only
    // guards against a peer that vanished.
    std::string ack = wire::encode_ack(code, opts_.nranks);
    IoStatus sent = send_all(p.fd, ack.data(), ack.size(), Deadline(1000));
    if (code != wire::kAccepted) return Step::kDrop;
    if (!sent.ok()) return drop(why, "vanished before its ack: " + sent.describe());
    *rank = static_cast<int>(r);
    return Step::kAccept;
  }

 private:
  static Step drop(std::string *why, const std::string &text) {
    *why = text;
    return Step::kDrop;
  }
  const BootstrapOptions &opts_;
  const std::vector<bool> &expected_;
  std::vector<int> &peers_;
};

void drop_pending(Pending &p, const std::string &why, int rank, Drops *drops) {
  DDL_WARN("bootstrap: rank %d: dropped connection from %s: %s", rank, p.from.c_str(), why.c_str());
  drops->count++;
  drops->last = p.from + ": " + why;
  close_fd(&p.fd);
}

}  // namespace

Status accept_peers(int listen_fd, const BootstrapOptions &opts, const Deadline &deadline,
                    const std::vector<int> &expected, std::vector<int> *peers,
                    const std::string &served) {
  peers->assign(static_cast<size_t>(opts.nranks), -1);
  std::vector<bool> wanted(static_cast<size_t>(opts.nranks), false);
  for (int r : expected) wanted[static_cast<size_t>(r)] = true;
  int missing = static_cast<int>(expected.size());
  const int me = opts.rank;
  // Rank 0 counts itself among the arrived (1 of 2: only rank 0 is in); a relay its children.
  const int total = missing + (me == 0 ? 1 : 0);
  std::vector<Pending> pending;
  std::vector<struct pollfd> pfds;
  Acceptor acceptor(opts, wanted, peers);
  Drops drops;
  Status result;
  bool accept_warned = false;
  WaitNotice notice(deadline);
  auto absent_ranks = [&] {
    std::vector<int> absent;
    for (int r : expected)
      if ((*peers)[r] < 0) absent.push_back(r);
    return absent;
  };
  // Reads what p has sent of its hello; once it is complete, admits or drops it (p.fd = -1).
  auto settle = [&](Pending &p) {
    int rank = -1;
    std::string why;
    const Step step = acceptor.advance(p, &rank, &why);
    if (step == Step::kDrop) {
      drop_pending(p, why, me, &drops);
    } else if (step == Step::kAccept) {
      DDL_DEBUG("bootstrap: rank %d: rank %d arrived from %s", me, rank, p.from.c_str());
      (*peers)[rank] = p.fd;
      p.fd = -1;
      --missing;
    }
  };
  auto dropped = [&] {
    return drops.count ? strprintf("; %d other connection%s dropped, last %s", drops.count,
                                   drops.count == 1 ? " was" : "s were", drops.last.c_str())
                       : std::string();
  };
  while (missing > 0) {
    if (notice.due()) {
      std::vector<int> absent = absent_ranks();
      std::string where = served.empty() ? std::string() : " to " + served;
      const bool one = absent.size() == 1;
      // A relay's children are in the job already (rank 0 let them in): what keeps them
      // away is their death, or a network that lets them reach rank 0 but not this rank.
      const std::string usually =
          me == 0 ? strprintf(
                        "%s not started or failed before init, %s looking for rank 0 "
                        "elsewhere (DDL_ROOT, or MASTER_ADDR and MASTER_PORT, must name "
                        "this host and port), or a firewall drops the connection",
                        one ? "that rank was" : "those ranks were", one ? "it is" : "they are")
                  : strprintf("%s died, or %s reach rank 0 but not this host (a firewall)",
                              one ? "it" : "they", one ? "it can" : "they can");
      DDL_WARN(
          "bootstrap: rank %d: still waiting for rank%s %s to connect%s (%d of %d arrived; "
          "%s)%s. Usually %s",
          me, one ? "" : "s", rank_list(absent).c_str(), where.c_str(), total - missing, total,
          notice.times().c_str(), dropped().c_str(), usually.c_str());
    }
    int wait = notice.cap(deadline.remaining_ms());
    if (opts.watch) {
      result = opts.watch();
      if (!result.ok()) break;
      wait = std::min(wait, Bootstrap::kWatchMs);
    }
    if (deadline.passed()) {
      std::vector<int> absent = absent_ranks();
      std::string more = dropped();
      result = timeout_error(
          "bootstrap: rank %d: timed out after %lld ms waiting for rank%s %s to connect (%d of "
          "%d arrived)%s",
          me, static_cast<long long>(deadline.elapsed_ms()), absent.size() == 1 ? "" : "s",
          rank_list(absent).c_str(), total - missing, total, more.c_str());
      break;
    }
    auto now = std::chrono::steady_clock::now();
    for (const Pending &p : pending) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(p.stall_at - now).count();
      wait = std::max(0, std::min<int>(wait, static_cast<int>(ms) + 1));
    }
    pfds.assign(1, pollfd{listen_fd, POLLIN, 0});
    for (const Pending &p : pending) pfds.push_back(pollfd{p.fd, POLLIN, 0});
    int n = ::poll(pfds.data(), pfds.size(), wait);
    if (n < 0 && errno != EINTR) {
      result = system_error(errno, "bootstrap: rank %d: poll", me);
      break;
    }
    // Hellos first (for the connections that were polled), then stalls, then new arrivals.
    for (size_t i = 0; n > 0 && i + 1 < pfds.size(); ++i)
      if (pfds[i + 1].revents != 0) settle(pending[i]);
    now = std::chrono::steady_clock::now();
    for (Pending &p : pending)
      if (p.fd >= 0 && now >= p.stall_at) drop_pending(p, "stalled in its hello", me, &drops);
    pending.erase(
        std::remove_if(pending.begin(), pending.end(), [](const Pending &p) { return p.fd < 0; }),
        pending.end());
    if (n > 0 && (pfds[0].revents & POLLIN)) {
      for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = ::accept4(listen_fd, reinterpret_cast<struct sockaddr *>(&ss), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if ((errno == EMFILE || errno == ENFILE) && !pending.empty()) {
            // Out of descriptors: the oldest unfinished hello makes room.
            drop_pending(pending.front(), "dropped to free a file descriptor", me, &drops);
            pending.erase(pending.begin());
            continue;
          }
          if (errno != EAGAIN && errno != EWOULDBLOCK) {
            // Out of descriptors with nothing to drop, or a stranger error: warn once, and
            // pause so that a listener that stays readable does not spin the CPU.
            if (!accept_warned)
              DDL_WARN("bootstrap: rank %d: accept: %s (errno %d)", me, strerror(errno), errno);
            accept_warned = true;
            ::poll(nullptr, 0, 10);
          }
          break;
        }
        set_nodelay(fd);
        Pending p;
        p.fd = fd;
        p.from = sockaddr_string(reinterpret_cast<struct sockaddr *>(&ss), len);
        p.stall_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHelloStallMs);
        // A rank sends its hello as it connects: read at once, a thousand ranks arriving
        // together never queue as unfinished hellos (and get dropped for strangers' sake).
        settle(p);
        if (p.fd < 0) continue;
        if (pending.size() >= kMaxPending) {
          drop_pending(pending.front(), "too many unfinished hellos", me, &drops);
          pending.erase(pending.begin());
        }
        pending.push_back(std::move(p));
      }
    }
  }
  for (Pending &p : pending) close_fd(&p.fd);
  return result;
}

}  // namespace bootstrap
}  // namespace ddl

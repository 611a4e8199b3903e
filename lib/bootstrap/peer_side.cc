// The other ranks' side of the connect phase: find rank 0 (its address, or the rendezvous file
// it publishes), connect, present the hello and wait for the ack, retrying until the deadline
// because rank 0 may start later than we do.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"

namespace ddl {
namespace bootstrap {
namespace {

// One connection attempt (connect + hello + ack) may take this long before we retry: a stale
// rendezvous file can point at a port that some other program now holds and never answers on.
constexpr int kAttemptMs = 5000;
// Pause between attempts, doubling from the first to the last.
constexpr int kFirstBackoffMs = 10;
constexpr int kMaxBackoffMs = 250;
constexpr int kRefusedBackoffMs = 1000;

// Reads "host:port[ token]" from the rendezvous file. False with *why when it is not (yet)
// usable. A file of another user is ignored: in a shared directory anybody could plant one
// that sends this rank, with its token, elsewhere.
bool read_rendezvous_file(const std::string &file, std::string *addr, std::string *token,
                          bool *has_token, std::string *why) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int err = errno;
    *why = err == ENOENT ? strprintf(
                               "rendezvous file %s does not exist yet (rank 0 has not "
                               "published its address)",
                               file.c_str())
                         : strprintf("opening rendezvous file %s: %s (errno %d)", file.c_str(),
                                     strerror(err), err);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_uid != geteuid()) {
    ::close(fd);
    *why =
        strprintf("rendezvous file %s belongs to uid %u, not to this user (uid %u): ignored",
                  file.c_str(), static_cast<unsigned>(st.st_uid), static_cast<unsigned>(geteuid()));
    return false;
  }
  char buf[1400];
  ssize_t n = ::read(fd, buf, sizeof buf);
  int err = errno;
  ::close(fd);
  if (n < 0) {
    *why = strprintf("reading rendezvous file %s: %s (errno %d)", file.c_str(), strerror(err), err);
    return false;
  }
  std::string bad;
  if (static_cast<size_t>(n) == sizeof buf ||
      !parse_published(std::string(buf, static_cast<size_t>(n)), addr, token, has_token, &bad)) {
    *why = strprintf("rendezvous file %s %s", file.c_str(),
                     bad.empty() ? "is too long to be a rendezvous address" : bad.c_str());
    return false;
  }
  return true;
}

enum class Attempt { kConnected, kRetry, kFatal };

class Connector {
 public:
  // name: who listens at the addresses tried ("root", "rank 5 (this rank's relay)");
  // listened_first: it listened before its address was handed out, so a refused connection
  // means it is gone (as BootstrapOptions::root_listening says of rank 0).
  Connector(const BootstrapOptions &opts, const Deadline &deadline, std::string name = "root",
            bool listened_first = false)
      : opts_(opts),
        deadline_(deadline),
        name_(std::move(name)),
        listened_first_(listened_first || opts.root_listening) {}

  // Tries every address of addr once, presenting `token`. kRetry leaves the reason in
  // last_error_.
  Attempt try_address(const std::string &addr, const std::string &token, int *fd, Status *fatal) {
    token_ = token;
    std::string host;
    int port = 0;
    Status st = parse_host_port(addr, &host, &port);
    if (!st.ok()) {
      *fatal = st;
      return Attempt::kFatal;
    }
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    struct addrinfo *res = nullptr;
    std::string service = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      // Name service hiccups are retried too; the last text is reported at the deadline.
      last_error_ = strprintf("resolving %s: %s", host.c_str(), gai_strerror(rc));
      return Attempt::kRetry;
    }
    Attempt result = Attempt::kRetry;
    for (struct addrinfo *ai = res; ai && result == Attempt::kRetry; ai = ai->ai_next)
      result = try_one(addr, ai, fd, fatal);
    freeaddrinfo(res);
    return result;
  }

  const std::string &last_error() const { return last_error_; }
  // True once a root took the connection and then dropped the hello: retry slowly then, so
  // that a rank with a wrong token does not flood rank 0's log.
  bool refused() const { return refused_; }
  // The last of those refusals, kept because it explains more than a later "Connection
  // refused" from a root that has finished its connect phase and closed its port.
  const std::string &refusal() const { return refusal_; }
  // True once an address that took a TCP connection refuses one: rank 0 was there and has
  // closed its port, so it died or gave up the connect phase; waiting longer cannot help.
  bool root_gone() const { return root_gone_; }

 private:
  Attempt try_one(const std::string &addr, const struct addrinfo *ai, int *out, Status *fatal) {
    Deadline attempt(std::min(kAttemptMs, std::max(1, deadline_.remaining_ms())));
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return retry_errno(addr, errno);
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int n;
        do {
          n = ::poll(&pfd, 1, attempt.remaining_ms());
        } while (n < 0 && errno == EINTR);
        socklen_t len = sizeof err;
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      ::close(fd);
      if (err == ECONNREFUSED && (addr == accepted_addr_ || listened_first_)) root_gone_ = true;
      return retry_errno(addr, err);
    }
    accepted_addr_ = addr;
    set_nodelay(fd);
    std::string hello = wire::encode_hello(token_, opts_.rank, opts_.nranks);
    uint8_t ack[wire::kAckBytes];
    IoStatus io = send_all(fd, hello.data(), hello.size(), attempt);
    if (io.ok()) io = recv_all(fd, ack, sizeof ack, attempt);
    if (!io.ok()) {
      ::close(fd);
      // The root drops a wrong token (or protocol version) without a word; so does an old
      // job's root found through a stale rendezvous file. Both are worth another try.
      refused_ = true;
      refusal_ = last_error_ = strprintf(
          "connected to %s, but the handshake failed: %s (wrong DDL_JOB_TOKEN, a different ddl "
          "version, or not a ddl rendezvous?)",
          addr.c_str(), io.describe().c_str());
      return Attempt::kRetry;
    }
    const wire::AckCheck checked = wire::check_ack(ack, sizeof ack);
    if (!checked.is_ack) {
      ::close(fd);
      last_error_ = strprintf("%s answered with something that is not a ddl ack", addr.c_str());
      return Attempt::kRetry;
    }
    if (checked.code != wire::kAccepted) {
      ::close(fd);
      // A root of our own job (the token matched) refused us: retrying cannot help.
      *fatal = invalid_argument(
          "bootstrap: rank %d: %s %s refused rank %d of %d: %s (the job has %u ranks)", opts_.rank,
          name_.c_str(), addr.c_str(), opts_.rank, opts_.nranks, wire::ack_code_name(checked.code),
          checked.nranks);
      return Attempt::kFatal;
    }
    *out = fd;
    return Attempt::kConnected;
  }

  Attempt retry_errno(const std::string &addr, int err) {
    last_error_ = strprintf("connecting to %s %s: %s (errno %d)", name_.c_str(), addr.c_str(),
                            strerror(err), err);
    return Attempt::kRetry;
  }

  const BootstrapOptions &opts_;
  const Deadline &deadline_;
  const std::string name_;
  const bool listened_first_;
  std::string token_;
  std::string last_error_;
  bool refused_ = false;
  std::string refusal_;
  std::string accepted_addr_;  // the last address that took a TCP connection
  bool root_gone_ = false;
};

}  // namespace

Status connect_to_root(const BootstrapOptions &opts, const Deadline &deadline, int *fd,
                       std::string *root_addr, std::string *used_token) {
  Connector connector(opts, deadline);
  std::string file_error;
  int backoff = kFirstBackoffMs;
  int attempts = 0;
  std::string hooked;  // the address on_root_found was last called with
  WaitNotice notice(deadline);
  bool file_mode = false;  // rank 0's address comes from the rendezvous file
  for (;;) {
    std::string addr = opts.root_addr;
    std::string token = opts.job_token;
    bool have = true;
    // In rendezvous-file mode the file is read again on every attempt: the first read may
    // have found the previous job's stale file.
    if (!opts.rendezvous_file.empty() && !opts.root_addr.empty()) {
      std::string host;
      int port = 0;
      if (parse_host_port(opts.root_addr, &host, &port).ok() && port == 0) addr.clear();
    }
    if (addr.empty()) {
      file_mode = true;
      std::string published;
      bool has_token = false;
      have = read_rendezvous_file(opts.rendezvous_file, &addr, &published, &has_token, &file_error);
      // Rank 0 made the token and wrote it beside its address; a file without one is an
      // older job's, or rank 0 was given DDL_JOB_TOKEN and this rank was not.
      if (have && opts.fresh_token && !has_token) {
        have = false;
        file_error = strprintf(
            "rendezvous file %s holds no job token (a stale file, or DDL_JOB_TOKEN is set on "
            "rank 0 and not on rank %d)",
            opts.rendezvous_file.c_str(), opts.rank);
      }
      if (have && opts.fresh_token) token = published;
    }
    if (have) {
      ++attempts;
      if (opts.on_root_found && addr != hooked) {
        hooked = addr;
        opts.on_root_found(addr);
      }
      Status fatal;
      Attempt a = connector.try_address(addr, token, fd, &fatal);
      if (a == Attempt::kConnected) {
        *root_addr = addr;
        *used_token = token;
        return Status::Ok();
      }
      if (a == Attempt::kFatal) return fatal;
      if (connector.root_gone())
        return remote_error(
            "bootstrap: rank %d: rank 0 (the rendezvous root) at %s was listening (it took a "
            "connection from this rank earlier, or opened its port before announcing it) and now "
            "refuses connections: it died, or gave up on the job before this rank got in "
            "(%s%s%s)",
            opts.rank, addr.c_str(), connector.last_error().c_str(),
            connector.refused() ? "; earlier: " : "", connector.refusal().c_str());
    }
    if (notice.due()) {
      std::string last = attempts ? connector.last_error() : file_error;
      if (attempts && !have) last += "; then " + file_error;
      DDL_WARN(
          "bootstrap: rank %d: still waiting to get in to rank 0 (the rendezvous root)%s%s (%s; "
          "last: %s). Usually rank 0 was not started or failed before init, %s, or a firewall "
          "drops the connection",
          opts.rank, addr.empty() ? "" : " at ", addr.c_str(), notice.times().c_str(), last.c_str(),
          file_mode ? "or it publishes its address elsewhere (DDL_RENDEZVOUS_DIR must be the same "
                      "directory on every rank, shared between hosts)"
                    : "or this rank looks for it in the wrong place (DDL_ROOT, or MASTER_ADDR and "
                      "MASTER_PORT, must name rank 0's host and port)");
    }
    if (opts.watch) DDL_RETURN_IF_ERROR(opts.watch());
    int left = deadline.remaining_ms();
    if (left == 0) {
      std::string why = attempts ? connector.last_error() : file_error;
      if (attempts && !connector.last_error().empty() && !have) why += "; then " + file_error;
      std::string earlier;
      if (connector.refused() && connector.refusal() != connector.last_error())
        earlier = "; earlier: " + connector.refusal();
      return timeout_error(
          "bootstrap: rank %d: %s, retried for %.1f s%s; rank 0 (the rendezvous root) never let "
          "this rank in",
          opts.rank, why.c_str(), static_cast<double>(deadline.elapsed_ms()) / 1000.0,
          earlier.c_str());
    }
    ::poll(nullptr, 0, notice.cap(std::min(opts.watch ? Bootstrap::kWatchMs : backoff, left)));
    backoff = std::min(backoff * 2, kMaxBackoffMs);
    if (connector.refused()) backoff = kRefusedBackoffMs;
  }
}

Status connect_to_relay(const BootstrapOptions &opts, int parent, const std::string &addr,
                        const std::string &token, const Deadline &deadline, int *fd) {
  const std::string name = strprintf("rank %d (this rank's relay)", parent);
  Connector connector(opts, deadline, name, true);
  int backoff = kFirstBackoffMs;
  for (;;) {
    Status fatal;
    const Attempt a = connector.try_address(addr, token, fd, &fatal);
    if (a == Attempt::kConnected) return Status::Ok();
    if (a == Attempt::kFatal) return fatal;
    if (connector.root_gone())
      return remote_error(
          "bootstrap: rank %d: %s at %s refuses connections: it died, or gave up on the job (%s)",
          opts.rank, name.c_str(), addr.c_str(), connector.last_error().c_str());
    if (opts.watch) DDL_RETURN_IF_ERROR(opts.watch());
    const int left = deadline.remaining_ms();
    if (left == 0)
      return timeout_error("bootstrap: rank %d: %s, retried for %.1f s; %s never let this rank in",
                           opts.rank, connector.last_error().c_str(),
                           static_cast<double>(deadline.elapsed_ms()) / 1000.0, name.c_str());
    ::poll(nullptr, 0, std::min(opts.watch ? Bootstrap::kWatchMs : backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoffMs);
  }
}

}  // namespace bootstrap
}  // namespace ddl

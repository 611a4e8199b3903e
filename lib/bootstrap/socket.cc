#include "lib/bootstrap/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/common/params.h"

namespace ddl {
namespace bootstrap {

int Deadline::remaining_ms() const {
  auto left_us =
      std::chrono::duration_cast<std::chrono::microseconds>(end_ - std::chrono::steady_clock::now())
          .count();
  if (left_us <= 0) return 0;
  // Rounded up, so that a poll() for the remaining time does not wake just before the end.
  int64_t left = (left_us + 999) / 1000;
  return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
}

int64_t Deadline::elapsed_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start_)
      .count();
}

Status parse_host_port(const std::string &text, std::string *host, int *port) {
  if (text.empty()) return invalid_argument("empty address (want host:port)");
  if (text.size() > 1024) return invalid_argument("address of %zu characters", text.size());
  std::string h, p;
  if (text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalid_argument("'%s' is not [ipv6]:port", text.c_str());
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos)
      return invalid_argument("'%s' has no port (want host:port)", text.c_str());
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    // An unbracketed IPv6 literal is ambiguous ("::1:29500"): insist on brackets.
    if (h.find(':') != std::string::npos)
      return invalid_argument("'%s': write IPv6 addresses as [addr]:port", text.c_str());
  }
  if (h.empty()) return invalid_argument("'%s' has an empty host", text.c_str());
  for (char c : h) {
    // Hostnames, IPv4 and IPv6 literals (with a %zone) only: nothing a shell or a file could
    // misread, no spaces or control characters.
    bool okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
    if (!okc) return invalid_argument("'%s': bad character in host", text.c_str());
  }
  int64_t value = 0;
  if (!parse_int(p, 0, 65535, &value))
    return invalid_argument("'%s': port '%s' is not a number in 0..65535", text.c_str(), p.c_str());
  *host = h;
  *port = static_cast<int>(value);
  return Status::Ok();
}

std::string join_host_port(const std::string &host, int port) {
  if (host.find(':') != std::string::npos) return strprintf("[%s]:%d", host.c_str(), port);
  return strprintf("%s:%d", host.c_str(), port);
}

std::string sockaddr_string(const struct sockaddr *addr, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  std::string h = host;
  if (h.compare(0, 7, "::ffff:") == 0 && h.find('.') != std::string::npos) h = h.substr(7);
  int64_t port = 0;
  parse_int(serv, 0, 65535, &port);
  return join_host_port(h, static_cast<int>(port));
}

std::string peer_string(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<struct sockaddr *>(&ss), &len) != 0) return "?";
  return sockaddr_string(reinterpret_cast<struct sockaddr *>(&ss), len);
}

bool is_loopback_host(const std::string &host) {
  if (host == "localhost" || host == "::1") return true;
  struct in_addr a4;
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return false;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void close_fd(int *fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

std::string IoStatus::describe() const {
  switch (result) {
    case IoResult::kOk:
      return "ok";
    case IoResult::kTimeout:
      return "timed out";
    case IoResult::kClosed:
      if (err == 0) return "closed the connection";
      return strprintf("closed the connection (%s, errno %d)", strerror(err), err);
    case IoResult::kError:
      break;
  }
  return strprintf("%s (errno %d)", strerror(err), err);
}

namespace {

// Connection resets and broken pipes mean the peer went away: reported as kClosed so that the
// caller can say "rank N disconnected" rather than quoting a socket error.
bool is_disconnect(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED;
}

// Waits until fd is ready for `events` or the deadline passes.
IoStatus wait_fd(int fd, short events, const Deadline &deadline) {
  for (;;) {
    struct pollfd pfd = {fd, events, 0};
    int n = ::poll(&pfd, 1, deadline.remaining_ms());
    if (n > 0) return IoStatus{};  // readiness, HUP or ERR: the next I/O call says which
    if (n == 0) return IoStatus{IoResult::kTimeout, 0};
    if (errno != EINTR) return IoStatus{IoResult::kError, errno};
  }
}

}  // namespace

IoStatus send_all(int fd, const void *data, size_t len, const Deadline &deadline) {
  const char *p = static_cast<const char *>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (deadline.passed()) return IoStatus{IoResult::kTimeout, 0};
      IoStatus st = wait_fd(fd, POLLOUT, deadline);
      if (!st.ok()) return st;
      continue;
    }
    int err = n < 0 ? errno : EPIPE;
    return IoStatus{is_disconnect(err) ? IoResult::kClosed : IoResult::kError, err};
  }
  return IoStatus{};
}

ssize_t recv_some(int fd, void *data, size_t len, IoStatus *st) {
  for (;;) {
    ssize_t n = ::recv(fd, data, len, 0);
    if (n > 0) return n;
    if (n == 0) {
      *st = IoStatus{IoResult::kClosed, 0};
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *st = IoStatus{is_disconnect(errno) ? IoResult::kClosed : IoResult::kError, errno};
    return -1;
  }
}

IoStatus recv_all(int fd, void *data, size_t len, const Deadline &deadline) {
  char *p = static_cast<char *>(data);
  while (len > 0) {
    IoStatus st;
    ssize_t n = recv_some(fd, p, len, &st);
    if (n < 0) return st;
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (deadline.passed()) return IoStatus{IoResult::kTimeout, 0};
    st = wait_fd(fd, POLLIN, deadline);
    if (!st.ok()) return st;
  }
  return IoStatus{};
}

}  // namespace bootstrap
}  // namespace ddl

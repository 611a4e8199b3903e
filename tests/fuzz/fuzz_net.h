// Loopback socket helpers for the socket-level bootstrap fuzzers (fuzz_wire_*), which put
// fuzzed bytes on real TCP connections to the real bootstrap code: they check the socket code
// around the wire decoders (partial reads, closes, deadlines). The decoders themselves are
// pure functions (lib/bootstrap/wire.h), fuzzed directly and ~100x faster by fuzz_hello,
// fuzz_root_frames and fuzz_peer_reply.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "tests/loopback.h"  // listen_loopback, free_port

namespace ddl_fuzz {

// Blocking connect to 127.0.0.1:port, retried (the listener may not be up yet) for up to
// timeout_ms. -1 on failure.
inline int connect_loopback(int port, int timeout_ms) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    ::close(fd);
    if (std::chrono::steady_clock::now() >= give_up) return -1;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Writes everything (blocking socket); false when the peer went away.
inline bool write_all(int fd, const void *data, size_t len) {
  const char *p = static_cast<const char *>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly len bytes within timeout_ms; false otherwise.
inline bool read_exact(int fd, void *data, size_t len, int timeout_ms) {
  char *p = static_cast<char *>(data);
  auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (len > 0) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    give_up - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (::poll(&pfd, 1, left) <= 0) continue;
    ssize_t n = ::recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Reads and discards until the peer closes (EOF or reset); false when timeout_ms passes first.
inline bool drain_to_eof(int fd, int timeout_ms) {
  char buf[65536];
  auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    give_up - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
  }
}

}  // namespace ddl_fuzz

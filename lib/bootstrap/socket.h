// Small TCP helpers for the bootstrap: address parsing, deadlines, and send/recv loops that
// never block past a deadline. Every socket made here is non-blocking and close-on-exec; every
// send uses MSG_NOSIGNAL, so a vanished peer is an EPIPE, never a SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/common/status.h"

namespace ddl {
namespace bootstrap {

// A point in time (steady clock) after which waiting is an error.
class Deadline {
 public:
  explicit Deadline(int timeout_ms)
      : start_(std::chrono::steady_clock::now()),
        end_(start_ + std::chrono::milliseconds(timeout_ms)) {}
  // Milliseconds left, 0 when passed; suitable for poll().
  int remaining_ms() const;
  bool passed() const { return remaining_ms() == 0; }
  // Milliseconds since the deadline was set, for error messages.
  int64_t elapsed_ms() const;

 private:
  std::chrono::steady_clock::time_point start_, end_;
};

// "host:port", "[v6addr]:port". Port must be 0..65535; the host must be non-empty and must not
// contain ':' unless it is bracketed. Returns DDL_ERR_INVALID_ARGUMENT naming what is wrong.
Status parse_host_port(const std::string &text, std::string *host, int *port);
// The inverse: brackets the host when it contains ':'.
std::string join_host_port(const std::string &host, int port);
// The numeric "addr:port" of a socket address ("[::1]:80" for IPv6, IPv4-mapped shown as IPv4).
std::string sockaddr_string(const struct sockaddr *addr, socklen_t len);
// The peer's address of a connected socket, or "?" when unknown.
std::string peer_string(int fd);

// True when the host is "localhost" or a loopback literal (127.0.0.0/8, ::1).
bool is_loopback_host(const std::string &host);

// Sets TCP_NODELAY (small handshake and control messages should not wait for Nagle).
void set_nodelay(int fd);
void close_fd(int *fd);  // closes and sets -1; tolerates -1

// Result of an I/O loop. kClosed: the peer closed the connection cleanly (or reset it).
enum class IoResult { kOk, kClosed, kTimeout, kError };
struct IoStatus {
  IoResult result = IoResult::kOk;
  int err = 0;  // errno for kError / kClosed-by-reset
  bool ok() const { return result == IoResult::kOk; }
  // "closed the connection", "timed out", "Connection reset by peer (errno 104)"...
  std::string describe() const;
};

// Sends / receives exactly len bytes, waiting with poll() no longer than the deadline.
IoStatus send_all(int fd, const void *data, size_t len, const Deadline &deadline);
IoStatus recv_all(int fd, void *data, size_t len, const Deadline &deadline);

// One non-blocking read of at most len bytes: >0 bytes read, 0 nothing available now,
// -1 closed (*st says how).
ssize_t recv_some(int fd, void *data, size_t len, IoStatus *st);

// Big-endian (network order) helpers for the wire format.
inline void put_u16(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void put_u32(uint8_t *p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline uint16_t get_u16(const uint8_t *p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
inline uint32_t get_u32(const uint8_t *p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

}  // namespace bootstrap
}  // namespace ddl

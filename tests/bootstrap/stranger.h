// A stranger at rank 0's rendezvous: connects to host:port, presents a hello with a token of
// its choosing and reports what the rendezvous did. Used by the threads-as-ranks tests and by
// tests/tools/launch_probe.cc (ranks of a real mpirun job).
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"

namespace ddltest {

// "refused" when the root closed the connection without an ack (what it does to a wrong
// token), "accepted" when it acked, else what went wrong. Waits at most timeout_ms.
inline std::string stranger_hello(const std::string &root, const std::string &token, int rank,
                                  int nranks, int timeout_ms = 3000) {
  std::string host;
  int port = 0;
  if (!ddl::bootstrap::parse_host_port(root, &host, &port).ok()) return "bad address " + root;
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo *res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    return "cannot resolve " + host;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) {
    std::string why = "connect: " + std::string(strerror(errno));
    if (fd >= 0) close(fd);
    return why;
  }
  std::string hello = ddl::bootstrap::wire::encode_hello(token, rank, nranks);
  if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    close(fd);
    return "refused";  // dropped before the hello was through
  }
  char buf[64];
  size_t got = 0;
  std::string outcome = "no answer within the deadline";
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, buf + got, sizeof buf - got, 0);
    if (n <= 0) {
      outcome = "refused";
      break;
    }
    got += static_cast<size_t>(n);
    if (got >= ddl::bootstrap::wire::kAckBytes) {
      outcome = "accepted";
      break;
    }
  }
  close(fd);
  return outcome;
}

}  // namespace ddltest

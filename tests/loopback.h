// Loopback sockets for tests: a listener on 127.0.0.1, and a free port for a rendezvous.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace ddltest {

// A socket listening on 127.0.0.1:want_port (0: an ephemeral port); -1 on failure. *port
// gets the port.
inline int listen_loopback(int want_port, int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(want_port));
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A free TCP port on 127.0.0.1: listen on port 0, read it back, close (a small race with
// other processes, fine for tests). -1 when that fails.
inline int free_port() {
  int port = -1;
  const int fd = listen_loopback(0, &port);
  if (fd < 0) return -1;
  close(fd);
  return port;
}

}  // namespace ddltest

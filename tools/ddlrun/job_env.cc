#include "job_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace ddlrun {

bool pick_free_port(int *port, std::string *error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // let the kernel choose
  socklen_t len = sizeof(addr);
  bool ok = bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0;
  if (!ok) *error = std::string("cannot find a free TCP port: ") + std::strerror(errno);
  close(fd);
  if (ok) *port = ntohs(addr.sin_port);
  return ok;
}

bool make_job_token(std::string *token, std::string *error) {
  unsigned char bytes[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (fd >= 0 && got < sizeof(bytes)) {
    ssize_t n = read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  int saved_errno = errno;
  if (fd >= 0) close(fd);
  if (got != sizeof(bytes)) {
    *error = std::string("cannot read /dev/urandom: ") + std::strerror(saved_errno);
    return false;
  }
  static const char kHex[] = "0123456789abcdef";
  token->clear();
  for (unsigned char b : bytes) {
    token->push_back(kHex[b >> 4]);
    token->push_back(kHex[b & 15]);
  }
  return true;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n <= 0) n = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return n > 0 ? n : 1;
}

int omp_threads_per_rank(int cores, int local_ranks) {
  int per_rank = local_ranks > 0 ? cores / local_ranks : cores;
  return per_rank > 1 ? per_rank : 1;
}

std::vector<std::string> rank_environment(
    char **base, const std::vector<std::pair<std::string, std::string>> &overrides) {
  // A later override of the same name wins (so that -x can replace what ddlrun sets).
  std::map<std::string, std::string> values;
  std::vector<std::string> order;
  for (const auto &kv : overrides) {
    if (!values.count(kv.first)) order.push_back(kv.first);
    values[kv.first] = kv.second;
  }
  std::vector<std::string> env;
  for (char **entry = base; entry && *entry; ++entry) {
    const char *eq = std::strchr(*entry, '=');
    std::string name =
        eq ? std::string(*entry, static_cast<size_t>(eq - *entry)) : std::string(*entry);
    if (!values.count(name)) env.emplace_back(*entry);
  }
  for (const std::string &name : order) env.push_back(name + "=" + values[name]);
  return env;
}

}  // namespace ddlrun

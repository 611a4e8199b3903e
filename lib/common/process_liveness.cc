#include "lib/common/process_liveness.h"

#include <fcntl.h>
#include <unistd.h>

#include <signal.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddl {

bool process_is_alive(pid_t pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed process stays a zombie until reaped: /proc/<pid>/stat's third field says so.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')', as comm may contain ')'.
  const char *close_paren = std::strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

}  // namespace ddl

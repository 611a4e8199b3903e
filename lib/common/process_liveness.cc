#include "lib/common/process_liveness.h"

#include <fcntl.h>
#include <unistd.h>

#include <signal.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddl {
namespace {

// The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...); 'X' when the process is
// gone; 0 when this process may not look or the file is unreadable (we cannot tell).
char process_state(pid_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 'X';
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 'X' : 0;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')', as comm may contain ')'.
  const char *close_paren = std::strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return 0;
  return close_paren[2];
}

}  // namespace

bool process_is_alive(pid_t pid) {
  // A killed process stays a zombie ('Z') until reaped.
  const char state = process_state(pid);
  return state != 'Z' && state != 'X';
}

bool process_is_stopped(pid_t pid) {
  return process_state(pid) == 'T';
}

}  // namespace ddl

#include "lib/transports/shm/cma.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace ddl {
namespace {

constexpr uint64_t kProbeMagic = 0x64646c2d636d6121ull;  // "ddl-cma!"
volatile uint64_t g_probe_word = 0;

// What the probe word of process `pid` holds.
uint64_t cma_probe_value(pid_t pid) {
  return kProbeMagic ^ static_cast<uint64_t>(pid);
}

// Loops over short transfers: the kernel may stop at a page it cannot pin.
Status cma_copy(bool write, pid_t pid, const void *remote, void *local, size_t bytes) {
  const char *there = static_cast<const char *>(remote);
  char *here = static_cast<char *>(local);
  while (bytes > 0) {
    iovec local_iov = {here, bytes};
    iovec remote_iov = {const_cast<char *>(there), bytes};
    const ssize_t done = write ? process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
                               : process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0);
    if (done > 0) {
      there += done;
      here += done;
      bytes -= static_cast<size_t>(done);
      continue;
    }
    if (done < 0 && errno == EINTR) continue;
    const int err = done < 0 ? errno : EIO;
    if (err == ESRCH || kill(pid, 0) != 0)
      return remote_error("process %d is gone (%s its memory at %p)", static_cast<int>(pid),
                          write ? "writing" : "reading", static_cast<const void *>(there));
    // Unmapped memory: the process is exiting, or left the call and freed the buffer it had
    // published, or published a bad pointer.
    if (err == EFAULT)
      return remote_error(
          "process %d has no memory at %p (%zu B): it left the call or passed "
          "a bad buffer",
          static_cast<int>(pid), static_cast<const void *>(there), bytes);
    return system_error(err, "%s of %zu B at %p in process %d",
                        write ? "process_vm_writev" : "process_vm_readv", bytes,
                        static_cast<const void *>(there), static_cast<int>(pid));
  }
  return Status::Ok();
}
}  // namespace

Status cma_read(pid_t pid, const void *remote, void *local, size_t bytes) {
  return cma_copy(false, pid, remote, local, bytes);
}

Status cma_write(pid_t pid, void *remote, const void *local, size_t bytes) {
  return cma_copy(true, pid, remote, const_cast<void *>(local), bytes);
}

uintptr_t cma_probe_address() {
  // Set on every call: a forked child inherits the word but has another pid.
  g_probe_word = cma_probe_value(getpid());
  return reinterpret_cast<uintptr_t>(&g_probe_word);
}

bool cma_probe(pid_t pid, uintptr_t address) {
  uint64_t value = 0;
  if (!cma_read(pid, reinterpret_cast<const void *>(address), &value, sizeof value).ok())
    return false;
  return value == cma_probe_value(pid);
}

}  // namespace ddl

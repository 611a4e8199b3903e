// The memory of the host-local transport: one segment per host per communicator.
//
// The host's first rank creates it as an anonymous memfd; the other ranks on the host open
// that very file through /proc/<pid>/fd/<fd> (allowed between processes of one user, the
// same check UCX's "proc link" uses). No name ever exists in /dev/shm, so a rank killed at
// any moment leaves nothing behind: the kernel frees the memory with the last mapping.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>

#include "lib/common/status.h"

namespace ddl {

class ShmSegment {
 public:
  // Creates and maps a zero-filled segment of `bytes` (the host's first rank).
  static Status create(size_t bytes, std::unique_ptr<ShmSegment> *out);
  // Maps the segment that process `pid` created and holds open as descriptor `fd`.
  static Status open(pid_t pid, int fd, std::unique_ptr<ShmSegment> *out);
  ~ShmSegment();
  ShmSegment(const ShmSegment &) = delete;
  ShmSegment &operator=(const ShmSegment &) = delete;

  void *base() const { return base_; }
  size_t size() const { return size_; }
  // The creator's descriptor, for peers to open; -1 once closed.
  int fd() const { return fd_; }
  // Once every peer has mapped the segment the descriptor is no longer needed.
  void close_fd();

 private:
  ShmSegment() = default;
  void *base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace ddl

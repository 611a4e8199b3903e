#include "lib/transports/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace ddl {
namespace {

Status map_fd(int fd, size_t bytes, void **base) {
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return system_error(errno, "mapping %zu B of shared memory", bytes);
  *base = p;
  return Status::Ok();
}

}  // namespace

Status ShmSegment::create(size_t bytes, std::unique_ptr<ShmSegment> *out) {
  std::unique_ptr<ShmSegment> segment(new ShmSegment());
  segment->fd_ = memfd_create("ddl-shm", MFD_CLOEXEC);
  if (segment->fd_ < 0) return system_error(errno, "memfd_create");
  if (ftruncate(segment->fd_, static_cast<off_t>(bytes)) != 0)
    return system_error(errno, "sizing the shared-memory segment to %zu B", bytes);
  DDL_RETURN_IF_ERROR(map_fd(segment->fd_, bytes, &segment->base_));
  segment->size_ = bytes;
  *out = std::move(segment);
  return Status::Ok();
}

Status ShmSegment::open(pid_t pid, int fd, std::unique_ptr<ShmSegment> *out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), fd);
  std::unique_ptr<ShmSegment> segment(new ShmSegment());
  segment->fd_ = ::open(path, O_RDWR | O_CLOEXEC);
  if (segment->fd_ < 0) return system_error(errno, "opening %s", path);
  struct stat st = {};
  if (fstat(segment->fd_, &st) != 0) return system_error(errno, "fstat of %s", path);
  if (st.st_size <= 0) return internal_error("%s is empty", path);
  const size_t bytes = static_cast<size_t>(st.st_size);
  DDL_RETURN_IF_ERROR(map_fd(segment->fd_, bytes, &segment->base_));
  segment->size_ = bytes;
  // The mapping keeps the memory; the descriptor is not needed any more.
  segment->close_fd();
  *out = std::move(segment);
  return Status::Ok();
}

void ShmSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ShmSegment::~ShmSegment() {
  if (base_) munmap(base_, size_);
  close_fd();
}

}  // namespace ddl

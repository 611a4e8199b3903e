#include "lib/bootstrap/token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ddl {

Status random_token(std::string *token) {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return system_error(errno, "opening /dev/urandom");
  const ssize_t n = ::read(fd, bytes, sizeof bytes);
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof bytes))
    return system_error(n < 0 ? err : EIO, "reading /dev/urandom");
  static const char kHex[] = "0123456789abcdef";
  token->clear();
  for (unsigned char b : bytes) {
    token->push_back(kHex[b >> 4]);
    token->push_back(kHex[b & 15]);
  }
  return Status::Ok();
}

}  // namespace ddl

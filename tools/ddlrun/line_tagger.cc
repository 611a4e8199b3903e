#include "line_tagger.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddlrun {

void write_fully(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

LineTagger::LineTagger(int rank, int out_fd)
    : prefix_("[" + std::to_string(rank) + "] "), out_fd_(out_fd) {}

void LineTagger::feed(const char *data, size_t size) {
  while (size > 0) {
    const char *newline = static_cast<const char *>(std::memchr(data, '\n', size));
    if (!newline) {
      partial_.append(data, size);
      if (partial_.size() >= kMaxPartial) flush();
      return;
    }
    size_t line_size = static_cast<size_t>(newline - data);
    if (partial_.empty()) {
      emit(data, line_size);
    } else {
      partial_.append(data, line_size);
      emit(partial_.data(), partial_.size());
      partial_.clear();
    }
    data = newline + 1;
    size -= line_size + 1;
  }
}

void LineTagger::flush() {
  if (partial_.empty()) return;
  emit(partial_.data(), partial_.size());
  partial_.clear();
}

void LineTagger::emit(const char *line, size_t size) {
  std::string out;
  out.reserve(prefix_.size() + size + 1);
  out.append(prefix_).append(line, size).push_back('\n');
  write_fully(out_fd_, out.data(), out.size());
}

}  // namespace ddlrun

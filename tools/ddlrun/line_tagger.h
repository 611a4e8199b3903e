// Prefixes each line a rank writes with "[rank] " and writes whole lines at once, so that
// lines of different ranks never interleave mid-line.
#pragma once

#include <cstddef>
#include <string>

namespace ddlrun {

class LineTagger {
 public:
  LineTagger(int rank, int out_fd);

  // Takes bytes as they come from the rank's pipe; writes out every completed line.
  void feed(const char *data, size_t size);
  // Writes a trailing partial line (adding the newline); called at end of stream.
  void flush();

 private:
  // A rank that prints a huge line without newline must not grow ddlrun without bound.
  static constexpr size_t kMaxPartial = 64 * 1024;

  void emit(const char *line, size_t size);

  std::string prefix_;
  int out_fd_;
  std::string partial_;
};

// write(2) until everything is written; gives up silently on errors other than EINTR (a
// closed stdout must not kill the launcher: its job is to keep supervising ranks).
void write_fully(int fd, const char *data, size_t size);

}  // namespace ddlrun

// Helpers shared by the libFuzzer targets: a reader that takes bytes off the fuzzer's input,
// and a CHECK that aborts (so that libFuzzer saves the input) with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace ddl_fuzz {

class Reader {
 public:
  Reader(const uint8_t *data, size_t size) : p_(data), end_(data + size) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool empty() const { return p_ == end_; }
  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  // Bytes up to (not including) `sep`, or to the end; the separator is consumed.
  // One memchr and one allocation: a byte-at-a-time push_back cost a tenth of some targets'
  // time under ASan.
  std::string until(uint8_t sep) {
    if (p_ == end_) return std::string();
    const void *hit = std::memchr(p_, sep, left());
    const uint8_t *stop = hit ? static_cast<const uint8_t *>(hit) : end_;
    std::string out(reinterpret_cast<const char *>(p_), static_cast<size_t>(stop - p_));
    p_ = stop < end_ ? stop + 1 : end_;
    return out;
  }
  std::string rest() {
    std::string out(reinterpret_cast<const char *>(p_), left());
    p_ = end_;
    return out;
  }

 private:
  const uint8_t *p_;
  const uint8_t *end_;
};

}  // namespace ddl_fuzz

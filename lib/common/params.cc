#include "lib/common/params.h"

#include <cerrno>
#include <cstdlib>

namespace ddl {

bool parse_int(const std::string &text, int64_t min, int64_t max, int64_t *value) {
  if (text.empty() || text.size() > 20) return false;
  // Digits with an optional leading '-' only: no spaces, '+', or anything after a NUL.
  for (size_t i = 0; i < text.size(); ++i)
    if (!((text[i] >= '0' && text[i] <= '9') || (i == 0 && text[i] == '-' && text.size() > 1)))
      return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < min || v > max) return false;
  *value = v;
  return true;
}

bool parse_bytes(const std::string &text, uint64_t *bytes) {
  if (text.empty() || text.size() > 24) return false;
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return false;
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - d) / 10) return false;
    value = value * 10 + d;
  }
  std::string suffix = text.substr(digits);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  int shift = 0;
  if (suffix == "") {
    shift = 0;
  } else if (suffix == "K" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (suffix == "T" || suffix == "t") {
    shift = 40;
  } else {
    return false;
  }
  if (shift && value > (UINT64_MAX >> shift)) return false;
  *bytes = value << shift;
  return true;
}

std::string env_string(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace ddl

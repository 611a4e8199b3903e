#include "lib/common/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace ddl {
namespace {

std::string vformat(const char *fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int len = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (len <= 0) return std::string();
  std::string out(static_cast<size_t>(len) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, args);
  out.resize(static_cast<size_t>(len));
  return out;
}

}  // namespace

std::string strprintf(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vformat(fmt, args);
  va_end(args);
  return out;
}

#define DDL_DEFINE_ERROR(name, code)    \
  Status name(const char *fmt, ...) {   \
    va_list args;                       \
    va_start(args, fmt);                \
    Status s(code, vformat(fmt, args)); \
    va_end(args);                       \
    return s;                           \
  }

DDL_DEFINE_ERROR(invalid_argument, DDL_ERR_INVALID_ARGUMENT)
DDL_DEFINE_ERROR(invalid_usage, DDL_ERR_INVALID_USAGE)
DDL_DEFINE_ERROR(internal_error, DDL_ERR_INTERNAL)
DDL_DEFINE_ERROR(remote_error, DDL_ERR_REMOTE)
DDL_DEFINE_ERROR(timeout_error, DDL_ERR_TIMEOUT)
DDL_DEFINE_ERROR(unsupported, DDL_ERR_UNSUPPORTED)
#undef DDL_DEFINE_ERROR

Status system_error(int err, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string what = vformat(fmt, args);
  va_end(args);
  char buf[128];
  const char *text = strerror_r(err, buf, sizeof buf);  // GNU strerror_r returns the text
  return Status(DDL_ERR_SYSTEM, strprintf("%s: %s (errno %d)", what.c_str(), text, err));
}

}  // namespace ddl

// Status: a result code plus the words that explain it. Every internal function that can
// fail returns one; the C API turns it into a ddl_result_t and ddl_comm_last_error's text.
#pragma once

#include <string>
#include <utility>

#include "ddl/ddl.h"

namespace ddl {

class Status {
 public:
  Status() = default;
  Status(ddl_result_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == DDL_SUCCESS; }
  ddl_result_t code() const { return code_; }
  const std::string &message() const { return message_; }

  // Prepends context ("allreduce #3: " + "peer 2: connection reset").
  Status &prefix(const std::string &context) {
    message_ = context + message_;
    return *this;
  }

 private:
  ddl_result_t code_ = DDL_SUCCESS;
  std::string message_;
};

// printf-style message builders for the common codes.
Status invalid_argument(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
Status invalid_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
Status internal_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
Status remote_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
Status timeout_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
Status unsupported(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// "what: <strerror(err)> (errno N)" with DDL_ERR_SYSTEM.
Status system_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// printf into a std::string.
std::string strprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ddl

// Returns early with the error of `expr`, if any.
#define DDL_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::ddl::Status ddl_status_ = (expr);        \
    if (!ddl_status_.ok()) return ddl_status_; \
  } while (0)

// An internal invariant; a violation is reported as DDL_ERR_INTERNAL with the call site.
#define DDL_CHECK(cond)                                                                   \
  do {                                                                                    \
    if (!(cond))                                                                          \
      return ::ddl::internal_error("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
  } while (0)

// Logging to stderr, filtered by DDL_LOG_LEVEL (error, warn, info, debug or 0..3).
#pragma once

namespace ddl {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level in force: set_log_level's value, else DDL_LOG_LEVEL, else warn.
LogLevel log_level();
void set_log_level(LogLevel level);
// Sets the rank shown in the calling thread's lines ("ddl[3] warn: ..."); -1: none. Per thread,
// not per process: a process may hold several communicators (ranks of different jobs, or ranks
// as threads), so each API call names its communicator's rank for its own length (LogRank).
void set_log_rank(int rank);
int log_rank();

// Names `rank` in this thread's log lines until the end of the scope, then restores the
// previous rank.
class LogRank {
 public:
  explicit LogRank(int rank) : saved_(log_rank()) { set_log_rank(rank); }
  ~LogRank() { set_log_rank(saved_); }
  LogRank(const LogRank &) = delete;
  LogRank &operator=(const LogRank &) = delete;

 private:
  int saved_;
};
void log_message(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ddl

#define DDL_LOG(level, ...)                                              \
  do {                                                                   \
    if (static_cast<int>(level) <= static_cast<int>(::ddl::log_level())) \
      ::ddl::log_message(level, __VA_ARGS__);                            \
  } while (0)
#define DDL_WARN(...) DDL_LOG(::ddl::LogLevel::kWarn, __VA_ARGS__)
#define DDL_INFO(...) DDL_LOG(::ddl::LogLevel::kInfo, __VA_ARGS__)
#define DDL_DEBUG(...) DDL_LOG(::ddl::LogLevel::kDebug, __VA_ARGS__)

// Logging to stderr, filtered by DDL_LOG_LEVEL (error, warn, info, debug or 0..3).
#pragma once

#include <atomic>

namespace ddl {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// What the inline functions below read (log.cc). Inline: every call of the API asks them, on
// its way to the wire.
namespace log_state {
extern std::atomic<int> level;  // -1 until first read from DDL_LOG_LEVEL
extern thread_local int rank;
LogLevel level_from_env();  // reads DDL_LOG_LEVEL into `level`
}  // namespace log_state

// The level in force: set_log_level's value, else DDL_LOG_LEVEL, else warn.
inline LogLevel log_level() {
  const int level = log_state::level.load(std::memory_order_relaxed);
  return level >= 0 ? static_cast<LogLevel>(level) : log_state::level_from_env();
}
void set_log_level(LogLevel level);
// Sets the rank shown in the calling thread's lines ("ddl[3] warn: ..."); -1: none. Per thread,
// not per process: a process may hold several communicators (ranks of different jobs, or ranks
// as threads), so each API call names its communicator's rank for its own length (LogRank).
inline void set_log_rank(int rank) {
  log_state::rank = rank;
}
inline int log_rank() {
  return log_state::rank;
}

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

// Logging to stderr, filtered by DDL_LOG_LEVEL (error, warn, info, debug or 0..3).
#pragma once

namespace ddl {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level in force: set_log_level's value, else DDL_LOG_LEVEL, else warn.
LogLevel log_level();
void set_log_level(LogLevel level);
// Sets the rank shown in each line ("ddl[3] warn: ..."); -1 before the rank is known.
void set_log_rank(int rank);
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

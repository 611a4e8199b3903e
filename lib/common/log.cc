#include "lib/common/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ddl {

std::atomic<int> log_state::level{-1};
thread_local int log_state::rank = -1;

namespace {

int parse_level_env() {
  const char *env = std::getenv("DDL_LOG_LEVEL");
  if (!env || !*env) return static_cast<int>(LogLevel::kWarn);
  static const char *const kNames[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (strcasecmp(env, kNames[i]) == 0) return i;
  if (env[0] >= '0' && env[0] <= '3' && env[1] == '\0') return env[0] - '0';
  std::fprintf(stderr, "ddl warn: DDL_LOG_LEVEL=%s is not error|warn|info|debug|0..3; using warn\n",
               env);
  return static_cast<int>(LogLevel::kWarn);
}

}  // namespace

LogLevel log_state::level_from_env() {
  const int from_env = parse_level_env();
  level.store(from_env, std::memory_order_relaxed);
  return static_cast<LogLevel>(from_env);
}

void set_log_level(LogLevel level) {
  log_state::level.store(static_cast<int>(level));
}

void log_message(LogLevel level, const char *fmt, ...) {
  static const char *const kNames[] = {"error", "warn", "info", "debug"};
  char line[2048];
  const int rank = log_state::rank;
  int n = rank >= 0 ? std::snprintf(line, sizeof line, "ddl[%d] %s: ", rank,
                                    kNames[static_cast<int>(level)])
                    : std::snprintf(line, sizeof line, "ddl %s: ", kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line + n, sizeof line - static_cast<size_t>(n), fmt, args);
  va_end(args);
  // One write per line so that lines of concurrent ranks do not interleave.
  std::fprintf(stderr, "%s\n", line);
}

}  // namespace ddl

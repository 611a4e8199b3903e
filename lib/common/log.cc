#include "lib/common/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ddl {
namespace {

std::atomic<int> g_level{-1};
thread_local int t_rank = -1;

int level_from_env() {
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

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = level_from_env();
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
void set_log_rank(int rank) {
  t_rank = rank;
}
int log_rank() {
  return t_rank;
}

void log_message(LogLevel level, const char *fmt, ...) {
  static const char *const kNames[] = {"error", "warn", "info", "debug"};
  char line[2048];
  const int rank = t_rank;
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

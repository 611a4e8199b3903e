// The program scripts/chaos.sh runs under ddlrun: a communicator from the environment, then
// allreduces of random sizes (1 B .. CHAOS_MAX_BYTES, log-uniform, the same sequence on every
// rank) whose results are checked, until something fails. One rank gets SIGKILLed from
// outside; the survivors must notice. How each rank ended goes to stderr and to
// $CHAOS_DIR/result.<rank> as one line:
//
//   rank=R code=C what=WHAT iter=I t_error_ns=T t_exit_ns=T2 result=DDL_... msg=<last error>
//
// exit codes: 10 init failed, 11 a collective failed, 12 a wrong result (a bug), 13 no
// error within CHAOS_MAX_SECONDS (the kill went unnoticed), 2 bad environment.
// At start it writes its pid to $CHAOS_DIR/pid.<rank> so that the script can kill it, and
// once ddl_comm_init_from_env has returned, $CHAOS_DIR/ready.<rank>.
//
// SIGTERM (ddlrun passes one on when a rank dies) is recorded and otherwise ignored, so that
// what is measured is the library noticing the death, not ddlrun stopping the job. A training
// framework that installs its own SIGTERM handler sees the same.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ddl/ddl.h"

namespace {

enum ExitCode {
  kBadEnv = 2,
  kInitFailed = 10,
  kCollectiveFailed = 11,
  kWrongResult = 12,
  kNoError = 13
};

volatile sig_atomic_t g_sigterm = 0;
void on_sigterm(int) {
  g_sigterm = 1;
}

int64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double monotonic_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string g_dir;
int g_rank = -1;

void write_file(const std::string &name, const std::string &text) {
  if (g_dir.empty()) return;
  std::string path = g_dir + "/" + name, tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

// Reports how this rank ended, then exits with code.
[[noreturn]] void finish(int code, const char *what, long iter, int64_t t_error, ddl_result_t r,
                         const std::string &msg) {
  std::string flat = msg;
  for (char &c : flat)
    if (c == '\n' || c == '\r') c = ' ';
  char head[512];
  std::snprintf(head, sizeof head,
                "rank=%d code=%d what=%s iter=%ld t_error_ns=%" PRId64 " t_exit_ns=%" PRId64
                " sigterm=%d result=%s msg=",
                g_rank, code, what, iter, t_error, realtime_ns(), static_cast<int>(g_sigterm),
                r == DDL_SUCCESS ? "DDL_SUCCESS" : ddl_result_string(r));
  std::string line = std::string(head) + flat + "\n";
  // ddl_result_string's text starts with the code's name: keep just that in the key=value part.
  const std::string full = r == DDL_SUCCESS ? "DDL_SUCCESS" : ddl_result_string(r);
  const std::string name = full.substr(0, full.find(':'));
  line.replace(line.find("result=") + 7, full.size(), name);
  std::fprintf(stderr, "CHAOS %s", line.c_str());
  write_file("result." + std::to_string(g_rank), line);
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace

int main() {
  const char *rank_env = std::getenv("DDL_RANK");
  const char *dir_env = std::getenv("CHAOS_DIR");
  g_rank = rank_env ? std::atoi(rank_env) : -1;
  g_dir = dir_env ? dir_env : "";
  // The handler first: the pid file tells the script that this rank is up and will outlive
  // ddlrun's SIGTERM (a rank that ddlrun stops before it got here is no survivor of interest).
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigterm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  write_file("pid." + std::to_string(g_rank), std::to_string(getpid()) + "\n");

  const char *seed_env = std::getenv("CHAOS_SEED");
  const char *max_s_env = std::getenv("CHAOS_MAX_SECONDS");
  const char *max_b_env = std::getenv("CHAOS_MAX_BYTES");
  uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 1;
  double max_seconds = max_s_env ? std::atof(max_s_env) : 60.0;
  size_t max_bytes = max_b_env ? std::strtoull(max_b_env, nullptr, 10) : (8u << 20);
  if (g_rank < 0 || max_bytes < 1) finish(kBadEnv, "bad_env", -1, 0, DDL_SUCCESS, "DDL_RANK unset");

  ddl_comm_t comm = nullptr;
  ddl_result_t r = ddl_comm_init_from_env(&comm);
  if (r != DDL_SUCCESS)
    finish(kInitFailed, "init", -1, realtime_ns(), r, ddl_comm_last_error(nullptr));
  int nranks = 0;
  ddl_comm_size(comm, &nranks);
  write_file("ready." + std::to_string(g_rank), "");  // init is over (the script's phase label)

  std::vector<float> buf((max_bytes + 3) / 4);
  const double start = monotonic_s();
  const double log_max = __builtin_log(static_cast<double>(max_bytes));
  for (long iter = 0;; ++iter) {
    if (monotonic_s() - start > max_seconds)
      finish(kNoError, "no_error", iter, 0, DDL_SUCCESS, "ran out of time without an error");
    uint64_t state = seed * 1000003u + static_cast<uint64_t>(iter);
    double u = static_cast<double>(splitmix(&state) >> 11) / 9007199254740992.0;
    size_t bytes = static_cast<size_t>(__builtin_exp(u * log_max));
    if (bytes < 1) bytes = 1;
    if (bytes > max_bytes) bytes = max_bytes;
    const bool as_float = bytes % 4 == 0;
    const size_t count = as_float ? bytes / 4 : bytes;
    // Rank r contributes r+1 everywhere; the sum is n(n+1)/2, exact in both types.
    const float want = static_cast<float>(nranks * (nranks + 1) / 2);
    if (as_float) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(g_rank + 1);
    } else {
      std::memset(buf.data(), g_rank + 1, count);
    }
    r = ddl_allreduce(buf.data(), buf.data(), count, as_float ? DDL_FLOAT32 : DDL_UINT8, DDL_SUM,
                      comm);
    if (r != DDL_SUCCESS) {
      int64_t t_error = realtime_ns();
      std::string msg = ddl_comm_last_error(comm);
      ddl_comm_destroy(comm);
      finish(kCollectiveFailed, "allreduce", iter, t_error, r, msg);
    }
    // Spot checks: first, last and a few in between.
    const unsigned char *bytes_out = reinterpret_cast<const unsigned char *>(buf.data());
    for (size_t k = 0; k < 5; ++k) {
      size_t i = k == 4 ? count - 1 : (count * k) / 4;
      bool ok = as_float ? buf[i] == want : bytes_out[i] == static_cast<unsigned char>(want);
      if (!ok) {
        char msg[160];
        std::snprintf(msg, sizeof msg, "allreduce #%ld of %zu B: element %zu is wrong", iter, bytes,
                      i);
        finish(kWrongResult, "wrong_result", iter, realtime_ns(), DDL_SUCCESS, msg);
      }
    }
  }
}

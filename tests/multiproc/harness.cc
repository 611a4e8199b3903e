#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/log.h"

namespace ddltest {

namespace {

[[noreturn]] void run_child(int rank, int nranks, const std::string &root, const RankBody &body,
                            const RunOptions &options) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  if (options.before_init) options.before_init(rank);
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  config.timeout_ms = options.comm_timeout_ms;
  config.job_token = "test-token";
  ddl_comm_t comm = nullptr;
  ddl_result_t r = ddl_comm_init(&comm, nranks, rank, root.c_str(), &config);
  if (r != DDL_SUCCESS) {
    fprintf(stderr, "rank %d: ddl_comm_init: %s: %s\n", rank, ddl_result_string(r),
            ddl_comm_last_error(nullptr));
    fflush(stderr);
    _exit(2);
  }
  int code = body(comm, rank, nranks);
  if (comm) {
    r = ddl_comm_destroy(comm);
    if (r != DDL_SUCCESS && code == 0) code = 3;
  }
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

std::string describe(int rank, int status) {
  char line[128];
  if (WIFEXITED(status))
    snprintf(line, sizeof line, "rank %d exited with %d\n", rank, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(line, sizeof line, "rank %d was killed by signal %d\n", rank, WTERMSIG(status));
  else
    snprintf(line, sizeof line, "rank %d ended oddly (status %#x)\n", rank, status);
  return line;
}

}  // namespace

std::string run_ranks(int nranks, const RankBody &body, const RunOptions &options) {
  const std::string root = "127.0.0.1:" + std::to_string(free_port());
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) run_child(r, nranks, root, body, options);
    pids[r] = pid;
  }
  std::string failures;
  int alive = nranks;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  while (alive > 0 && std::chrono::steady_clock::now() < deadline) {
    bool reaped = false;
    for (int r = 0; r < nranks; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failures += describe(r, status);
        pids[r] = -1;
        --alive;
        reaped = true;
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < nranks; ++r) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
    failures += "rank " + std::to_string(r) + " did not finish within " +
                std::to_string(options.timeout_ms) + " ms and was killed\n";
  }
  return failures;
}

std::string run_ranks_logged(int nranks, const RankBody &body, const RunOptions &options,
                             std::vector<std::string> *logs) {
  char dir[] = "/tmp/ddl_test_logs_XXXXXX";
  if (!mkdtemp(dir)) return "mkdtemp failed";
  const std::string base = dir;
  RunOptions logged = options;
  logged.before_init = [&options, base](int rank) {
    if (options.before_init) options.before_init(rank);
    ddl::set_log_level(ddl::LogLevel::kInfo);
    const std::string path = base + "/rank" + std::to_string(rank);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
  };
  const std::string failures = run_ranks(nranks, body, logged);
  logs->assign(nranks, std::string());
  for (int r = 0; r < nranks; ++r) {
    const std::string path = base + "/rank" + std::to_string(r);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    (*logs)[r] = text.str();
    unlink(path.c_str());
  }
  rmdir(dir);
  return failures;
}

}  // namespace ddltest

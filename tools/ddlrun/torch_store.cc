#include "torch_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ddlrun {
namespace {

using Clock = std::chrono::steady_clock;

// What ddl/torch/store.py prints once its server listens.
constexpr char kReady[] = "ddl.torch.store: ready";

bool is_python(const std::string &program) {
  const size_t slash = program.rfind('/');
  const std::string name = slash == std::string::npos ? program : program.substr(slash + 1);
  return name.compare(0, 6, "python") == 0;
}

}  // namespace

std::vector<std::string> torch_store_command(const std::vector<std::string> &job_command,
                                             int port) {
  std::string python = "python3";
  if (!job_command.empty() && is_python(job_command[0])) {
    python = job_command[0];
  } else if (const char *configured = std::getenv("DDL_PYTHON")) {
    if (*configured) python = configured;
  }
  return {python, "-m", "ddl.torch.store", "--port", std::to_string(port)};
}

bool TorchStore::start(const std::vector<std::string> &command, double timeout_sec,
                       std::string *error) {
  std::vector<char *> argv;
  for (const std::string &arg : command) argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  const pid_t launcher = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    close(out[0]);
    close(out[1]);
    return false;
  }
  if (pid_ == 0) {
    // As a rank: its own process group, gone with ddlrun, standard input from /dev/null.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "ddlrun: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(out[1]);
  // Its first line, within the deadline: the store listens, or why not (on its stderr, which
  // is ddlrun's).
  std::string said;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeout_sec));
  bool ready = false;
  while (!ready) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      *error = "the torch store did not say it was ready within " +
               std::to_string(static_cast<int>(timeout_sec)) + " s";
      break;
    }
    pollfd fd{out[0], POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[512];
    const ssize_t n = read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = "the torch store exited before it was ready" +
               (said.empty() ? std::string() : ": " + said);
      break;
    }
    said.append(buffer, static_cast<size_t>(n));
    // The whole line: the pipe closes after it, and a store still writing its end would die
    // of the broken pipe (Python may write a line's text and its newline apart).
    const size_t at = said.find(kReady);
    ready = at != std::string::npos && said.find('\n', at) != std::string::npos;
  }
  close(out[0]);  // it says nothing more
  if (!ready) stop(0);
  return ready;
}

void TorchStore::stop(int grace_ms) {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  const Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(grace_ms);
  // The event loop may have reaped it already (ECHILD): then it is gone.
  while (waitpid(pid_, nullptr, WNOHANG) == 0 && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (kill(-pid_, 0) == 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

}  // namespace ddlrun

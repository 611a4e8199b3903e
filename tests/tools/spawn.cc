#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace ddltest {
namespace {

std::set<pid_t> &spawned_groups() {
  static std::set<pid_t> groups;
  return groups;
}

std::string temp_file(const char *name) {
  std::string path = std::string("/tmp/ddl_test_") + name + ".XXXXXX";
  int fd = mkstemp(&path[0]);
  if (fd >= 0) close(fd);
  return path;
}

int decode_status(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

Spawned::Spawned(const std::vector<std::string> &argv)
    : out_path_(temp_file("out")), err_path_(temp_file("err")) {
  std::vector<char *> args;
  for (const std::string &arg : argv) args.push_back(const_cast<char *>(arg.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    int null_fd = open("/dev/null", O_RDONLY);
    int out_fd = open(out_path_.c_str(), O_WRONLY | O_TRUNC);
    int err_fd = open(err_path_.c_str(), O_WRONLY | O_TRUNC);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execv(args[0], args.data());
    std::fprintf(stderr, "cannot exec %s\n", args[0]);
    _exit(127);
  }
  if (pid_ > 0) {
    setpgid(pid_, pid_);
    spawned_groups().insert(pid_);
  }
}

Spawned::~Spawned() {
  kill_group();
  std::remove(out_path_.c_str());
  std::remove(err_path_.c_str());
}

bool Spawned::wait(double seconds) {
  if (exit_status_ >= 0) return true;
  if (pid_ <= 0) return false;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_status_ = decode_status(status);
      return true;
    }
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Spawned::kill_group() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  if (exit_status_ < 0) {
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) exit_status_ = decode_status(status);
  }
  spawned_groups().erase(pid_);
}

std::string Spawned::out() const {
  return read_file(out_path_);
}
std::string Spawned::err() const {
  return read_file(err_path_);
}

RunResult run_command(const std::vector<std::string> &argv, double deadline_seconds) {
  RunResult result;
  auto start = std::chrono::steady_clock::now();
  Spawned child(argv);
  result.finished = child.wait(deadline_seconds);
  child.kill_group();  // also what a finished child may have left in its group
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_status = child.exit_status();
  result.out = child.out();
  result.err = child.err();
  return result;
}

void kill_all_spawned() {
  for (pid_t group : spawned_groups()) kill(-group, SIGKILL);
  spawned_groups().clear();
}

bool wait_until_gone(pid_t pid, double seconds) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    // A zombie is dead; its parent (init, here) may be slow to reap it.
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z')
      return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string make_temp_dir() {
  char path[] = "/tmp/ddl_test_dir.XXXXXX";
  return mkdtemp(path) ? std::string(path) : std::string("/tmp");
}

void remove_dir(const std::string &path) {
  std::error_code ignored;
  if (path != "/tmp") std::filesystem::remove_all(path, ignored);
}

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ddltest

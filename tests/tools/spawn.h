// Running the tools under test as child processes, with deadlines, and making sure nothing
// they started outlives the test.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddltest {

// A child process in its own process group, with stdout and stderr captured in files.
// The destructor (and kill_all_spawned, for tests that abort mid-way) SIGKILLs the group.
class Spawned {
 public:
  explicit Spawned(const std::vector<std::string> &argv);
  ~Spawned();
  Spawned(const Spawned &) = delete;
  Spawned &operator=(const Spawned &) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to `seconds`; true when the child exited (its status is then available).
  bool wait(double seconds);
  // The exit code, or 128+signal when killed (like a shell's $?); -1 before wait() succeeded.
  int exit_status() const { return exit_status_; }
  std::string out() const;
  std::string err() const;
  void kill_group();

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string out_path_;
  std::string err_path_;
};

struct RunResult {
  bool finished = false;  // false: the deadline passed and the process group was killed
  int exit_status = -1;
  double seconds = 0;
  std::string out;
  std::string err;
};

// Runs argv to completion or until `deadline_seconds` pass.
RunResult run_command(const std::vector<std::string> &argv, double deadline_seconds);

// SIGKILLs every process group spawned by this test process that is still alive.
void kill_all_spawned();

// Polls until `pid` is gone (or a zombie) or `seconds` pass; true when gone.
bool wait_until_gone(pid_t pid, double seconds);

// A fresh temporary directory, and its removal.
std::string make_temp_dir();
void remove_dir(const std::string &path);
std::string read_file(const std::string &path);

}  // namespace ddltest

#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "job_env.h"
#include "line_tagger.h"
#include "remote_launch.h"
#include "torch_store.h"

extern char **environ;

namespace ddlrun {
namespace {

using Clock = std::chrono::steady_clock;

// After the last rank exits, how long to keep reading output that orphaned grandchildren
// may still hold pipes open for.
constexpr std::chrono::milliseconds kDrainTime{500};
// How long the torch store may take to start (python importing torch on a busy host).
constexpr double kTorchStoreStartSec = 120;

struct RankProcess {
  int rank = 0;
  std::string host;  // with -H; the pid is then the agent's
  pid_t pid = -1;    // also its process group: each rank leads its own group
  bool running = false;
  int out_fd = -1;  // read ends of the rank's stdout/stderr pipes (with --tag-output)
  int err_fd = -1;
  std::unique_ptr<LineTagger> out_tagger;
  std::unique_ptr<LineTagger> err_tagger;
};

enum class StopReason { kNone, kRankFailed, kSignal, kTimeout, kSpawnFailed };

std::string describe_signal(int sig) {
  return "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + describe_signal(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string plural_ranks(int n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

class Job {
 public:
  explicit Job(const LaunchOptions &options) : options_(options) {}
  ~Job();
  int run();

 private:
  bool install_signal_handling();
  bool start_torch_store(const std::string &host,
                         std::vector<std::pair<std::string, std::string>> *vars);
  void spawn_ranks();
  bool spawn_rank(RankProcess *proc, const std::vector<std::string> &command,
                  const std::vector<std::string> &env, std::string *error);
  [[noreturn]] void become_rank(char *const *argv, char *const *envp, int out_fd, int err_fd);
  void event_loop();
  int poll_timeout_ms() const;
  void check_deadlines();
  void handle_signals();
  void reap_children();
  void on_rank_exit(RankProcess *proc, int status);
  void on_store_exit(int status);
  void stop_ranks(int sig, StopReason reason);
  void signal_running(int sig);
  void read_output(int *fd, LineTagger *tagger);
  int running_count() const;
  bool pipes_open() const;
  bool any_group_alive() const;
  void sweep_leftovers();

  const LaunchOptions &options_;
  std::vector<RankProcess> ranks_;
  TorchStore store_;  // --torch-store
  int signal_fd_ = -1;
  sigset_t saved_mask_;
  pid_t launcher_pid_ = getpid();
  StopReason stop_reason_ = StopReason::kNone;
  int exit_status_ = 0;
  bool have_deadline_ = false;
  Clock::time_point deadline_;  // --timeout
  bool kill_pending_ = false;
  Clock::time_point kill_at_;  // SIGKILL for whoever ignored SIGTERM
  bool draining_ = false;
  Clock::time_point drain_until_;
};

Job::~Job() {
  for (RankProcess &proc : ranks_) {
    close_fd(&proc.out_fd);
    close_fd(&proc.err_fd);
  }
  close_fd(&signal_fd_);
}

int Job::run() {
  if (!install_signal_handling()) return 1;
  spawn_ranks();
  if (options_.timeout_sec > 0 && stop_reason_ == StopReason::kNone) {
    have_deadline_ = true;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options_.timeout_sec));
  }
  event_loop();
  for (RankProcess &proc : ranks_) {
    if (proc.out_tagger) proc.out_tagger->flush();
    if (proc.err_tagger) proc.err_tagger->flush();
  }
  store_.stop(options_.grace_ms);
  sweep_leftovers();
  return exit_status_;
}

bool Job::install_signal_handling() {
  // Signals arrive through a signalfd, so the event loop sees them in order with child exits
  // and output, and no handler runs at an awkward moment.
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, sig);
  if (sigprocmask(SIG_BLOCK, &handled, &saved_mask_) != 0 ||
      (signal_fd_ = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
    std::fprintf(stderr, "ddlrun: cannot set up signal handling: %s\n", std::strerror(errno));
    return false;
  }
  // A closed stdout must not kill the launcher while ranks still run.
  signal(SIGPIPE, SIG_IGN);
  // Grandchildren orphaned by a rank become ours, so the final sweep can reap them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  return true;
}

// The torch store on `host` (through the launch agent; "": here), before any rank starts, so
// that no rank waits for a store that will not come.
bool Job::start_torch_store(const std::string &host,
                            std::vector<std::pair<std::string, std::string>> *vars) {
  std::string error;
  int port = 0;
  const bool have_port =
      host.empty() ? pick_free_port(&port, &error) : pick_remote_port(&port, &error);
  std::vector<std::string> command = torch_store_command(options_.command, port);
  if (!host.empty())
    command = agent_command(options_.launch_agent, host, options_.extra_env, command);
  if (!have_port || !store_.start(command, kTorchStoreStartSec, &error)) {
    std::fprintf(stderr, "ddlrun: --torch-store: %s\n", error.c_str());
    stop_reason_ = StopReason::kSpawnFailed;
    exit_status_ = 1;
    return false;
  }
  *vars = {{"MASTER_ADDR", host.empty() ? "127.0.0.1" : host},
           {"MASTER_PORT", std::to_string(port)},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  return true;
}

void Job::spawn_ranks() {
  std::string error;
  int port = options_.port;
  std::string token;
  bool remote = !options_.hosts.empty();
  // A free port can only be probed here; a remote rank 0 gets --port or a random one.
  bool have_port =
      port != 0 || (remote ? pick_remote_port(&port, &error) : pick_free_port(&port, &error));
  if (!have_port || !make_job_token(&token, &error)) {
    std::fprintf(stderr, "ddlrun: %s\n", error.c_str());
    stop_reason_ = StopReason::kSpawnFailed;
    exit_status_ = 1;
    return;
  }
  std::vector<RankPlacement> placement;
  if (remote) placement = place_ranks(options_);
  std::string root = (remote ? placement[0].host : "127.0.0.1") + ":" + std::to_string(port);
  std::vector<std::pair<std::string, std::string>> store_vars;
  if (options_.torch_store && !start_torch_store(remote ? placement[0].host : "", &store_vars))
    return;
  // OMP_NUM_THREADS, as torchrun sets it: unless the user set it (here or with -x), each rank
  // gets its host's cores divided by the ranks on that host, so that PyTorch's and OpenMP's
  // pools (a thread per core each) do not fight over the cores.
  const char *own_omp = std::getenv("OMP_NUM_THREADS");
  bool user_omp = own_omp != nullptr;
  for (const auto &kv : options_.extra_env) user_omp = user_omp || kv.first == "OMP_NUM_THREADS";
  int omp_threads = 0;  // local ranks: the value they get; 0: none set by ddlrun
  if (!user_omp && !remote) {
    int cores = usable_cores();
    omp_threads = omp_threads_per_rank(cores, options_.nranks);
    if (options_.nranks > 1)
      std::fprintf(stderr,
                   "ddlrun: setting OMP_NUM_THREADS=%d for each rank (%d cores / %d ranks on this "
                   "host), as torchrun does, so that their thread pools do not fight over the "
                   "cores; set OMP_NUM_THREADS (or -x OMP_NUM_THREADS=N) to choose\n",
                   omp_threads, cores, options_.nranks);
  } else if (!user_omp) {
    bool shared = false;
    for (const RankPlacement &rank : placement) shared = shared || rank.local_size > 1;
    if (shared)
      std::fprintf(stderr,
                   "ddlrun: setting OMP_NUM_THREADS for each rank to its host's cores / the ranks "
                   "on that host (at least 1), as torchrun does, so that their thread pools do "
                   "not fight over the cores; set OMP_NUM_THREADS (or -x OMP_NUM_THREADS=N) to "
                   "choose\n");
  }
  ranks_.resize(static_cast<size_t>(options_.nranks));
  for (int rank = 0; rank < options_.nranks; ++rank) {
    int local_rank = remote ? placement[static_cast<size_t>(rank)].local_rank : rank;
    int local_size = remote ? placement[static_cast<size_t>(rank)].local_size : options_.nranks;
    std::vector<std::pair<std::string, std::string>> vars = {
        {"DDL_RANK", std::to_string(rank)},
        {"DDL_WORLD_SIZE", std::to_string(options_.nranks)},
        {"DDL_LOCAL_RANK", std::to_string(local_rank)},
        {"DDL_LOCAL_SIZE", std::to_string(local_size)},
        {"DDL_ROOT", root},
        {"DDL_JOB_TOKEN", token},
    };
    vars.insert(vars.end(), store_vars.begin(), store_vars.end());
    if (omp_threads > 0) vars.emplace_back("OMP_NUM_THREADS", std::to_string(omp_threads));
    // A remote rank does not inherit ddlrun's environment: the user's value goes along.
    if (remote && own_omp) vars.emplace_back("OMP_NUM_THREADS", own_omp);
    vars.insert(vars.end(), options_.extra_env.begin(), options_.extra_env.end());
    RankProcess &proc = ranks_[static_cast<size_t>(rank)];
    proc.rank = rank;
    bool ok;
    if (remote) {
      // One agent per rank: each rank keeps its own exit status, pipes and process group here,
      // so naming a failed rank, tagging and stopping work as for local ranks, and the hosts
      // need nothing but a shell (no ddlrun of their own).
      proc.host = placement[static_cast<size_t>(rank)].host;
      std::vector<std::string> command =
          user_omp ? options_.command
                   : with_remote_omp_threads(options_.command,
                                             placement[static_cast<size_t>(rank)].local_size);
      ok = spawn_rank(&proc, agent_command(options_.launch_agent, proc.host, vars, command),
                      rank_environment(environ, {}), &error);
    } else {
      ok = spawn_rank(&proc, options_.command, rank_environment(environ, vars), &error);
    }
    if (!ok) {
      std::fprintf(stderr, "ddlrun: cannot start rank %d: %s\n", rank, error.c_str());
      exit_status_ = 1;
      stop_ranks(SIGTERM, StopReason::kSpawnFailed);
      return;
    }
  }
}

bool Job::spawn_rank(RankProcess *proc, const std::vector<std::string> &command,
                     const std::vector<std::string> &env, std::string *error) {
  // Everything the child needs is prepared before fork.
  std::vector<char *> argv, envp;
  for (const std::string &arg : command) argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  for (const std::string &var : env) envp.push_back(const_cast<char *>(var.c_str()));
  envp.push_back(nullptr);

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (options_.tag_output && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    *error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      if (fd >= 0) close(fd);
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      if (fd >= 0) close(fd);
    return false;
  }
  if (pid == 0) become_rank(argv.data(), envp.data(), out_pipe[1], err_pipe[1]);

  // Also here, not only in the child: a signal sent right after fork must reach the group.
  setpgid(pid, pid);
  proc->pid = pid;
  proc->running = true;
  if (options_.tag_output) {
    close(out_pipe[1]);
    close(err_pipe[1]);
    proc->out_fd = out_pipe[0];
    proc->err_fd = err_pipe[0];
    proc->out_tagger = std::make_unique<LineTagger>(proc->rank, STDOUT_FILENO);
    proc->err_tagger = std::make_unique<LineTagger>(proc->rank, STDERR_FILENO);
  }
  return true;
}

void Job::become_rank(char *const *argv, char *const *envp, int out_fd, int err_fd) {
  // Its own process group: stopping a rank reaches what it started (sh -c pipelines), and a
  // terminal's Ctrl-C reaches the ranks once, through ddlrun, not twice.
  setpgid(0, 0);
  // If ddlrun dies without cleaning up (SIGKILL), the kernel kills the rank.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher_pid_) _exit(1);  // ddlrun died before prctl took effect
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
  sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  execvpe(argv[0], argv, envp);
  std::fprintf(stderr, "ddlrun: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

void Job::event_loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<int *, LineTagger *>> streams;  // parallel to fds[1..]
  for (;;) {
    if (running_count() == 0) {
      if (!pipes_open()) break;
      if (!draining_) {
        draining_ = true;
        drain_until_ = Clock::now() + kDrainTime;
      } else if (Clock::now() >= drain_until_) {
        break;
      }
    }
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    streams.clear();
    for (RankProcess &proc : ranks_) {
      for (auto stream : {std::make_pair(&proc.out_fd, proc.out_tagger.get()),
                          std::make_pair(&proc.err_fd, proc.err_tagger.get())}) {
        if (*stream.first < 0) continue;
        fds.push_back(pollfd{*stream.first, POLLIN, 0});
        streams.push_back(stream);
      }
    }
    int ready = poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) {
      std::fprintf(stderr, "ddlrun: poll: %s\n", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never spin hot
    }
    if (ready > 0) {
      if (fds[0].revents) handle_signals();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) read_output(streams[i - 1].first, streams[i - 1].second);
      }
    }
    check_deadlines();
  }
}

int Job::poll_timeout_ms() const {
  bool any = false;
  Clock::time_point next;
  auto consider = [&](bool active, Clock::time_point when) {
    if (active && (!any || when < next)) {
      next = when;
      any = true;
    }
  };
  consider(have_deadline_ && stop_reason_ == StopReason::kNone, deadline_);
  consider(kill_pending_, kill_at_);
  consider(draining_, drain_until_);
  if (!any) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left + 1);
}

void Job::check_deadlines() {
  Clock::time_point now = Clock::now();
  if (have_deadline_ && stop_reason_ == StopReason::kNone && now >= deadline_) {
    std::fprintf(stderr, "ddlrun: timeout: the job ran past --timeout %g s; stopping %s\n",
                 options_.timeout_sec, plural_ranks(running_count()).c_str());
    exit_status_ = 124;
    stop_ranks(SIGTERM, StopReason::kTimeout);
  }
  if (kill_pending_ && now >= kill_at_) {
    kill_pending_ = false;
    if (running_count() > 0) {
      std::fprintf(stderr, "ddlrun: %s still running %d ms after SIGTERM; sending SIGKILL\n",
                   plural_ranks(running_count()).c_str(), options_.grace_ms);
      signal_running(SIGKILL);
    }
  }
}

void Job::handle_signals() {
  signalfd_siginfo info;
  for (;;) {
    ssize_t n = read(signal_fd_, &info, sizeof(info));
    if (n != static_cast<ssize_t>(sizeof(info))) return;  // EAGAIN: all read
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap_children();
      continue;
    }
    if (stop_reason_ == StopReason::kNone) {
      std::fprintf(stderr, "ddlrun: got %s; passing it on to %s\n", describe_signal(sig).c_str(),
                   plural_ranks(running_count()).c_str());
      exit_status_ = 128 + sig;
      stop_ranks(sig, StopReason::kSignal);
    } else if (running_count() > 0) {
      // Asked again while stopping: the user does not want to wait for the grace period.
      std::fprintf(stderr, "ddlrun: got %s again; killing %s now\n", describe_signal(sig).c_str(),
                   plural_ranks(running_count()).c_str());
      kill_pending_ = false;
      signal_running(SIGKILL);
    }
  }
}

void Job::reap_children() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (RankProcess &proc : ranks_) {
      if (proc.pid == pid && proc.running) on_rank_exit(&proc, status);
    }
    if (pid == store_.pid()) on_store_exit(status);
    // Other pids are orphaned grandchildren (we are their subreaper): just reaped.
  }
}

void Job::on_rank_exit(RankProcess *proc, int status) {
  proc->running = false;
  bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed || stop_reason_ != StopReason::kNone) return;
  int others = running_count();
  if (options_.keep_going && WIFSIGNALED(status) && others > 0) {
    std::fprintf(stderr, "ddlrun: rank %d (pid %d) %s; the other %s go on (--keep-going)\n",
                 proc->rank, static_cast<int>(proc->pid), describe_exit(status).c_str(),
                 plural_ranks(others).c_str());
    return;
  }
  std::string who = proc->host.empty()
                        ? "(pid " + std::to_string(proc->pid) + ")"
                        : "on " + proc->host + " (agent pid " + std::to_string(proc->pid) + ")";
  std::fprintf(stderr, "ddlrun: rank %d %s %s%s\n", proc->rank, who.c_str(),
               describe_exit(status).c_str(),
               others == 0   ? ""
               : others == 1 ? "; stopping the other rank"
                             : ("; stopping the other " + plural_ranks(others)).c_str());
  exit_status_ = exit_code_of(status);
  stop_ranks(SIGTERM, StopReason::kRankFailed);
}

// The ranks meet through the torch store; without it they would wait on it until torch's
// timeout. So its end, while ranks run, ends the job as a failed rank does.
void Job::on_store_exit(int status) {
  store_.forget();
  const int others = running_count();
  if (stop_reason_ != StopReason::kNone || others == 0) return;
  std::fprintf(stderr,
               "ddlrun: --torch-store: the torch store %s while the job ran; stopping the %s\n",
               describe_exit(status).c_str(), plural_ranks(others).c_str());
  exit_status_ = 1;
  stop_ranks(SIGTERM, StopReason::kRankFailed);
}

void Job::stop_ranks(int sig, StopReason reason) {
  stop_reason_ = reason;
  signal_running(sig);
  if (sig != SIGKILL) {
    kill_pending_ = true;
    kill_at_ = Clock::now() + std::chrono::milliseconds(options_.grace_ms);
  }
}

void Job::signal_running(int sig) {
  for (const RankProcess &proc : ranks_) {
    if (!proc.running) continue;
    if (kill(-proc.pid, sig) != 0) kill(proc.pid, sig);
  }
}

void Job::read_output(int *fd, LineTagger *tagger) {
  char buffer[65536];
  ssize_t n = read(*fd, buffer, sizeof(buffer));
  if (n > 0) {
    tagger->feed(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    tagger->flush();
    close_fd(fd);
  }
}

int Job::running_count() const {
  int n = 0;
  for (const RankProcess &proc : ranks_) n += proc.running ? 1 : 0;
  return n;
}

bool Job::pipes_open() const {
  for (const RankProcess &proc : ranks_) {
    if (proc.out_fd >= 0 || proc.err_fd >= 0) return true;
  }
  return false;
}

bool Job::any_group_alive() const {
  for (const RankProcess &proc : ranks_) {
    if (proc.pid > 0 && kill(-proc.pid, 0) == 0) return true;
  }
  return false;
}

void Job::sweep_leftovers() {
  // Every rank has exited, but what a rank started in its process group may live on. Nothing
  // of the job may outlive ddlrun: SIGTERM, a grace period, then SIGKILL.
  auto reap_any = [] {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  };
  reap_any();
  if (!any_group_alive()) return;
  for (const RankProcess &proc : ranks_) {
    if (proc.pid > 0) kill(-proc.pid, SIGTERM);
  }
  Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(options_.grace_ms);
  while (any_group_alive() && Clock::now() < give_up) {
    reap_any();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const RankProcess &proc : ranks_) {
    if (proc.pid > 0) kill(-proc.pid, SIGKILL);
  }
  Clock::time_point reaped_by = Clock::now() + std::chrono::seconds(1);
  while (any_group_alive() && Clock::now() < reaped_by) {
    reap_any();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int run_job(const LaunchOptions &options) {
  Job job(options);
  return job.run();
}

}  // namespace ddlrun

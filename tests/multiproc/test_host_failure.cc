// Hosts that fail: 2 emulated hosts (network namespaces on a bridge) x 2 ranks, a large
// allreduce (or alltoall, or a ring of sends and receives) in a loop; then one host's link
// goes down, or all its ranks are killed. Every
// rank must fail within 10 s with DDL_ERR_REMOTE naming the unreachable ranks, then shrink:
// the side with rank 0 goes on in a communicator of its 2 ranks, the cut-off side refuses
// (a minority, ddl_comm_shrink's quorum); and ddl_comm_destroy must return. Needs root (namespaces,
// veth, a bridge); skipped otherwise.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ddl/ddl.h"

namespace {

constexpr int kRanks = 4;  // ranks 0, 1 on host a; 2, 3 on host b
constexpr double kLimitS = 10.0;

// Names unique to this test process (interface names have at most 15 characters), so that
// runs side by side never touch each other's namespaces.
std::string g_prefix;

std::string ns(char host) {
  return g_prefix + "-" + host;
}
std::string veth(char host) {
  return g_prefix + host;
}  // inside the namespace
std::string bridge_port(char host) {
  return g_prefix + host + "p";
}

int sh(const std::string &command) {
  return system((command + " >/dev/null 2>&1").c_str());
}

// Removes the namespaces, ports and bridge of the test process whose prefix is `prefix`.
void teardown_prefix(const std::string &prefix) {
  for (char h : {'a', 'b'}) {
    sh("ip netns del " + prefix + "-" + h);
    sh("ip link del " + prefix + h + "p");
  }
  sh("ip link del " + prefix + "br");
}

void teardown_hosts() {
  if (!g_prefix.empty()) teardown_prefix(g_prefix);
}

// A test process killed before its teardown (a harness's timeout, a stress script's SIGKILL)
// leaves its hosts behind: remove those of "dhf<pid>" processes that are gone.
void remove_stale_hosts() {
  FILE *list = popen("ip netns list 2>/dev/null", "r");
  if (!list) return;
  char line[256];
  std::vector<std::string> stale;
  while (fgets(line, sizeof line, list)) {
    int pid = 0;
    char host = 0;
    if (sscanf(line, "dhf%d-%c", &pid, &host) == 2 && host == 'a' && pid > 0 && kill(pid, 0) != 0 &&
        errno == ESRCH)
      stale.push_back("dhf" + std::to_string(pid));
  }
  pclose(list);
  for (const std::string &prefix : stale) teardown_prefix(prefix);
}

// Two namespaces, each with a veth to a bridge in this one, 10.79.0.1 and .2, 1 Gbit/s.
// False (nothing left behind) when this machine does not allow it.
bool setup_hosts() {
  remove_stale_hosts();
  g_prefix = "dhf" + std::to_string(getpid());  // at most 7 digits: names fit in 15
  teardown_hosts();
  const std::string br = g_prefix + "br";
  if (sh("ip link add " + br + " type bridge") != 0 || sh("ip link set " + br + " up") != 0)
    return false;
  int i = 1;
  for (char h : {'a', 'b'}) {
    const std::string n = ns(h), v = veth(h), p = bridge_port(h);
    const std::string ip = "ip -n " + n + " ";
    if (sh("ip netns add " + n) != 0 || sh("ip link add " + v + " type veth peer name " + p) != 0 ||
        sh("ip link set " + v + " netns " + n) != 0 ||
        sh("ip link set " + p + " master " + br + " up") != 0 ||
        sh(ip + "addr add 10.79.0." + std::to_string(i++) + "/24 dev " + v) != 0 ||
        sh(ip + "link set " + v + " up") != 0 || sh(ip + "link set lo up") != 0) {
      teardown_hosts();
      return false;
    }
    // Shaped like the bench's hosts; a machine without tbf still runs the test.
    sh("ip netns exec " + n + " tc qdisc add dev " + v +
       " root tbf rate 1gbit burst 256kb latency 50ms");
  }
  return true;
}

void skip_unless_hosts() {
  if (geteuid() != 0) cr_skip_test("needs root: network namespaces emulate the hosts");
  if (!setup_hosts()) cr_skip_test("cannot make network namespaces, veth pairs and a bridge here");
}

// What the ranks run in a loop until it fails.
enum class Work { kAllreduce, kAlltoall, kSendRecv };

// One call of `work` on 16 MB: a few hundred ms at 1 Gbit/s.
ddl_result_t run_work(Work work, std::vector<float> &data, std::vector<float> &out, int rank,
                      ddl_comm_t comm) {
  switch (work) {
    case Work::kAllreduce:
      return ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm);
    case Work::kAlltoall:
      return ddl_alltoall(data.data(), out.data(), data.size() / kRanks, DDL_FLOAT32, comm);
    case Work::kSendRecv: {
      // Around the ring, across the host boundary at ranks 1 -> 2 and 3 -> 0.
      ddl_group_start();
      ddl_send(data.data(), data.size(), DDL_FLOAT32, (rank + 1) % kRanks, comm);
      ddl_recv(out.data(), out.size(), DDL_FLOAT32, (rank + kRanks - 1) % kRanks, comm);
      return ddl_group_end();
    }
  }
  return DDL_ERR_INTERNAL;
}

// What a rank reports on its pipe: "R code elapsed message" when its call failed, then
// "R destroyed D" when ddl_comm_destroy returned after D seconds.
[[noreturn]] void run_rank(int rank, int out_fd, int port, Work work) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  const char host = rank < 2 ? 'a' : 'b';
  const int fd = open(("/var/run/netns/" + ns(host)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(20);
  close(fd);
  // As `ip netns exec` does: UCX finds its network devices in /sys/class/net, which shows
  // the namespace of whoever mounted /sys; a private mount of it shows this one's.
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 ||
      umount2("/sys", MNT_DETACH) != 0 || mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0)
    _exit(22);
  setenv("DDL_HOST_ID", std::string(1, host).c_str(), 1);
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  config.timeout_ms = 60000;  // far past the 10 s: only the failure detection may end the wait
  config.job_token = "test-token";
  ddl_comm_t comm = nullptr;
  const std::string root = "10.79.0.1:" + std::to_string(port);
  if (ddl_comm_init(&comm, kRanks, rank, root.c_str(), &config) != DDL_SUCCESS) {
    dprintf(out_fd, "%d init-failed %s\n", rank, ddl_comm_last_error(nullptr));
    _exit(21);
  }
  std::vector<float> data(4 << 20, 1.0f), out(4 << 20);
  ddl_result_t r = DDL_SUCCESS;
  for (int i = 0; r == DDL_SUCCESS; ++i) {
    if (i == 1) dprintf(out_fd, "%d ready\n", rank);
    r = run_work(work, data, out, rank, comm);
  }
  // A group's failure is in the thread's last error, a call's in the communicator's.
  std::string message =
      work == Work::kSendRecv ? ddl_comm_last_error(nullptr) : ddl_comm_last_error(comm);
  for (char &c : message)
    if (c == '\n') c = ' ';
  dprintf(out_fd, "%d failed %d %.1000s\n", rank, static_cast<int>(r), message.c_str());
  // Then the survivors go on without the lost host: "R shrunk SIZE SECONDS" when the shrink
  // and a first allreduce on its communicator succeed, else "R shrink-failed CODE message".
  ddl_comm_t shrunk = nullptr;
  const auto shrink_start = std::chrono::steady_clock::now();
  r = ddl_comm_shrink(comm, nullptr, 0, &shrunk);
  float one = 1, sum = 0;
  if (r == DDL_SUCCESS) r = ddl_allreduce(&one, &sum, 1, DDL_FLOAT32, DDL_SUM, shrunk);
  int size = 0;
  if (r == DDL_SUCCESS) ddl_comm_size(shrunk, &size);
  if (r == DDL_SUCCESS && sum == static_cast<float>(size)) {
    dprintf(out_fd, "%d shrunk %d %.2f\n", rank, size,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - shrink_start).count());
  } else {
    message = ddl_comm_last_error(shrunk ? shrunk : comm);
    for (char &c : message)
      if (c == '\n') c = ' ';
    dprintf(out_fd, "%d shrink-failed %d %.1000s\n", rank, static_cast<int>(r), message.c_str());
  }
  if (shrunk) ddl_comm_destroy(shrunk);
  const auto start = std::chrono::steady_clock::now();
  ddl_comm_destroy(comm);
  dprintf(out_fd, "%d destroyed %.2f\n", rank,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  _exit(0);
}

struct Outcome {
  bool failed = false;
  double detected_s = -1;  // since the fault
  int code = DDL_SUCCESS;
  std::string message;
  bool destroyed = false;
  double destroy_s = -1;
  int shrunk_size = 0;  // of the communicator ddl_comm_shrink returned (0: none)
  double shrink_s = -1;
  std::string shrink_error;
};

enum class Fault { kLinkDown, kHostKilled };

// Runs the 4 ranks, injects the fault once every rank has finished an allreduce, and
// collects what each rank reports (up to kLimitS + the destroy's budget after the fault).
std::vector<Outcome> run_with_fault(Fault fault, Work work = Work::kAllreduce) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  const int port = 29000 + getpid() % 1000;
  std::vector<pid_t> pids(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(fds[0]);
      run_rank(r, fds[1], port, work);
    }
  }
  close(fds[1]);
  std::vector<Outcome> outcomes(kRanks);
  std::string pending;
  int ready = 0;
  bool injected = false;
  auto fault_at = std::chrono::steady_clock::now();
  const auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::seconds(60);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (!injected && ready == kRanks) {
      if (fault == Fault::kLinkDown) {
        sh("ip -n " + ns('b') + " link set " + veth('b') + " down");
      } else {
        kill(pids[2], SIGKILL);
        kill(pids[3], SIGKILL);
      }
      injected = true;
      fault_at = std::chrono::steady_clock::now();
      deadline = fault_at + std::chrono::seconds(static_cast<int>(kLimitS) + 30);
    }
    pollfd p = {fds[0], POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // every rank has exited
    pending.append(buf, static_cast<size_t>(n));
    size_t eol;
    while ((eol = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      int rank = -1, used = 0;
      char word[32] = {};
      if (sscanf(line.c_str(), "%d %31s %n", &rank, word, &used) < 2 || rank < 0 || rank >= kRanks)
        continue;
      Outcome &o = outcomes[rank];
      const std::string rest = line.substr(static_cast<size_t>(used));
      if (!strcmp(word, "ready")) {
        ++ready;
      } else if (!strcmp(word, "failed")) {
        o.failed = true;
        o.detected_s =
            injected
                ? std::chrono::duration<double>(std::chrono::steady_clock::now() - fault_at).count()
                : -1;
        o.code = atoi(rest.c_str());
        o.message = rest.substr(rest.find(' ') + 1);
        fprintf(stderr, "rank %d after %.2f s: %s: %s\n", rank, o.detected_s,
                ddl_result_string(static_cast<ddl_result_t>(o.code)), o.message.c_str());
      } else if (!strcmp(word, "shrunk")) {
        sscanf(rest.c_str(), "%d %lf", &o.shrunk_size, &o.shrink_s);
        fprintf(stderr, "rank %d: shrunk to %d ranks in %.2f s\n", rank, o.shrunk_size, o.shrink_s);
      } else if (!strcmp(word, "shrink-failed")) {
        o.shrink_error = rest;
        fprintf(stderr, "rank %d: shrink failed: %s\n", rank, rest.c_str());
      } else if (!strcmp(word, "destroyed")) {
        o.destroyed = true;
        o.destroy_s = atof(rest.c_str());
        fprintf(stderr, "rank %d: ddl_comm_destroy returned after %.2f s\n", rank, o.destroy_s);
      } else {
        fprintf(stderr, "%s\n", line.c_str());
      }
    }
  }
  close(fds[0]);
  for (pid_t pid : pids) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  cr_assert(injected, "the ranks never all finished a first allreduce");
  return outcomes;
}

bool contains(const std::string &text, const std::string &needle) {
  return text.find(needle) != std::string::npos;
}

void check_failed_in_time(const Outcome &o, int rank) {
  cr_expect(o.failed, "rank %d never failed", rank);
  cr_expect(o.code == DDL_ERR_REMOTE, "rank %d: %s: %s", rank,
            ddl_result_string(static_cast<ddl_result_t>(o.code)), o.message.c_str());
  cr_expect(o.detected_s >= 0 && o.detected_s < kLimitS, "rank %d took %.2f s", rank, o.detected_s);
  cr_expect(o.destroyed && o.destroy_s < 7.0, "rank %d: destroy returned: %d, after %.2f s", rank,
            o.destroyed, o.destroy_s);
}

}  // namespace

TestSuite(host_failure, .fini = teardown_hosts);

// No RST ever comes: only silence tells. Both sides of the cut fail, each naming the ranks
// on the other side, all of them.
Test(host_failure, a_link_down_is_named_on_every_rank_within_10_s) {
  skip_unless_hosts();
  const std::vector<Outcome> outcomes = run_with_fault(Fault::kLinkDown);
  for (int r = 0; r < kRanks; ++r) {
    check_failed_in_time(outcomes[r], r);
    // Each side finds the other failed: only the side with rank 0 (half of the ranks, with
    // the lowest) goes on; the other refuses to make a second job.
    if (r < 2)
      cr_expect(outcomes[r].shrunk_size == 2, "rank %d: shrunk to %d: %s", r,
                outcomes[r].shrunk_size, outcomes[r].shrink_error.c_str());
    else
      cr_expect(outcomes[r].shrunk_size == 0 && contains(outcomes[r].shrink_error, "minority"),
                "rank %d: shrunk to %d: %s", r, outcomes[r].shrunk_size,
                outcomes[r].shrink_error.c_str());
    const char other = r < 2 ? 'b' : 'a';
    const int first = r < 2 ? 2 : 0;
    for (int lost = first; lost < first + 2; ++lost)
      cr_expect(
          contains(outcomes[r].message, "rank " + std::to_string(lost) + " (host " + other + ")"),
          "rank %d does not name rank %d: %s", r, lost, outcomes[r].message.c_str());
  }
}

// A killed process's connections are reset by its kernel: the survivors know at once, and
// name every rank of the dead host, not only the one their failed transfer was with.
Test(host_failure, a_killed_host_is_named_on_the_survivors_within_10_s) {
  skip_unless_hosts();
  const std::vector<Outcome> outcomes = run_with_fault(Fault::kHostKilled);
  for (int r = 0; r < 2; ++r) {
    check_failed_in_time(outcomes[r], r);
    cr_expect(outcomes[r].shrunk_size == 2, "rank %d: shrunk to %d: %s", r, outcomes[r].shrunk_size,
              outcomes[r].shrink_error.c_str());
    for (int lost = 2; lost < 4; ++lost)
      cr_expect(contains(outcomes[r].message, "rank " + std::to_string(lost) + " (host b)"),
                "rank %d does not name killed rank %d: %s", r, lost, outcomes[r].message.c_str());
  }
}

// The same in the middle of alltoalls and of sends and receives across the hosts: the
// survivors name the killed ranks, nothing waits for a deadline.
void expect_killed_host_named(Work work, const char *what) {
  const std::vector<Outcome> outcomes = run_with_fault(Fault::kHostKilled, work);
  for (int r = 0; r < 2; ++r) {
    check_failed_in_time(outcomes[r], r);
    cr_expect(contains(outcomes[r].message, "rank 2") || contains(outcomes[r].message, "rank 3"),
              "%s: rank %d does not name a killed rank: %s", what, r, outcomes[r].message.c_str());
  }
}

Test(host_failure, a_killed_host_during_alltoalls_is_named_within_10_s) {
  skip_unless_hosts();
  expect_killed_host_named(Work::kAlltoall, "alltoall");
}

Test(host_failure, a_killed_host_during_sends_and_receives_is_named_within_10_s) {
  skip_unless_hosts();
  expect_killed_host_named(Work::kSendRecv, "send/recv");
}

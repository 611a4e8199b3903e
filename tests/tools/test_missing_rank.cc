// A rank that never arrives, as a person at a terminal meets it: rank 0 of 2 started alone says
// within seconds that rank 1 is missing, how long is left and what usually causes it, then
// fails with the timeout at the deadline; rank 1 of 2 started alone says it cannot get in to
// rank 0. Real processes (init_probe: ddl_comm_init_from_env) with deadlines, killed at the end.
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "spawn.h"

namespace {

constexpr int kTimeoutMs = 12000;     // DDL_TIMEOUT_MS of the lone rank
constexpr double kNoticeWithin = 10;  // seconds by which the lone rank must have said so

void teardown() {
  ddltest::kill_all_spawned();
}

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  cr_assert(bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// One rank of a 2-rank job at root 127.0.0.1:port, alone, at the default log level.
std::vector<std::string> lone_rank(int rank, int port) {
  return {"/usr/bin/env",
          "-u",
          "DDL_LOG_LEVEL",
          "-u",
          "DDL_JOB_TOKEN",
          "DDL_RANK=" + std::to_string(rank),
          "DDL_WORLD_SIZE=2",
          "DDL_ROOT=127.0.0.1:" + std::to_string(port),
          "DDL_TIMEOUT_MS=" + std::to_string(kTimeoutMs),
          INIT_PROBE_PATH};
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Polls the job's stderr until `part` appears or `seconds` pass (or the job ends).
bool wait_for_stderr(ddltest::Spawned &job, const std::string &part, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (contains(job.err(), part)) return true;
    if (job.wait(0.05)) return contains(job.err(), part);
  }
  return contains(job.err(), part);
}

}  // namespace

TestSuite(missing_rank, .fini = teardown, .timeout = 120);

Test(missing_rank, a_lone_rank_says_who_is_missing_then_times_out) {
  // Both at once: rank 0 of one job, rank 1 of another (whose rank 0 never comes).
  const int port0 = free_port(), port1 = free_port();
  ddltest::Spawned root(lone_rank(0, port0));
  ddltest::Spawned peer(lone_rank(1, port1));

  const std::string waiting = "bootstrap: rank 0: still waiting for rank 1 to connect";
  cr_assert(wait_for_stderr(root, waiting, kNoticeWithin),
            "rank 0 did not name the missing rank 1 within %.0f s; stderr:\n%s", kNoticeWithin,
            root.err().c_str());
  const std::string err0 = root.err();
  cr_assert(!root.wait(0), "rank 0 gave up before its deadline; stderr:\n%s", err0.c_str());
  for (const char *part : {"(1 of 2 arrived;", "s left of the 12 s timeout", "not started",
                           "DDL_ROOT", "firewall", "warn:"}) {
    cr_assert(contains(err0, part), "no '%s' in rank 0's notice:\n%s", part, err0.c_str());
  }

  cr_assert(
      wait_for_stderr(peer, "bootstrap: rank 1: still waiting to get in to rank 0", kNoticeWithin),
      "rank 1 did not say it cannot reach rank 0 within %.0f s; stderr:\n%s", kNoticeWithin,
      peer.err().c_str());
  const std::string err1 = peer.err();
  for (const char *part : {"127.0.0.1:", "s left of the 12 s timeout", "Connection refused",
                           "rank 0 was not started"}) {
    cr_assert(contains(err1, part), "no '%s' in rank 1's notice:\n%s", part, err1.c_str());
  }

  // Then each fails with the timeout error at its deadline (not before: the message says how
  // long it waited).
  const double end_within = kTimeoutMs / 1000.0 + 30;
  cr_assert(root.wait(end_within), "rank 0 still running long after its deadline");
  cr_assert_eq(root.exit_status(), 1, "stderr:\n%s", root.err().c_str());
  const std::string final0 = root.err();
  const std::string timed_out = "bootstrap: rank 0: timed out after ";
  size_t at = final0.find(timed_out);
  cr_assert(at != std::string::npos && contains(final0, "init_probe: DDL_ERR_TIMEOUT") &&
                contains(final0, "waiting for rank 1 to connect (1 of 2 arrived)"),
            "stderr:\n%s", final0.c_str());
  long waited_ms = std::stol(final0.substr(at + timed_out.size()));
  cr_assert(waited_ms >= kTimeoutMs, "timed out after %ld ms, before the %d ms deadline", waited_ms,
            kTimeoutMs);

  cr_assert(peer.wait(end_within), "rank 1 still running long after its deadline");
  cr_assert_eq(peer.exit_status(), 1, "stderr:\n%s", peer.err().c_str());
  cr_assert(contains(peer.err(), "init_probe: DDL_ERR_TIMEOUT") &&
                contains(peer.err(), "never let this rank in"),
            "stderr:\n%s", peer.err().c_str());
}

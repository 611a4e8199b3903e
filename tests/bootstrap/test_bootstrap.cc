// The bootstrap with threads as ranks, in one process: exchanges of 1..8 ranks, strangers and
// impostors that must not disturb a job, ranks that never come or leave, the rendezvous file.
// Assertions run on the test's main thread only (Criterion's asserts are not thread-safe);
// rank threads record what happened.
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"
#include "tests/bootstrap/stranger.h"
#include "tests/bootstrap/threads_as_ranks.h"
#include "tests/loopback.h"

using namespace ddl;
using namespace ddltest;

namespace {

// A raw TCP client standing in for a stranger: connects (retrying until the root listens),
// sends `payload`, then holds the connection until `release` is set or 10 s pass.
void stranger(int port, std::string payload, std::atomic<bool> *release, std::atomic<int> *ready) {
  int fd = -1;
  for (int i = 0; i < 300 && fd < 0; ++i) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd, reinterpret_cast<struct sockaddr *>(&a), sizeof a) != 0) {
      close(fd);
      fd = -1;
      sleep_ms(10);
    }
  }
  if (fd >= 0 && !payload.empty()) {
    // The root may drop us mid-way: MSG_NOSIGNAL, and stop at the first error.
    size_t off = 0;
    while (off < payload.size()) {
      ssize_t n = send(fd, payload.data() + off, payload.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  ready->fetch_add(1);
  for (int i = 0; i < 1000 && !release->load(); ++i) sleep_ms(10);
  if (fd >= 0) close(fd);
}

std::string hello_header(uint32_t magic, uint16_t version, uint16_t token_len, uint32_t rank,
                         uint32_t nranks) {
  std::string h(16, '\0');
  uint8_t *p = reinterpret_cast<uint8_t *>(&h[0]);
  uint32_t v32[] = {htonl(magic), htonl(rank), htonl(nranks)};
  uint16_t v16[] = {htons(version), htons(token_len)};
  memcpy(p, &v32[0], 4);
  memcpy(p + 4, &v16[0], 2);
  memcpy(p + 6, &v16[1], 2);
  memcpy(p + 8, &v32[1], 4);
  memcpy(p + 12, &v32[2], 4);
  return h;
}

}  // namespace

Test(bootstrap, single_rank_needs_no_network) {
  std::unique_ptr<Bootstrap> b;
  BootstrapOptions o = opts_for(0, 1, "");  // no address, no file: none needed
  Status st = Bootstrap::create(o, &b);
  cr_assert(st.ok(), "%s", st.message().c_str());
  std::vector<std::string> all;
  cr_assert(b->allgather("solo", &all).ok());
  cr_assert_eq(all.size(), 1u);
  cr_assert_str_eq(all[0].c_str(), "solo");
  cr_assert(b->barrier().ok());
  cr_assert(b->fds().empty());
  st = b->allgather(std::string(Bootstrap::kMaxBlobBytes + 1, 'x'), &all);
  cr_assert_eq(st.code(), DDL_ERR_INVALID_ARGUMENT, "%s", st.message().c_str());
}

Test(bootstrap, invalid_options) {
  std::unique_ptr<Bootstrap> b;
  struct Case {
    BootstrapOptions o;
    const char *word;
  } cases[] = {
      {opts_for(0, 0, "127.0.0.1:1"), "nranks 0"},
      {opts_for(2, 2, "127.0.0.1:1"), "rank 2"},
      {opts_for(-1, 2, "127.0.0.1:1"), "rank -1"},
      {opts_for(0, 2, "127.0.0.1:0"), "port 0"},
      {opts_for(0, 2, ""), "neither"},
      {opts_for(0, 2, "localhost"), "no port"},
      {opts_for(0, 2, "[::1:5"), "[ipv6]:port"},
      {opts_for(0, 2, "127.0.0.1:1", 0), "timeout_ms"},
  };
  for (Case &c : cases) {
    Status st = Bootstrap::create(c.o, &b);
    cr_assert_eq(st.code(), DDL_ERR_INVALID_ARGUMENT, "%s: %s", c.word, st.message().c_str());
    cr_assert(contains(st, c.word), "'%s' not in: %s", c.word, st.message().c_str());
  }
  BootstrapOptions o = opts_for(0, 2, "127.0.0.1:1");
  o.job_token.assign(257, 't');
  cr_assert_eq(Bootstrap::create(o, &b).code(), DDL_ERR_INVALID_ARGUMENT);
}

Test(bootstrap, allgather_and_barrier_2_3_8_ranks) {
  for (int n : {2, 3, 8}) {
    std::string root = "127.0.0.1:" + std::to_string(free_port());
    assert_all_ok(run_job(n, root, 6));
  }
}

Test(bootstrap, hostname_and_ipv6_addresses) {
  assert_all_ok(run_job(2, "localhost:" + std::to_string(free_port()), 2));
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a = {};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool v6 = fd >= 0 && bind(fd, reinterpret_cast<struct sockaddr *>(&a), sizeof a) == 0;
  if (fd >= 0) close(fd);
  if (v6) assert_all_ok(run_job(3, "[::1]:" + std::to_string(free_port()), 2));
}

Test(bootstrap, root_starts_late) {
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto sts = run_ranks(3, [&](int r) -> Status {
    if (r == 0) sleep_ms(500);  // the others retry until it listens
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 3, root), &b));
    std::vector<std::string> all;
    return b->allgather(std::to_string(r), &all);
  });
  assert_all_ok(sts);
}

Test(bootstrap, wrong_token_is_refused_while_the_job_completes) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  Status impostor;
  std::thread bad([&] {
    BootstrapOptions o = opts_for(1, 3, root, 1500);
    o.job_token = "not-the-token";
    std::unique_ptr<Bootstrap> b;
    impostor = Bootstrap::create(o, &b);
  });
  auto t0 = Clock::now();
  auto sts = run_ranks(3, [&](int r) -> Status {
    if (r == 1) sleep_ms(200);  // the impostor claims rank 1 first
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 3, root), &b));
    std::vector<std::string> all;
    DDL_RETURN_IF_ERROR(b->allgather(std::string(r + 1, 'x'), &all));
    return all[2] == "xxx" ? Status::Ok() : internal_error("bad result");
  });
  bad.join();
  assert_all_ok(sts);
  // Refused until its deadline (DDL_ERR_TIMEOUT), or told at once that the root that dropped
  // its hellos has closed its port (DDL_ERR_REMOTE, once the job's connect phase is over);
  // either way never admitted, and the message says the handshake failed.
  cr_assert(impostor.code() == DDL_ERR_TIMEOUT || impostor.code() == DDL_ERR_REMOTE, "%s",
            impostor.message().c_str());
  cr_assert(contains(impostor, "handshake"), "%s", impostor.message().c_str());
  cr_assert(seconds_since(t0) < 4.0);
  cr_log_info("impostor: %s", impostor.message().c_str());
}

Test(bootstrap, strangers_do_not_disturb_the_job) {
  quiet_logs();
  int port = free_port();
  std::string root = "127.0.0.1:" + std::to_string(port);
  std::string junk(1 << 20, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
  std::string huge_token =
      hello_header(bootstrap::wire::kMagic, bootstrap::wire::kVersion, 0xffff, 1, 3);
  std::string bad_version = hello_header(bootstrap::wire::kMagic, 99, 0, 1, 3);
  std::vector<std::string> payloads = {
      "GET / HTTP/1.0\r\n\r\n",  // garbage
      junk,                      // a megabyte of it
      huge_token + "xx",         // a length that must not be trusted
      bad_version,
      huge_token.substr(0, 6),  // a partial hello, then silence
      "",                       // connects and stalls
  };
  std::atomic<bool> release{false};
  std::atomic<int> ready{0};
  auto t0 = Clock::now();
  std::vector<Status> sts(3);
  std::thread root_thread([&] {
    std::unique_ptr<Bootstrap> b;
    sts[0] = Bootstrap::create(opts_for(0, 3, root), &b);
    std::vector<std::string> all;
    if (sts[0].ok()) sts[0] = b->allgather("zero", &all);
  });
  std::vector<std::thread> strangers;
  for (const std::string &p : payloads) strangers.emplace_back(stranger, port, p, &release, &ready);
  while (ready.load() < static_cast<int>(payloads.size()) && seconds_since(t0) < 5) sleep_ms(5);
  std::vector<std::thread> ranks;
  for (int r = 1; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> b;
      sts[r] = Bootstrap::create(opts_for(r, 3, root), &b);
      std::vector<std::string> all;
      if (sts[r].ok()) sts[r] = b->allgather("r", &all);
    });
  }
  for (auto &t : ranks) t.join();
  root_thread.join();
  double took = seconds_since(t0);
  release = true;
  for (auto &t : strangers) t.join();
  assert_all_ok(sts);
  cr_assert(took < 4.0, "the job took %.1f s", took);
}

Test(bootstrap, duplicate_rank_and_wrong_nranks_fail_fast) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  std::atomic<int> rank1_ok{0};
  Status wrong_n, dup;
  // Ranks 0, 2, two claimants of rank 1, and a rank of a 5-rank job. Rank 2 comes last: once
  // every rank is in, rank 0 stops listening and latecomers could only time out.
  auto sts = run_ranks(5, [&](int t) -> Status {
    int rank = t == 3 ? 1 : t == 4 ? 3 : t;
    int n = t == 4 ? 5 : 3;
    if (t >= 3) sleep_ms(200);
    if (t == 2) sleep_ms(600);
    std::unique_ptr<Bootstrap> b;
    Status st = Bootstrap::create(opts_for(rank, n, root, 3000), &b);
    if (t == 4) {
      wrong_n = st;
      return Status::Ok();
    }
    if (rank == 1 && !st.ok()) {
      dup = st;
      return Status::Ok();
    }
    DDL_RETURN_IF_ERROR(st);
    if (rank == 1) rank1_ok++;
    std::vector<std::string> all;
    return b->allgather(std::to_string(rank), &all);
  });
  assert_all_ok(sts);
  cr_assert_eq(rank1_ok.load(), 1);
  cr_assert_eq(dup.code(), DDL_ERR_INVALID_ARGUMENT, "%s", dup.message().c_str());
  cr_assert(contains(dup, "duplicate rank"), "%s", dup.message().c_str());
  cr_assert_eq(wrong_n.code(), DDL_ERR_INVALID_ARGUMENT, "%s", wrong_n.message().c_str());
  cr_assert(contains(wrong_n, "wrong nranks") && contains(wrong_n, "3 ranks"), "%s",
            wrong_n.message().c_str());
}

Test(bootstrap, missing_rank_times_out_naming_it) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto t0 = Clock::now();
  const int timeout = 1500;
  // Rank 2 of 5 never comes; rank 4 neither.
  auto sts = run_ranks(5, [&](int r) -> Status {
    if (r == 2 || r == 4) return Status::Ok();
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 5, root, timeout), &b));
    std::vector<std::string> all;
    return b->allgather("x", &all);
  });
  double took = seconds_since(t0);
  cr_assert_eq(sts[0].code(), DDL_ERR_TIMEOUT, "%s", sts[0].message().c_str());
  cr_assert(contains(sts[0], "waiting for ranks 2, 4"), "%s", sts[0].message().c_str());
  // The ranks that did come learn from rank 0 who is missing, instead of timing out.
  for (int r : {1, 3}) {
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "ranks 2, 4"), "rank %d: %s", r, sts[r].message().c_str());
  }
  cr_assert(took < 2.5, "took %.1f s for a %d ms deadline", took, timeout);
  cr_log_info("rank 0: %s", sts[0].message().c_str());
  cr_log_info("rank 1: %s", sts[1].message().c_str());
}

Test(bootstrap, missing_root_times_out) {
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto t0 = Clock::now();
  std::unique_ptr<Bootstrap> b;
  Status st = Bootstrap::create(opts_for(1, 2, root, 1000), &b);
  cr_assert_eq(st.code(), DDL_ERR_TIMEOUT, "%s", st.message().c_str());
  cr_assert(contains(st, "rank 1: connecting to root " + root), "%s", st.message().c_str());
  cr_assert(contains(st, "Connection refused") && contains(st, "retried for"), "%s",
            st.message().c_str());
  cr_assert(seconds_since(t0) < 2.0);
  cr_log_info("%s", st.message().c_str());
}

Test(bootstrap, peer_that_leaves_is_a_remote_error_naming_it) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  std::vector<Status> second(3);
  auto sts = run_ranks(3, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 3, root, 3000), &b));
    DDL_RETURN_IF_ERROR(b->barrier());
    if (r == 2) return Status::Ok();  // leaves: ~Bootstrap closes its socket
    std::vector<std::string> all;
    Status st = b->allgather("x", &all);
    second[r] = b->barrier();  // a failed bootstrap stays failed
    return st;
  });
  cr_assert(sts[2].ok());
  for (int r : {0, 1}) {
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "rank 2 disconnected"), "rank %d: %s", r, sts[r].message().c_str());
    cr_assert_eq(second[r].code(), DDL_ERR_REMOTE);
    cr_log_info("rank %d: %s", r, sts[r].message().c_str());
  }
}

Test(bootstrap, root_that_leaves_is_a_remote_error) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto sts = run_ranks(3, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 3, root, 3000), &b));
    DDL_RETURN_IF_ERROR(b->barrier());
    if (r == 0) return Status::Ok();
    std::vector<std::string> all;
    return b->allgather("x", &all);
  });
  cr_assert(sts[0].ok());
  for (int r : {1, 2}) {
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "rank 0 (the root"), "rank %d: %s", r, sts[r].message().c_str());
  }
}

Test(bootstrap, silent_rank_times_out_the_exchange) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto t0 = Clock::now();
  auto sts = run_ranks(3, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 3, root, 1000), &b));
    if (r == 2) {
      sleep_ms(1600);  // connected, but never joins the allgather
      return Status::Ok();
    }
    std::vector<std::string> all;
    return b->allgather("x", &all);
  });
  cr_assert_eq(sts[0].code(), DDL_ERR_TIMEOUT, "%s", sts[0].message().c_str());
  cr_assert(contains(sts[0], "allgather #1 timed out") && contains(sts[0], "waiting for rank 2"),
            "%s", sts[0].message().c_str());
  cr_assert_eq(sts[1].code(), DDL_ERR_REMOTE, "%s", sts[1].message().c_str());
  cr_assert(contains(sts[1], "waiting for rank 2"), "%s", sts[1].message().c_str());
  cr_assert(seconds_since(t0) < 2.5);
}

Test(bootstrap, mismatched_collectives_are_reported) {
  quiet_logs();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  auto sts = run_ranks(2, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, 2, root, 2000), &b));
    std::vector<std::string> all;
    return r == 0 ? b->allgather("x", &all) : b->barrier();
  });
  for (int r : {0, 1}) {
    cr_assert_eq(sts[r].code(), DDL_ERR_REMOTE, "rank %d: %s", r, sts[r].message().c_str());
    cr_assert(contains(sts[r], "mismatched collectives"), "rank %d: %s", r,
              sts[r].message().c_str());
  }
}

namespace {

bool file_exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A job of 3 through the rendezvous file, with the root starting last and a stale file from
// an earlier job in the way. Returns the address rank 0 published.
std::string rendezvous_file_job(bool all_local, const std::string &root_addr = "") {
  char dir[] = "/tmp/ddl-bootstrap-test-XXXXXX";
  cr_assert(mkdtemp(dir) != nullptr);
  std::string file = std::string(dir) + "/ddl-job.root";
  FILE *f = fopen(file.c_str(), "w");
  fputs("127.0.0.1:1\n", f);  // stale: nobody listens on port 1
  fclose(f);
  std::string published;
  bool gone_after_create = false;
  auto sts = run_ranks(3, [&](int r) -> Status {
    BootstrapOptions o = opts_for(r, 3, root_addr);
    o.rendezvous_file = file;
    o.all_local = all_local;
    if (r == 0) sleep_ms(300);
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(o, &b));
    // Every rank is in: rank 0 has removed the file already.
    if (r == 0) gone_after_create = !file_exists(file);
    // The others' root_address() is what they read from the file: it must be what rank 0
    // serves, not the stale address.
    std::vector<std::string> all;
    DDL_RETURN_IF_ERROR(b->allgather(b->root_address(), &all));
    for (const std::string &a : all)
      if (a != all[0]) return internal_error("rank %d: ranks disagree on the root address", r);
    if (r == 0) published = b->root_address();
    return b->barrier();
  });
  assert_all_ok(sts);
  cr_assert(gone_after_create, "the rendezvous file outlived the connect phase");
  cr_assert(!file_exists(file));
  rmdir(dir);
  return published;
}

}  // namespace

Test(bootstrap, rendezvous_file_local) {
  std::string addr = rendezvous_file_job(true);
  cr_assert(addr.compare(0, 10, "127.0.0.1:") == 0, "%s", addr.c_str());
}

Test(bootstrap, rendezvous_file_host_address) {
  // All ranks are local here too, but rank 0 is told otherwise: it publishes an address of
  // its host (127.0.0.1 only when the host has no other).
  std::string addr = rendezvous_file_job(false);
  cr_assert(!addr.empty());
  cr_log_info("rank 0 published %s", addr.c_str());
}

Test(bootstrap, rendezvous_file_with_a_given_host) {
  // root_addr with port 0 and a file: rank 0 binds that host on an ephemeral port.
  std::string addr = rendezvous_file_job(false, "127.0.0.1:0");
  cr_assert(addr.compare(0, 10, "127.0.0.1:") == 0, "%s", addr.c_str());
}

Test(bootstrap, rendezvous_file_never_appears) {
  std::unique_ptr<Bootstrap> b;
  BootstrapOptions o = opts_for(1, 2, "", 800);
  o.rendezvous_file = "/tmp/ddl-bootstrap-test-does-not-exist.root";
  auto t0 = Clock::now();
  Status st = Bootstrap::create(o, &b);
  cr_assert_eq(st.code(), DDL_ERR_TIMEOUT, "%s", st.message().c_str());
  cr_assert(contains(st, "does not exist yet"), "%s", st.message().c_str());
  cr_assert(seconds_since(t0) < 1.5);
}

// The authenticated default of the file path: rank 0 makes a token, writes it beside its
// address in a file only this user can read, and the others take it from there; a stranger
// who knows the address but not the token is refused while the job completes.
Test(bootstrap, rendezvous_file_carries_a_fresh_token) {
  quiet_logs();
  char dir[] = "/tmp/ddl-bootstrap-test-XXXXXX";
  cr_assert(mkdtemp(dir) != nullptr);
  const std::string file = std::string(dir) + "/ddl-job.root";
  FILE *f = fopen(file.c_str(), "w");
  fputs("127.0.0.1:1 0123\n", f);  // stale, an earlier job's token: nobody listens on port 1
  fclose(f);
  std::string seen_text, stranger, published_token, token_used;
  unsigned mode = 0;
  auto sts = run_ranks(3, [&](int r) -> Status {
    BootstrapOptions o = opts_for(r, 3, "");
    o.job_token = "ignored: rank 0 makes the token";
    o.fresh_token = true;
    o.rendezvous_file = file;
    o.all_local = true;
    if (r == 0) sleep_ms(300);
    if (r == 1) {
      o.on_root_found = [&](const std::string &addr) {
        if (addr == "127.0.0.1:1") return;  // the stale file
        struct stat st;
        if (stat(file.c_str(), &st) == 0) mode = st.st_mode & 0777;
        FILE *in = fopen(file.c_str(), "r");
        char line[512] = {0};
        if (in) {
          if (!fgets(line, sizeof line, in)) line[0] = 0;
          fclose(in);
        }
        seen_text = line;
        stranger = ddltest::stranger_hello(addr, "", 2, 3) + ", " +
                   ddltest::stranger_hello(addr, "ignored: rank 0 makes the token", 2, 3);
      };
    }
    if (r == 2) sleep_ms(600);  // after the strangers
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(o, &b));
    return b->barrier();
  });
  assert_all_ok(sts);
  cr_assert_eq(mode, 0600u, "rendezvous file mode %o", mode);
  std::string addr, token, why;
  bool has_token = false;
  cr_assert(bootstrap::parse_published(seen_text, &addr, &token, &has_token, &why), "'%s': %s",
            seen_text.c_str(), why.c_str());
  cr_assert(has_token && token.size() == 32, "'%s'", seen_text.c_str());
  cr_assert(token.find_first_not_of("0123456789abcdef") == std::string::npos);
  cr_assert_eq(stranger, std::string("refused, refused"), "the strangers: %s", stranger.c_str());
  cr_assert(!file_exists(file));
  rmdir(dir);
}

Test(bootstrap, fresh_token_needs_a_token_in_the_file) {
  quiet_logs();
  char dir[] = "/tmp/ddl-bootstrap-test-XXXXXX";
  cr_assert(mkdtemp(dir) != nullptr);
  const std::string file = std::string(dir) + "/ddl-job.root";
  FILE *f = fopen(file.c_str(), "w");
  fputs("127.0.0.1:1\n", f);  // an address only: not for a rank that expects a fresh token
  fclose(f);
  std::unique_ptr<Bootstrap> b;
  BootstrapOptions o = opts_for(1, 2, "", 600);
  o.rendezvous_file = file;
  o.fresh_token = true;
  Status st = Bootstrap::create(o, &b);
  cr_assert_eq(st.code(), DDL_ERR_TIMEOUT, "%s", st.message().c_str());
  cr_assert(contains(st, "holds no job token"), "%s", st.message().c_str());
  // A file that belongs to somebody else is not read at all.
  if (geteuid() == 0) {
    cr_assert_eq(chown(file.c_str(), 65534, 65534), 0);
    st = Bootstrap::create(o, &b);
    cr_assert(contains(st, "belongs to uid 65534"), "%s", st.message().c_str());
  }
  unlink(file.c_str());
  rmdir(dir);
}

Test(bootstrap, published_text) {
  std::string addr, token, why;
  bool has = true;
  cr_assert(bootstrap::parse_published("10.0.0.1:5 abc\n", &addr, &token, &has, &why));
  cr_assert(addr == "10.0.0.1:5" && token == "abc" && has);
  cr_assert(bootstrap::parse_published(" [fd00::1]:7 ", &addr, &token, &has, &why));
  cr_assert(addr == "[fd00::1]:7" && token.empty() && !has);
  cr_assert_eq(bootstrap::published_text("h:1", "t"), std::string("h:1 t"));
  cr_assert_eq(bootstrap::published_text("h:1", ""), std::string("h:1"));
  for (const char *bad : {"", "h", "h:0 t", "h:1 ", "h:1 a b", "h:x t"})
    cr_assert(
        !bootstrap::parse_published(std::string(bad) + (std::string(bad) == "h:1 " ? "x y" : ""),
                                    &addr, &token, &has, &why),
        "'%s' accepted", bad);
  cr_assert(!bootstrap::parse_published("h:1 " + std::string(300, 't'), &addr, &token, &has, &why));
}

// A rendezvous served without a secret (a given root, no token) says so, once per process.
Test(bootstrap, open_rendezvous_warns_once) {
  set_log_level(LogLevel::kWarn);
  char path[] = "/tmp/ddl-bootstrap-stderr-XXXXXX";
  int capture = mkstemp(path);
  cr_assert(capture >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(capture, 2);
  std::vector<Status> sts;
  for (int round = 0; round < 2; ++round) {
    std::string root = "127.0.0.1:" + std::to_string(free_port());
    auto got = run_ranks(2, [&](int r) -> Status {
      BootstrapOptions o = opts_for(r, 2, root);
      o.job_token.clear();
      std::unique_ptr<Bootstrap> b;
      DDL_RETURN_IF_ERROR(Bootstrap::create(o, &b));
      return b->barrier();
    });
    sts.insert(sts.end(), got.begin(), got.end());
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  char buf[4096];
  ssize_t n;
  lseek(capture, 0, SEEK_SET);
  while ((n = read(capture, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(capture);
  unlink(path);
  assert_all_ok(sts);
  size_t first = text.find("is open");
  cr_assert(first != std::string::npos, "no warning in:\n%s", text.c_str());
  cr_assert(text.find("is open", first + 1) == std::string::npos, "warned twice:\n%s",
            text.c_str());
  cr_assert(text.find("DDL_JOB_TOKEN") != std::string::npos, "%s", text.c_str());
}

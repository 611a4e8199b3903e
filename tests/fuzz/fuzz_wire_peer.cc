// A non-root rank's decoding of what rank 0 sends (lib/bootstrap/peer_side.cc: the ack;
// bootstrap.cc, peer_exchange: reply and error frames). A real Bootstrap of rank 1 runs on a
// thread against a fake rank 0 served by the fuzzer, which answers every connection with the
// fuzzed bytes and then closes its sending side.
//
// Input: byte 0: nranks (2..5); byte 1: rank 1's exchanges (1..3 allgathers or barriers);
// byte 2 bit 0: 1 = the fuzzer sends a genuine "accepted" ack first and the rest is the
// stream of frames, 0 = the ack itself is fuzzed too. Checked: no crash or over-allocation
// (ASan), the rank returns in time (a refused ack is retried only until the deadline), and an
// exchange succeeds exactly when the bytes hold a well-formed reply for it.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_net.h"
#include "fuzz_util.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"

namespace wire = ddl::bootstrap::wire;
using ddl::bootstrap::get_u16;
using ddl::bootstrap::get_u32;

namespace {

const char kToken[] = "fuzz-token";
// Deadlines of the rank: short when the protocol says the ack is malformed (the rank then
// retries until its deadline: those inputs cost this much each), generous otherwise.
constexpr int kRetryTimeoutMs = 12, kTimeoutMs = 300;
int g_listen = -1, g_port = 0;
// Runs in which the connect phase timed out although a usable ack was on its way: the fake
// rank 0 (this thread) was descheduled past kTimeoutMs. Counted, reported at exit, not failed.
long g_slow = 0, g_runs = 0;

struct Op {
  bool allgather;
  std::string blob;
};

enum class AckVerdict { kAccepted, kRefused, kRetry };

AckVerdict ack_verdict(const std::string &s) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(s.data());
  if (s.size() < wire::kAckBytes) return AckVerdict::kRetry;
  if (get_u32(p) != wire::kMagic || get_u16(p + 4) != wire::kVersion) return AckVerdict::kRetry;
  return get_u16(p + 6) == wire::kAccepted ? AckVerdict::kAccepted : AckVerdict::kRefused;
}

// How many exchanges the frames in s (from pos) complete, by the protocol.
size_t expected_successes(const std::vector<Op> &ops, int nranks, const std::string &s,
                          size_t pos) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(s.data());
  size_t done = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (s.size() - pos < wire::kFrameBytes) return done;
    uint32_t op = ops[i].allgather ? wire::kAllgather : wire::kBarrier;
    if (get_u32(p + pos) != wire::kMagic || get_u32(p + pos + 4) != op ||
        get_u32(p + pos + 8) != i + 1)
      return done;
    uint32_t count = get_u32(p + pos + 12);
    if (count != (ops[i].allgather ? static_cast<uint32_t>(nranks) : 0)) return done;
    pos += wire::kFrameBytes;
    // The entries' lengths, then their bytes end to end.
    if (s.size() - pos < 4 * static_cast<size_t>(count)) return done;
    size_t total = 0;
    for (uint32_t r = 0; r < count; ++r) {
      const uint32_t len = get_u32(p + pos + 4 * static_cast<size_t>(r));
      if (len > wire::kMaxBlob) return done;
      total += len;
    }
    pos += 4 * static_cast<size_t>(count);
    if (s.size() - pos < total) return done;
    pos += total;
    ++done;
  }
  return done;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  ddl::set_log_level(ddl::LogLevel::kError);
  g_listen = ddltest::listen_loopback(0, &g_port);
  std::atexit([] {
    std::fprintf(stderr, "fuzz_wire_peer: %ld runs, %ld tolerated slow-machine timeouts\n", g_runs,
                 g_slow);
  });
  return g_listen >= 0 ? 0 : 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  const int nranks = 2 + data[0] % 4;
  std::vector<Op> ops;
  for (int i = 0; i < 1 + (data[1] & 3) % 3; ++i)
    ops.push_back(Op{((data[1] >> (2 + i)) & 1) != 0, std::string(i + 2, 'p' + i)});
  const bool genuine_ack = data[2] & 1;
  std::string served(reinterpret_cast<const char *>(data + 3), size - 3);
  if (genuine_ack) served = wire::encode_ack(wire::kAccepted, nranks) + served;

  ddl::BootstrapOptions opts;
  opts.rank = 1;
  opts.nranks = nranks;
  opts.root_addr = "127.0.0.1:" + std::to_string(g_port);
  opts.job_token = kToken;
  const AckVerdict verdict = ack_verdict(served);
  // A malformed ack leads the rank into its retry loop until the deadline (kRetryTimeoutMs),
  // a slow and uninteresting path (one comparison): only one such input in 16, picked by a
  // hash of its bytes, is run, so that the fuzzer's time goes to the frame decoding.
  if (verdict == AckVerdict::kRetry) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
    if (h % 16 != 0) return 0;
  }
  opts.timeout_ms = verdict == AckVerdict::kRetry ? kRetryTimeoutMs : kTimeoutMs;
  std::atomic<bool> finished{false};
  ddl::Status create_status;
  std::vector<ddl::Status> results;
  std::vector<std::vector<std::string>> gathered;
  std::thread rank1([&] {
    std::unique_ptr<ddl::Bootstrap> b;
    create_status = ddl::Bootstrap::create(opts, &b);
    if (create_status.ok()) {
      for (const Op &op : ops) {
        std::vector<std::string> all;
        ddl::Status st = op.allgather ? b->allgather(op.blob, &all) : b->barrier();
        results.push_back(st);
        gathered.push_back(all);
        if (!st.ok()) break;
      }
    }
    b.reset();
    finished = true;
  });

  // The fake rank 0: every connection gets the same bytes; everything rank 1 sends is read
  // (closing with unread bytes would reset the connection and lose what we sent).
  auto start = std::chrono::steady_clock::now();
  std::vector<int> conns;
  int connections = 0;
  for (;;) {
    std::vector<struct pollfd> pfds(1, pollfd{g_listen, POLLIN, 0});
    for (int c : conns) pfds.push_back(pollfd{c, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 2);
    if (pfds[0].revents & POLLIN) {
      int c = ::accept4(g_listen, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        ++connections;
        ddl_fuzz::write_all(c, served.data(), served.size());
        shutdown(c, SHUT_WR);
        conns.push_back(c);
      }
    }
    for (size_t i = 1; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::recv(pfds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(pfds[i].fd);
        for (int &c : conns)
          if (c == pfds[i].fd) c = -1;
      }
    }
    conns.erase(std::remove(conns.begin(), conns.end(), -1), conns.end());
    if (finished && conns.empty()) break;
    FUZZ_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10),
               "rank 1 is still busy after 10 s");
  }
  rank1.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (verdict == AckVerdict::kRetry) {
    FUZZ_CHECK(!create_status.ok() && create_status.code() == DDL_ERR_TIMEOUT,
               "a malformed ack gave %s", create_status.message().c_str());
    FUZZ_CHECK(took < 2.0, "a malformed ack held the rank %.2f s (deadline %d ms)", took,
               kRetryTimeoutMs);
    return 0;
  }
  ++g_runs;
  if (create_status.code() == DDL_ERR_TIMEOUT && took * 1000 >= kTimeoutMs) {
    ++g_slow;
    return 0;
  }
  FUZZ_CHECK(connections == 1, "%d connections for one ack", connections);
  if (verdict == AckVerdict::kRefused) {
    FUZZ_CHECK(create_status.code() == DDL_ERR_INVALID_ARGUMENT, "a refusing ack gave %s",
               create_status.message().c_str());
    return 0;
  }
  FUZZ_CHECK(create_status.ok(), "an accepting ack gave %s", create_status.message().c_str());
  // The stream is closed after the bytes: no exchange may wait for its deadline.
  FUZZ_CHECK(took < 2.0, "rank 1 took %.2f s with rank 0's stream closed", took);
  size_t want = expected_successes(ops, nranks, served, wire::kAckBytes);
  size_t ok = 0;
  while (ok < results.size() && results[ok].ok()) ++ok;
  FUZZ_CHECK(ok == want, "%zu exchanges succeeded, the protocol says %zu", ok, want);
  for (size_t i = 0; i < ok; ++i)
    if (ops[i].allgather)
      FUZZ_CHECK(gathered[i].size() == static_cast<size_t>(nranks), "allgather of %zu blobs",
                 gathered[i].size());
  if (ok < ops.size()) {
    FUZZ_CHECK(results.size() == ok + 1, "results");
    const ddl::Status &st = results[ok];
    FUZZ_CHECK(st.code() == DDL_ERR_REMOTE, "code %d: %s", st.code(), st.message().c_str());
    FUZZ_CHECK(st.message().find("rank 0") != std::string::npos, "'%s' does not name rank 0",
               st.message().c_str());
  }
  return 0;
}

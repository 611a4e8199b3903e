// Rank 0's decoding of exchange frames (lib/bootstrap/bootstrap.cc, root_exchange): a real
// rank-0 Bootstrap of a 2-rank job runs on a thread; the fuzzer plays rank 1, presents a
// genuine hello, then sends the fuzzed bytes as everything rank 1 says afterwards, and closes
// its sending side. Byte 0 of the input picks rank 0's sequence of exchanges (1..3 allgathers
// or barriers). Checked: rank 0 never crashes or over-allocates (ASan), returns within its
// deadline, and succeeds on an exchange exactly when rank 1's bytes hold a well-formed frame
// for it; an error names rank 1 or says what was wrong.
#include <atomic>
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
using ddl::bootstrap::get_u32;

namespace {

const char kToken[] = "fuzz-token";
int g_port = 0;

struct Op {
  bool allgather;
  std::string blob;
};

// How many of the ops rank 1's bytes complete, by the protocol.
size_t expected_successes(const std::vector<Op> &ops, const std::string &in) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(in.data());
  size_t pos = 0, done = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (in.size() - pos < wire::kFrameBytes) return done;
    uint32_t op = ops[i].allgather ? wire::kAllgather : wire::kBarrier;
    if (get_u32(p + pos) != wire::kMagic || get_u32(p + pos + 4) != op ||
        get_u32(p + pos + 8) != i + 1)
      return done;
    uint32_t len = get_u32(p + pos + 12);
    if (len > (ops[i].allgather ? wire::kMaxBlob : 0)) return done;
    if (in.size() - pos - wire::kFrameBytes < len) return done;
    pos += wire::kFrameBytes + len;
    ++done;
  }
  return done;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  ddl::set_log_level(ddl::LogLevel::kError);
  g_port = ddltest::free_port();
  return g_port > 0 ? 0 : 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string stream(reinterpret_cast<const char *>(data + 1), size - 1);
  std::vector<Op> ops;
  for (int i = 0; i < 1 + (pick & 3) % 3; ++i)
    ops.push_back(Op{((pick >> (2 + i)) & 1) != 0, std::string(i + 3, 'a' + i)});

  ddl::BootstrapOptions opts;
  opts.rank = 0;
  opts.nranks = 2;
  opts.root_addr = "127.0.0.1:" + std::to_string(g_port);
  opts.job_token = kToken;
  opts.timeout_ms = 3000;
  std::atomic<bool> created{false};
  ddl::Status create_status;
  std::vector<ddl::Status> results;
  std::vector<std::vector<std::string>> gathered;
  std::thread root([&] {
    std::unique_ptr<ddl::Bootstrap> b;
    create_status = ddl::Bootstrap::create(opts, &b);
    created = true;
    if (!create_status.ok()) return;
    for (const Op &op : ops) {
      std::vector<std::string> all;
      ddl::Status st = op.allgather ? b->allgather(op.blob, &all) : b->barrier();
      results.push_back(st);
      gathered.push_back(all);
      if (!st.ok()) break;
    }
  });

  int fd = ddl_fuzz::connect_loopback(g_port, 3000);
  FUZZ_CHECK(fd >= 0, "cannot reach rank 0 on port %d", g_port);
  std::string hello = wire::encode_hello(kToken, 1, 2);
  uint8_t ack[wire::kAckBytes];
  FUZZ_CHECK(ddl_fuzz::write_all(fd, hello.data(), hello.size()) &&
                 ddl_fuzz::read_exact(fd, ack, sizeof ack, 3000),
             "no ack for a genuine hello");
  FUZZ_CHECK(ddl::bootstrap::get_u16(ack + 6) == wire::kAccepted, "genuine hello refused");
  if (!stream.empty()) ddl_fuzz::write_all(fd, stream.data(), stream.size());
  shutdown(fd, SHUT_WR);
  auto start = std::chrono::steady_clock::now();
  bool eof = ddl_fuzz::drain_to_eof(fd, 10000);
  root.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);

  FUZZ_CHECK(eof, "rank 0 kept the connection open");
  FUZZ_CHECK(create_status.ok(), "create: %s", create_status.message().c_str());
  // Rank 1's sending side is closed: rank 0 must not wait for its deadline.
  FUZZ_CHECK(took < 2.0, "rank 0 took %.2f s with the peer's stream closed", took);
  size_t want = expected_successes(ops, stream);
  size_t ok = 0;
  while (ok < results.size() && results[ok].ok()) ++ok;
  FUZZ_CHECK(ok == want, "%zu exchanges succeeded, the protocol says %zu", ok, want);
  for (size_t i = 0; i < ok; ++i) {
    if (!ops[i].allgather) continue;
    FUZZ_CHECK(gathered[i].size() == 2 && gathered[i][0] == ops[i].blob, "allgather result");
  }
  if (ok < ops.size()) {
    FUZZ_CHECK(results.size() == ok + 1, "results");
    const ddl::Status &st = results[ok];
    FUZZ_CHECK(st.code() == DDL_ERR_REMOTE, "code %d: %s", st.code(), st.message().c_str());
    FUZZ_CHECK(st.message().find("rank 1") != std::string::npos, "'%s' does not name rank 1",
               st.message().c_str());
  }
  return 0;
}

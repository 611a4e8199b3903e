// Rank 0's decoding of what a peer sends in the exchanges (wire::check_peer_frame, called by
// Bootstrap::root_exchange on each 16-byte frame header before it reads the payload), without
// sockets; fuzz_wire_root_frames runs the same code behind real sockets at ~1k exec/s.
//
// Input: byte 0 picks rank 0's exchanges (1..3 allgathers or barriers, as in
// fuzz_wire_root_frames) and bits 5..7 the peer's rank (1..8); the rest is everything the
// peer sends. The harness reads it as root_exchange does: a header, then the payload it
// announces, per exchange; running out of bytes is the peer disconnecting. Checked: exactly
// the exchanges the protocol says complete do; the first failure is DDL_ERR_REMOTE from rank
// 0 naming the peer; an accepted length is within its bound.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"

namespace wire = ddl::bootstrap::wire;
using ddl::bootstrap::get_u32;

namespace {

// How many of the ops the peer's bytes complete, by the protocol (wire.h).
size_t expected_successes(const std::vector<uint32_t> &ops, const std::string &in) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(in.data());
  size_t pos = 0, done = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (in.size() - pos < wire::kFrameBytes) return done;
    if (get_u32(p + pos) != wire::kMagic || get_u32(p + pos + 4) != ops[i] ||
        get_u32(p + pos + 8) != i + 1)
      return done;
    uint32_t len = get_u32(p + pos + 12);
    if (len > (ops[i] == wire::kAllgather ? wire::kMaxBlob : 0)) return done;
    if (in.size() - pos - wire::kFrameBytes < len) return done;
    pos += wire::kFrameBytes + len;
    ++done;
  }
  return done;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const int rank = 1 + (pick >> 5);
  std::vector<uint32_t> ops;
  for (int i = 0; i < 1 + (pick & 3) % 3; ++i)
    ops.push_back(((pick >> (2 + i)) & 1) ? wire::kAllgather : wire::kBarrier);
  const std::string in(reinterpret_cast<const char *>(data + 1), size - 1);

  size_t pos = 0, ok = 0;
  ddl::Status failure;
  bool disconnected = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const uint32_t seq = static_cast<uint32_t>(i + 1);
    if (in.size() - pos < wire::kFrameBytes) {
      disconnected = true;
      break;
    }
    // The header on its own in an exact-size buffer, as root_exchange keeps it.
    uint8_t header[wire::kFrameBytes];
    std::memcpy(header, in.data() + pos, sizeof header);
    uint32_t len = 0xdeadbeef;
    failure = wire::check_peer_frame(header, ops[i], seq, rank, &len);
    if (!failure.ok()) {
      FUZZ_CHECK(len == 0xdeadbeef, "length written on failure");
      break;
    }
    FUZZ_CHECK(len <= (ops[i] == wire::kAllgather ? wire::kMaxBlob : 0), "length %u accepted", len);
    FUZZ_CHECK(len == get_u32(header + 12), "length %u, the header says %u", len,
               get_u32(header + 12));
    pos += wire::kFrameBytes;
    if (in.size() - pos < len) {
      disconnected = true;
      break;
    }
    pos += len;
    ++ok;
  }
  const size_t want = expected_successes(ops, in);
  FUZZ_CHECK(ok == want, "%zu exchanges succeeded, the protocol says %zu", ok, want);
  if (ok < ops.size() && !disconnected) {
    FUZZ_CHECK(failure.code() == DDL_ERR_REMOTE, "code %d: %s", failure.code(),
               failure.message().c_str());
    const std::string &m = failure.message();
    FUZZ_CHECK(m.rfind("bootstrap: rank 0: ", 0) == 0, "'%s' does not start with the rank",
               m.c_str());
    const std::string name = "rank " + std::to_string(rank);
    FUZZ_CHECK(m.find(name) != std::string::npos, "'%s' does not name %s", m.c_str(), name.c_str());
  }
  return 0;
}

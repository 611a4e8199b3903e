// Rank 0's judgement of a hello (wire::check_hello, lib/bootstrap/wire.h), called directly the
// way accept_peers calls it: on the bytes received so far, reading no further than it asks.
// fuzz_wire_hello drives the same function through real sockets at ~1k exec/s; this target
// runs at the parser's speed.
//
// Input: byte 0 picks the job (token and nranks), byte 1 how many bytes each "recv" returns
// (1..32, or everything asked for), the rest is what the connection sends. Checked: the
// verdict agrees with an independent reading of the protocol in wire.h, does not depend on how
// the bytes were split, never asks for more than a hello can hold or for bytes it already has,
// and never reads past what it was given (ASan: the bytes not yet "received" are poisoned).
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"

namespace wire = ddl::bootstrap::wire;
using ddl::bootstrap::get_u16;
using ddl::bootstrap::get_u32;

namespace {

// The input's bytes in a heap block of exactly their size; check_hello sees a prefix with the
// rest poisoned, so that a read past what it was given is an ASan report. (One exact-size copy
// per call cost a heap allocation per byte read, most of this target's time.)
class Stream {
 public:
  Stream(const uint8_t *data, size_t size) : size_(size), bytes_(new uint8_t[size ? size : 1]) {
    if (size) std::memcpy(bytes_.get(), data, size);
  }
  wire::HelloCheck check(size_t have, const std::string &token, int nranks) const {
    ASAN_POISON_MEMORY_REGION(bytes_.get() + have, size_ - have);
    wire::HelloCheck c = wire::check_hello(bytes_.get(), have, token, nranks);
    ASAN_UNPOISON_MEMORY_REGION(bytes_.get() + have, size_ - have);
    return c;
  }

 private:
  size_t size_;
  std::unique_ptr<uint8_t[]> bytes_;
};

// The protocol, read independently: verdict and, for kMore, the bytes wanted in all.
wire::HelloCheck reference(const std::string &in, const std::string &token, int nranks) {
  wire::HelloCheck c;
  const uint8_t *p = reinterpret_cast<const uint8_t *>(in.data());
  if (in.size() >= 4 && get_u32(p) != wire::kMagic) {
    c.verdict = wire::HelloCheck::kDrop;
    return c;
  }
  if (in.size() < wire::kHelloBytes) return c;
  if (get_u16(p + 4) != wire::kVersion || get_u16(p + 6) > wire::kMaxToken) {
    c.verdict = wire::HelloCheck::kDrop;
    return c;
  }
  c.need = wire::kHelloBytes + get_u16(p + 6);
  if (in.size() < c.need) return c;
  if (in.compare(wire::kHelloBytes, c.need - wire::kHelloBytes, token) != 0 ||
      token.size() != c.need - wire::kHelloBytes) {
    c.verdict = wire::HelloCheck::kDrop;
    return c;
  }
  c.verdict = wire::HelloCheck::kAck;
  c.rank = get_u32(p + 8);
  c.nranks = get_u32(p + 12);
  if (c.nranks != static_cast<uint32_t>(nranks))
    c.code = wire::kWrongNranks;
  else if (c.rank == 0 || c.rank >= c.nranks)
    c.code = wire::kBadRank;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const std::string kTokens[] = {"fuzz-token", "", "x", std::string(wire::kMaxToken, 'T')};
  const std::string &token = kTokens[data[0] & 3];
  const int nranks = 1 + (data[0] >> 2);  // 1..64
  const size_t step = data[1] % 33;       // 0: all that is asked for
  const std::string in(reinterpret_cast<const char *>(data + 2), size - 2);
  const Stream stream(data + 2, size - 2);

  // As accept_peers: ask, read at most what is asked for, ask again.
  size_t have = 0;
  wire::HelloCheck c;
  for (;;) {
    c = stream.check(have, token, nranks);
    if (c.verdict != wire::HelloCheck::kMore) break;
    FUZZ_CHECK(c.need > have, "asks for %zu bytes with %zu in", c.need, have);
    FUZZ_CHECK(c.need <= wire::kHelloBytes + wire::kMaxToken, "asks for %zu bytes", c.need);
    size_t take = c.need - have;
    if (step) take = std::min(take, step);
    take = std::min(take, in.size() - have);
    if (take == 0) break;  // the connection closed
    have += take;
  }
  // All of it at once: bytes past the hello are not looked at, so the verdict is the same.
  const wire::HelloCheck whole = stream.check(in.size(), token, nranks);
  FUZZ_CHECK(whole.verdict == c.verdict && whole.code == c.code && whole.why == c.why,
             "split reading gives %d/%u '%s', one read %d/%u '%s'", c.verdict, c.code,
             c.why.c_str(), whole.verdict, whole.code, whole.why.c_str());
  const wire::HelloCheck want = reference(in.substr(0, have), token, nranks);
  FUZZ_CHECK(c.verdict == want.verdict, "verdict %d, the protocol says %d", c.verdict,
             want.verdict);
  switch (c.verdict) {
    case wire::HelloCheck::kMore:
      FUZZ_CHECK(c.need == want.need, "asks for %zu, the protocol says %zu", c.need, want.need);
      FUZZ_CHECK(have == in.size(), "stopped early");
      break;
    case wire::HelloCheck::kDrop:
      FUZZ_CHECK(!c.why.empty(), "a drop without a reason");
      break;
    case wire::HelloCheck::kAck:
      FUZZ_CHECK(c.code == want.code && c.rank == want.rank && c.nranks == want.nranks,
                 "ack %u (rank %u of %u), the protocol says %u", c.code, c.rank, c.nranks,
                 want.code);
      FUZZ_CHECK(c.code == wire::kAccepted ? c.why.empty() : !c.why.empty(), "why '%s'",
                 c.why.c_str());
      if (c.code == wire::kAccepted)
        FUZZ_CHECK(c.rank >= 1 && c.rank < static_cast<uint32_t>(nranks), "accepted rank %u",
                   c.rank);
      FUZZ_CHECK(have == wire::kHelloBytes + token.size(), "read %zu bytes of a %zu-byte hello",
                 have, wire::kHelloBytes + token.size());
      break;
  }
  // The answer the socket code would send for it parses back on the peer's side.
  if (c.verdict == wire::HelloCheck::kAck) {
    const std::string ack = wire::encode_ack(c.code, nranks);
    const wire::AckCheck a =
        wire::check_ack(reinterpret_cast<const uint8_t *>(ack.data()), ack.size());
    FUZZ_CHECK(a.is_ack && a.code == c.code && a.nranks == static_cast<uint32_t>(nranks),
               "ack does not round-trip");
  }
  return 0;
}

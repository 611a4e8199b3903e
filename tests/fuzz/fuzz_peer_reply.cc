// A non-root rank's decoding of what rank 0 sends: the ack (wire::check_ack, as
// connect_to_root reads it) and the answers to exchanges, error frames included
// (wire::ReplyDecoder, as Bootstrap::peer_exchange drives it), without sockets;
// fuzz_wire_peer runs the same code behind real sockets at ~100-1k exec/s.
//
// Input: byte 0: nranks (2..65); byte 1: the rank's exchanges (1..3 allgathers or barriers);
// byte 2 bit 0: 1 = a genuine "accepted" ack comes first and the rest is the stream of
// frames, 0 = the first 12 bytes are the ack. The harness feeds the decoder exactly what it
// asks for, each piece in an exact-size heap buffer (ASan sees any read past it); running out
// of bytes is rank 0 closing. Checked: an exchange succeeds exactly when the bytes hold a
// well-formed answer for it, with the entries the bytes say; rank 0's error frame is quoted;
// every failure is DDL_ERR_REMOTE naming this rank and rank 0.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"

namespace wire = ddl::bootstrap::wire;
using Stage = wire::ReplyDecoder::Stage;
using ddl::bootstrap::get_u32;

namespace {

constexpr int kMe = 1;

// The protocol's reading of s from pos: how many of ops complete, and whether the first that
// does not is rank 0's error frame (read in full or not).
struct Expected {
  size_t done = 0;
  bool root_failed = false;
  std::string text;  // of the error frame
};

Expected expected(const std::vector<uint32_t> &ops, int nranks, const std::string &s, size_t pos,
                  std::vector<std::vector<std::string>> *entries) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(s.data());
  Expected e;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (s.size() - pos < wire::kFrameBytes) return e;
    uint32_t count = get_u32(p + pos + 12);
    if (get_u32(p + pos) == wire::kMagic && get_u32(p + pos + 4) == wire::kError) {
      e.root_failed = true;
      if (count > wire::kMaxError) count = 0;
      pos += wire::kFrameBytes;
      e.text = s.size() - pos < count ? "?" : s.substr(pos, count);
      return e;
    }
    if (get_u32(p + pos) != wire::kMagic || get_u32(p + pos + 4) != ops[i] ||
        get_u32(p + pos + 8) != i + 1)
      return e;
    if (count != (ops[i] == wire::kAllgather ? static_cast<uint32_t>(nranks) : 0)) return e;
    pos += wire::kFrameBytes;
    // The entries' lengths, then their bytes end to end.
    if (s.size() - pos < 4 * static_cast<size_t>(count)) return e;
    std::vector<uint32_t> lengths;
    for (uint32_t r = 0; r < count; ++r) {
      lengths.push_back(get_u32(p + pos));
      if (lengths.back() > wire::kMaxBlob) return e;
      pos += 4;
    }
    std::vector<std::string> got;
    for (uint32_t len : lengths) {
      if (s.size() - pos < len) return e;
      got.push_back(s.substr(pos, len));
      pos += len;
    }
    entries->push_back(got);
    ++e.done;
  }
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  const int nranks = 2 + data[0] % 64;
  std::vector<uint32_t> ops;
  for (int i = 0; i < 1 + (data[1] & 3) % 3; ++i)
    ops.push_back(((data[1] >> (2 + i)) & 1) ? wire::kAllgather : wire::kBarrier);
  std::string s(reinterpret_cast<const char *>(data + 3), size - 3);
  if (data[2] & 1) s = wire::encode_ack(wire::kAccepted, nranks) + s;

  // The ack, as connect_to_root reads it: 12 bytes or a failed handshake.
  if (s.size() < wire::kAckBytes) return 0;
  const uint8_t *p = reinterpret_cast<const uint8_t *>(s.data());
  const wire::AckCheck ack = wire::check_ack(p, wire::kAckBytes);
  const bool looks_like_ack =
      get_u32(p) == wire::kMagic && ddl::bootstrap::get_u16(p + 4) == wire::kVersion;
  FUZZ_CHECK(ack.is_ack == looks_like_ack, "check_ack says %d", ack.is_ack);
  FUZZ_CHECK(!wire::check_ack(p, wire::kAckBytes - 1).is_ack, "a short ack accepted");
  if (!ack.is_ack || ack.code != wire::kAccepted) return 0;
  FUZZ_CHECK(ack.nranks == get_u32(p + 8), "ack nranks");

  std::vector<std::vector<std::string>> want_entries;
  const Expected want = expected(ops, nranks, s, wire::kAckBytes, &want_entries);
  size_t pos = wire::kAckBytes, ok = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    wire::ReplyDecoder reply(ops[i], static_cast<uint32_t>(i + 1), nranks, kMe);
    bool closed = false;
    while (reply.wants_more()) {
      const size_t need = reply.need();
      FUZZ_CHECK(need > 0, "asks for nothing in stage %d", static_cast<int>(reply.stage()));
      // Every length is checked before the bytes it announces are asked for: an answer's
      // blobs together, nranks of at most kMaxBlob each, are the most one read takes.
      FUZZ_CHECK(
          need <= std::max<size_t>(wire::kFrameBytes, static_cast<size_t>(nranks) * wire::kMaxBlob),
          "asks for %zu bytes", need);
      if (s.size() - pos < need) {
        if (reply.stage() == Stage::kErrorText) {
          reply.text_unreadable();
          break;
        }
        closed = true;
        break;
      }
      std::unique_ptr<uint8_t[]> piece(new uint8_t[need]);
      std::memcpy(piece.get(), s.data() + pos, need);
      pos += need;
      reply.feed(piece.get());
    }
    if (closed) break;
    if (reply.stage() == Stage::kDone) {
      FUZZ_CHECK(ok < want_entries.size() && reply.entries() == want_entries[ok],
                 "exchange %zu: entries differ from the bytes", i + 1);
      ++ok;
      continue;
    }
    const ddl::Status &st = reply.error();
    FUZZ_CHECK(reply.stage() == Stage::kRootFailed || reply.stage() == Stage::kBad, "stage %d",
               static_cast<int>(reply.stage()));
    FUZZ_CHECK(st.code() == DDL_ERR_REMOTE, "code %d: %s", st.code(), st.message().c_str());
    const std::string &m = st.message();
    FUZZ_CHECK(m.rfind("bootstrap: rank 1: ", 0) == 0 && m.find("rank 0") != std::string::npos,
               "'%s' does not name both ranks", m.c_str());
    FUZZ_CHECK((reply.stage() == Stage::kRootFailed) == want.root_failed, "error frame missed");
    if (want.root_failed) {
      const std::string quoted = std::string(want.text.c_str());  // printed with %s
      FUZZ_CHECK(m.size() >= quoted.size() &&
                     m.compare(m.size() - quoted.size(), quoted.size(), quoted) == 0,
                 "'%s' does not quote rank 0's text", m.c_str());
    }
    break;
  }
  FUZZ_CHECK(ok == want.done, "%zu exchanges succeeded, the protocol says %zu", ok, want.done);
  return 0;
}

// The bootstrap's wire format. All integers are big-endian; every variable-length field has a
// fixed bound that is checked before a byte of it is read, so nothing on the wire can make a
// rank allocate more than a bound it chose.
//
// Handshake (peer -> root, 16-byte header then the token):
//   u32 magic 'DDLB' | u16 version | u16 token_len (<= kMaxToken) | u32 rank | u32 nranks | token
// The root validates magic, version and token_len, reads the token, compares it in constant
// time, and only then looks at rank and nranks. A stranger learns nothing: the root just closes.
// A peer with the right token but a wrong nranks / duplicate or bad rank gets an ack with a
// reason, so that a misconfigured real rank fails at once with a clear message.
//
// Ack (root -> peer, 12 bytes): u32 magic | u16 version | u16 AckCode | u32 nranks (the root's)
//
// Exchanges (allgather and barrier, both collective), 16-byte frame headers:
//   u32 magic | u32 op | u32 seq | u32 n
// peer -> root: n = payload bytes (<= kMaxBlob), then the payload.
// root -> peer: n = number of entries (nranks for allgather, 0 for barrier), then the n
//               entries' lengths, u32 each (<= kMaxBlob), then their bytes end to end (three
//               reads however many ranks, where a length before each entry took two reads an
//               entry: 2 million system calls among 1,024 ranks on one host).  Or op = kError
//               with n = text bytes (<= kMaxError): the root gave up (a rank died or timed
//               out) and says why before closing.
// Beyond relay_fanout + 1 ranks (relay.h) the root's answer reaches most ranks through relays,
// which forward its bytes unchanged; error frames always come from the root itself. The
// relays' setup is one exchange of its own (op kRelays, seq 0) through the root: each peer
// sends the address it listens on for its children ("" when it has none), and the root answers
// each with one entry, its parent's address ("" when the parent is the root).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace ddl {
namespace bootstrap {
namespace wire {

constexpr uint32_t kMagic = 0x44444c42u;  // "DDLB"
constexpr uint16_t kVersion = 2;          // 2: relays (kRelays)
constexpr size_t kMaxToken = 256;
constexpr size_t kMaxBlob = 64 * 1024;
constexpr size_t kMaxError = 1024;
constexpr int kMaxRanks = 1 << 20;
constexpr size_t kHelloBytes = 16;
constexpr size_t kAckBytes = 12;
constexpr size_t kFrameBytes = 16;

enum AckCode : uint16_t {
  kAccepted = 0,
  kWrongNranks = 1,
  kDuplicateRank = 2,
  kBadRank = 3,
};
const char *ack_code_name(uint16_t code);

enum Op : uint32_t { kAllgather = 1, kBarrier = 2, kError = 3, kRelays = 4 };
// "allgather", "barrier", "error", "relay setup", "unknown op"
const char *op_name(uint32_t op);

std::string encode_hello(const std::string &token, int rank, int nranks);
std::string encode_ack(uint16_t code, int nranks);
std::string encode_frame(uint32_t op, uint32_t seq, uint32_t n);

// Compares a and b in time that depends only on b's length (b: the expected secret).
bool constant_time_equal(const std::string &a, const std::string &b);

// Decoding. Every message from the network is judged by a pure function (or a small decoder
// class) over the bytes received so far: the socket code only moves bytes, and the fuzz
// targets in tests/fuzz call these directly, millions of times, without sockets.

// What rank 0 makes of the first `size` bytes a connection has sent of its hello.
struct HelloCheck {
  enum Verdict {
    kMore,  // read until the connection has sent `need` bytes in all, then ask again
    kDrop,  // a stranger or garbage: close without a word (why says what was wrong)
    kAck,   // a hello with the job's token: answer with `code` (why: the refusal, if any)
  };
  Verdict verdict = kMore;
  size_t need = kHelloBytes;
  uint16_t code = kAccepted;
  uint32_t rank = 0, nranks = 0;  // as claimed (kAck)
  std::string why;
};
// The magic is judged as soon as its 4 bytes are in, the version and token length with the
// header, the token (in constant time) before rank and nranks. Bytes past the hello are not
// looked at. Whether the rank already arrived is the caller's to check (it knows the sockets).
HelloCheck check_hello(const uint8_t *data, size_t size, const std::string &job_token, int nranks);

// A peer's reading of rank 0's 12-byte ack.
struct AckCheck {
  bool is_ack = false;  // false: not a ddl ack of this version (wrong size, magic or version)
  uint16_t code = kAccepted;
  uint32_t nranks = 0;  // the root's
};
AckCheck check_ack(const uint8_t *data, size_t size);

// Whether a 16-byte frame header is the expected one: magic, then op and sequence number.
// Errors (DDL_ERR_REMOTE) name `who` and both exchanges.
Status check_frame(const uint8_t *header, uint32_t op, uint32_t seq, const char *who);

// Rank 0's check of rank `rank`'s frame header in exchange (op, seq); *len: the payload bytes
// that follow (at most kMaxBlob for allgather, none for barrier). Errors are complete messages.
Status check_peer_frame(const uint8_t *header, uint32_t op, uint32_t seq, int rank, uint32_t *len);

// A non-root rank's decoding of rank 0's answer to exchange (op, seq): the frame header, then
// (allgather) nranks entries' lengths and their bytes (kRelays: one entry); or an error frame in
// which rank 0 says why it gave up. Fed exactly need() bytes at a time, as the socket code reads
// them, so that every length is checked against its bound before a byte of what they announce
// is asked for.
class ReplyDecoder {
 public:
  enum class Stage {
    kHeader,      // need() = kFrameBytes
    kErrorText,   // an error frame: need() = its text bytes (at most kMaxError)
    kLengths,     // need() = 4 x the entries
    kBlobs,       // need() = the entries' bytes, end to end
    kDone,        // entries() holds the answer
    kRootFailed,  // rank 0's error frame, read: error() quotes it
    kBad,         // not the expected answer: error() says why
  };
  // me: this rank, named in the messages.
  ReplyDecoder(uint32_t op, uint32_t seq, int nranks, int me);
  Stage stage() const { return stage_; }
  bool wants_more() const {
    return stage_ == Stage::kHeader || stage_ == Stage::kErrorText || stage_ == Stage::kLengths ||
           stage_ == Stage::kBlobs;
  }
  size_t need() const { return need_; }
  // Takes exactly need() bytes (data may be null when need() is 0). Only while wants_more().
  void feed(const uint8_t *data);
  // The error frame's text could not be read (rank 0 closed first): quote "?" instead.
  void text_unreadable();
  const Status &error() const { return error_; }
  std::vector<std::string> &entries() { return entries_; }

 private:
  void fail(Status st);
  uint32_t op_, seq_;
  int nranks_, me_;
  Stage stage_ = Stage::kHeader;
  size_t need_ = kFrameBytes;
  uint32_t count_ = 0;
  std::vector<uint32_t> lengths_;
  std::vector<std::string> entries_;
  Status error_;
};

}  // namespace wire
}  // namespace bootstrap
}  // namespace ddl

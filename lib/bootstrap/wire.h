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
// root -> peer: n = number of entries (nranks for allgather, 0 for barrier), then per entry
//               u32 len (<= kMaxBlob) | bytes.  Or op = kError with n = text bytes (<= kMaxError):
//               the root gave up (a rank died or timed out) and says why before closing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddl {
namespace bootstrap {
namespace wire {

constexpr uint32_t kMagic = 0x44444c42u;  // "DDLB"
constexpr uint16_t kVersion = 1;
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

enum Op : uint32_t { kAllgather = 1, kBarrier = 2, kError = 3 };
const char *op_name(uint32_t op);  // "allgather", "barrier", "error", "unknown op"

std::string encode_hello(const std::string &token, int rank, int nranks);
std::string encode_ack(uint16_t code, int nranks);
std::string encode_frame(uint32_t op, uint32_t seq, uint32_t n);

// Compares a and b in time that depends only on b's length (b: the expected secret).
bool constant_time_equal(const std::string &a, const std::string &b);

}  // namespace wire
}  // namespace bootstrap
}  // namespace ddl

#include "lib/bootstrap/wire.h"

#include "lib/bootstrap/socket.h"

namespace ddl {
namespace bootstrap {
namespace wire {

const char *ack_code_name(uint16_t code) {
  switch (code) {
    case kAccepted:
      return "accepted";
    case kWrongNranks:
      return "wrong nranks";
    case kDuplicateRank:
      return "duplicate rank";
    case kBadRank:
      return "bad rank";
    default:
      return "unknown code";
  }
}

const char *op_name(uint32_t op) {
  switch (op) {
    case kAllgather:
      return "allgather";
    case kBarrier:
      return "barrier";
    case kError:
      return "error";
    default:
      return "unknown op";
  }
}

std::string encode_hello(const std::string &token, int rank, int nranks) {
  std::string out(kHelloBytes + token.size(), '\0');
  uint8_t *p = reinterpret_cast<uint8_t *>(&out[0]);
  put_u32(p, kMagic);
  put_u16(p + 4, kVersion);
  put_u16(p + 6, static_cast<uint16_t>(token.size()));
  put_u32(p + 8, static_cast<uint32_t>(rank));
  put_u32(p + 12, static_cast<uint32_t>(nranks));
  out.replace(kHelloBytes, token.size(), token);
  return out;
}

std::string encode_ack(uint16_t code, int nranks) {
  std::string out(kAckBytes, '\0');
  uint8_t *p = reinterpret_cast<uint8_t *>(&out[0]);
  put_u32(p, kMagic);
  put_u16(p + 4, kVersion);
  put_u16(p + 6, code);
  put_u32(p + 8, static_cast<uint32_t>(nranks));
  return out;
}

std::string encode_frame(uint32_t op, uint32_t seq, uint32_t n) {
  std::string out(kFrameBytes, '\0');
  uint8_t *p = reinterpret_cast<uint8_t *>(&out[0]);
  put_u32(p, kMagic);
  put_u32(p + 4, op);
  put_u32(p + 8, seq);
  put_u32(p + 12, n);
  return out;
}

bool constant_time_equal(const std::string &a, const std::string &b) {
  // Every byte of b is visited whatever a holds; the length difference is folded in rather than
  // returned early, so the time says nothing about how long a matching prefix was.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

}  // namespace wire
}  // namespace bootstrap
}  // namespace ddl

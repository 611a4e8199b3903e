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
    case kRelays:
      return "relay setup";
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

namespace {

HelloCheck drop(HelloCheck c, std::string why) {
  c.verdict = HelloCheck::kDrop;
  c.why = std::move(why);
  return c;
}

}  // namespace

HelloCheck check_hello(const uint8_t *p, size_t size, const std::string &job_token, int nranks) {
  HelloCheck c;
  // The magic first, as soon as its 4 bytes are in: garbage is turned away at once.
  if (size >= 4 && get_u32(p) != kMagic)
    return drop(c, strprintf("bad magic 0x%08x (not a ddl bootstrap client)", get_u32(p)));
  if (size < kHelloBytes) return c;
  uint16_t version = get_u16(p + 4), token_len = get_u16(p + 6);
  if (version != kVersion)
    return drop(c, strprintf("protocol version %u, this build speaks %u", version, kVersion));
  // Checked before the token is read, so that a stranger cannot make rank 0 wait for (or
  // buffer) more than kMaxToken bytes.
  if (token_len > kMaxToken)
    return drop(c, strprintf("token length %u exceeds %zu", token_len, kMaxToken));
  c.need = kHelloBytes + token_len;
  if (size < c.need) return c;
  // The token before anything else: a stranger learns nothing about the job.
  const std::string token(reinterpret_cast<const char *>(p + kHelloBytes), token_len);
  if (!constant_time_equal(token, job_token)) return drop(c, "wrong job token");
  c.verdict = HelloCheck::kAck;
  c.rank = get_u32(p + 8);
  c.nranks = get_u32(p + 12);
  if (c.nranks != static_cast<uint32_t>(nranks)) {
    c.code = kWrongNranks;
    c.why = strprintf("claims rank %u of %u ranks; this job has %d", c.rank, c.nranks, nranks);
  } else if (c.rank == 0 || c.rank >= c.nranks) {
    c.code = kBadRank;
    c.why = strprintf("claims rank %u of %u", c.rank, c.nranks);
  }
  return c;
}

AckCheck check_ack(const uint8_t *p, size_t size) {
  AckCheck a;
  if (size != kAckBytes || get_u32(p) != kMagic || get_u16(p + 4) != kVersion) return a;
  a.is_ack = true;
  a.code = get_u16(p + 6);
  a.nranks = get_u32(p + 8);
  return a;
}

Status check_frame(const uint8_t *h, uint32_t op, uint32_t seq, const char *who) {
  if (get_u32(h) != kMagic)
    return remote_error("%s sent a frame with bad magic 0x%08x (protocol out of step)", who,
                        get_u32(h));
  uint32_t their_op = get_u32(h + 4), their_seq = get_u32(h + 8);
  // The relays' setup comes first where the job has relays: a rank skipping it (or making
  // it alone) sees the tree differently.
  const char *hint = (their_op == kRelays) != (op == kRelays)
                         ? "; the ranks disagree on the bootstrap's relays: DDL_BOOTSTRAP_FANOUT "
                           "must be the same on every rank"
                         : "";
  if (their_op != op || their_seq != seq)
    return remote_error("%s is in %s #%u while this rank is in %s #%u (mismatched collectives%s)",
                        who, op_name(their_op), their_seq, op_name(op), seq, hint);
  return Status::Ok();
}

Status check_peer_frame(const uint8_t *h, uint32_t op, uint32_t seq, int rank, uint32_t *len) {
  const char *what = op_name(op);
  const std::string name = strprintf("rank %d", rank);
  Status st = check_frame(h, op, seq, name.c_str());
  if (!st.ok()) return st.prefix(strprintf("bootstrap: rank 0: %s #%u: ", what, seq));
  uint32_t n = get_u32(h + 12);
  size_t bound = op == kAllgather || op == kRelays ? kMaxBlob : 0;
  if (n > bound)
    return remote_error("bootstrap: rank 0: %s #%u: rank %d announced %u bytes; at most %zu", what,
                        seq, rank, n, bound);
  *len = n;
  return Status::Ok();
}

ReplyDecoder::ReplyDecoder(uint32_t op, uint32_t seq, int nranks, int me)
    : op_(op), seq_(seq), nranks_(nranks), me_(me) {}

void ReplyDecoder::fail(Status st) {
  stage_ = Stage::kBad;
  need_ = 0;
  error_ = std::move(st);
}

void ReplyDecoder::feed(const uint8_t *data) {
  const char *what = op_name(op_);
  switch (stage_) {
    case Stage::kHeader: {
      uint32_t count = get_u32(data + 12);
      if (get_u32(data) == kMagic && get_u32(data + 4) == kError) {
        // Rank 0 gave up; its text names the culprit. An oversized text is not read at all.
        if (count > kMaxError) count = 0;
        stage_ = Stage::kErrorText;
        need_ = count;
        if (count == 0) feed(nullptr);
        return;
      }
      Status st = check_frame(data, op_, seq_, "rank 0");
      if (!st.ok())
        return fail(st.prefix(strprintf("bootstrap: rank %d: %s #%u: ", me_, what, seq_)));
      uint32_t want = op_ == kAllgather ? static_cast<uint32_t>(nranks_) : op_ == kRelays ? 1 : 0;
      if (count != want)
        return fail(remote_error("bootstrap: rank %d: %s #%u: rank 0 sent %u entries, expected %u",
                                 me_, what, seq_, count, want));
      count_ = count;
      stage_ = count ? Stage::kLengths : Stage::kDone;
      need_ = 4 * static_cast<size_t>(count);
      return;
    }
    case Stage::kErrorText: {
      std::string text;
      if (need_) text.assign(reinterpret_cast<const char *>(data), need_);
      stage_ = Stage::kRootFailed;
      need_ = 0;
      error_ = remote_error("bootstrap: rank %d: %s #%u failed at rank 0: %s", me_, what, seq_,
                            text.c_str());
      return;
    }
    case Stage::kLengths: {
      size_t total = 0;
      lengths_.resize(count_);
      for (uint32_t j = 0; j < count_; ++j) {
        lengths_[j] = get_u32(data + 4 * static_cast<size_t>(j));
        if (lengths_[j] > kMaxBlob)
          return fail(remote_error(
              "bootstrap: rank %d: %s #%u: rank 0 sent %u bytes for rank %u; at most %zu", me_,
              what, seq_, lengths_[j], j, kMaxBlob));
        total += lengths_[j];
      }
      stage_ = Stage::kBlobs;
      need_ = total;
      if (total == 0) feed(nullptr);
      return;
    }
    case Stage::kBlobs: {
      entries_.reserve(count_);
      size_t at = 0;
      for (uint32_t len : lengths_) {
        entries_.emplace_back(len ? reinterpret_cast<const char *>(data) + at : "", len);
        at += len;
      }
      stage_ = Stage::kDone;
      need_ = 0;
      return;
    }
    case Stage::kDone:
    case Stage::kRootFailed:
    case Stage::kBad:
      return;  // nothing more is read
  }
}

void ReplyDecoder::text_unreadable() {
  if (stage_ != Stage::kErrorText) return;
  static const uint8_t kUnknown[] = {'?'};
  need_ = 1;
  feed(kUnknown);
}

}  // namespace wire
}  // namespace bootstrap
}  // namespace ddl

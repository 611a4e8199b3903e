#include "lib/exec/signature.h"

#include <cstring>

#include "lib/common/call.h"
#include "lib/common/datatype.h"
#include "lib/common/status.h"

namespace ddl {
namespace {

// Raw bytes from a peer: a value beyond the enum is no collective at all.
bool reduces(uint8_t collective) {
  return known_collective(collective) && ddl::reduces(static_cast<Collective>(collective));
}
bool has_root(uint8_t collective) {
  return known_collective(collective) && ddl::has_root(static_cast<Collective>(collective));
}

// The call a stamp stands for, for error messages (seq is not in it).
CallSignature signature_of_stamp(const CallStamp &stamp, uint32_t seq) {
  CallSignature signature;
  signature.seq = seq;
  signature.collective = stamp.bytes[0];
  signature.dtype = stamp.bytes[1];
  signature.op = stamp.bytes[2];
  std::memcpy(&signature.root, stamp.bytes + 4, sizeof signature.root);
  std::memcpy(&signature.count, stamp.bytes + 8, sizeof signature.count);
  return signature;
}

}  // namespace

std::string describe_signature(const CallSignature &s) {
  if (s.magic != CallSignature::kMagic) return "garbage (not a ddl call signature)";
  const Collective c = static_cast<Collective>(s.collective);
  std::string what = strprintf("%s #%u", collective_name(c), s.seq);
  // Raw integers: a peer's signature may carry any byte (datatype_name says "invalid").
  const int dtype = s.dtype;
  const unsigned long long count = s.count;
  if (c == Collective::kBarrier) return what;
  // The v forms' counts differ by rank and are not compared: the signature carries none.
  std::string fields = known_collective(s.collective) && per_peer_counts(c)
                           ? std::string(datatype_name(dtype))
                           : strprintf("count %llu, %s", count, datatype_name(dtype));
  if (reduces(s.collective)) fields += strprintf(", %s", op_name(s.op));
  if (has_root(s.collective)) fields += strprintf(", root %d", s.root);
  return what + " (" + fields + ")";
}

std::string notice_text(const FailureNotice &notice, size_t received) {
  if (received != sizeof notice || notice.magic != FailureNotice::kMagic ||
      notice.length > sizeof notice.text)
    return "a garbled mismatch notice";
  std::string text(notice.text, notice.length);
  for (char &c : text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return text;
}

bool same_call(const CallSignature &a, const CallSignature &b) {
  if (a.magic != b.magic || a.seq != b.seq || a.collective != b.collective) return false;
  if (a.collective == static_cast<uint8_t>(Collective::kBarrier)) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  if (reduces(a.collective) && a.op != b.op) return false;
  if (has_root(a.collective) && a.root != b.root) return false;
  return true;
}

CallStamp stamp_of(const CallSignature &signature) {
  const bool barrier = signature.collective == static_cast<uint8_t>(Collective::kBarrier);
  const bool rooted = has_root(signature.collective);
  // The fields same_call ignores are zeroed, so that equal calls give equal bytes.
  CallStamp stamp;
  stamp.bytes[0] = signature.collective;
  stamp.bytes[1] = barrier ? 0 : signature.dtype;
  stamp.bytes[2] = reduces(signature.collective) ? signature.op : 0;
  stamp.bytes[3] = 1;  // a stamp is present
  const int32_t root = rooted ? signature.root : 0;
  const uint64_t count = barrier ? 0 : signature.count;
  std::memcpy(stamp.bytes + 4, &root, sizeof root);
  std::memcpy(stamp.bytes + 8, &count, sizeof count);
  return stamp;
}

Status mismatch_error(int their_rank, const std::string &theirs, int my_rank,
                      const CallSignature &mine) {
  return invalid_usage("mismatched collective calls: rank %d called %s, but rank %d called %s",
                       their_rank, theirs.c_str(), my_rank, describe_signature(mine).c_str());
}

Status stamp_mismatch_error(int their_rank, const CallStamp &theirs, int my_rank,
                            const CallSignature &mine) {
  return mismatch_error(their_rank, describe_signature(signature_of_stamp(theirs, mine.seq)),
                        my_rank, mine);
}

}  // namespace ddl

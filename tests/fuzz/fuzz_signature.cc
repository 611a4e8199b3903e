// The collective headers that travel between ranks before a collective's data
// (lib/exec/signature.h): a received CallSignature, compared with this rank's own by
// same_call and described by describe_signature for the mismatch error, and a received
// FailureNotice, whose text notice_text extracts. Both come off the network as raw bytes, so
// every field may hold anything, and the notice may be cut short (any received length).
//
// Input: 24 bytes of a received signature, 24 of this rank's own, 8 of the received length,
// then up to 512 bytes of the notice (zero-filled beyond the input). Each struct lives in an
// exact-size heap buffer, so that ASan sees a read past it. Checked: describe_signature says
// "garbage" exactly for a wrong magic and otherwise starts with the collective's name and the
// sequence number; same_call is reflexive and symmetric and ignores exactly the fields the
// collective ignores; notice_text returns the text only for a whole notice with the right
// magic and a length within the buffer, printable ASCII only, and a fixed phrase otherwise.
#include <cstring>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "lib/algorithms/schedule.h"
#include "lib/exec/signature.h"

using ddl::CallSignature;
using ddl::Collective;
using ddl::FailureNotice;

namespace {

std::unique_ptr<CallSignature> signature_from(ddl_fuzz::Reader &in) {
  std::unique_ptr<CallSignature> s(new CallSignature);
  uint8_t raw[sizeof(CallSignature)] = {};
  for (uint8_t &b : raw) b = in.byte();
  std::memcpy(s.get(), raw, sizeof raw);
  return s;
}

void check_description(const CallSignature &s) {
  const std::string d = ddl::describe_signature(s);
  if (s.magic != CallSignature::kMagic) {
    FUZZ_CHECK(d == "garbage (not a ddl call signature)", "'%s' for a bad magic", d.c_str());
    return;
  }
  const std::string head =
      std::string(ddl::collective_name(static_cast<Collective>(s.collective))) + " #" +
      std::to_string(s.seq);
  FUZZ_CHECK(d.compare(0, head.size(), head) == 0, "'%s' does not start with '%s'", d.c_str(),
             head.c_str());
  for (char c : d) FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "unprintable byte in '%s'", d.c_str());
}

// same_call by the rules in signature.h, written out here.
bool reference_same(const CallSignature &a, const CallSignature &b) {
  if (a.magic != b.magic || a.seq != b.seq || a.collective != b.collective) return false;
  const auto c = static_cast<Collective>(a.collective);
  if (c == Collective::kBarrier) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  if ((c == Collective::kAllreduce || c == Collective::kReduceScatter) && a.op != b.op)
    return false;
  if (c == Collective::kBroadcast && a.root != b.root) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ddl_fuzz::Reader in(data, size);
  std::unique_ptr<CallSignature> theirs = signature_from(in), mine = signature_from(in);
  const size_t received = static_cast<size_t>(in.u64());
  std::unique_ptr<FailureNotice> notice(new FailureNotice);
  uint8_t raw[sizeof(FailureNotice)] = {};
  for (uint8_t &b : raw) {
    if (in.empty()) break;
    b = in.byte();
  }
  std::memcpy(notice.get(), raw, sizeof raw);

  check_description(*theirs);
  check_description(*mine);
  const bool same = ddl::same_call(*theirs, *mine);
  FUZZ_CHECK(same == ddl::same_call(*mine, *theirs), "same_call is not symmetric");
  FUZZ_CHECK(same == reference_same(*theirs, *mine), "same_call says %d", same);
  FUZZ_CHECK(ddl::same_call(*theirs, *theirs), "same_call is not reflexive");
  if (std::memcmp(theirs.get(), mine.get(), sizeof(CallSignature)) == 0)
    FUZZ_CHECK(same, "identical bytes, different calls");

  // The receiver passes how many bytes arrived; a notice is only read when all of it did.
  const std::string text = ddl::notice_text(*notice, received);
  const bool whole = received == sizeof(FailureNotice) && notice->magic == FailureNotice::kMagic &&
                     notice->length <= sizeof notice->text;
  if (!whole) {
    FUZZ_CHECK(text == "a garbled mismatch notice", "'%s' from a garbled notice", text.c_str());
  } else {
    FUZZ_CHECK(text.size() == notice->length, "text of %zu bytes, length %u", text.size(),
               notice->length);
    for (size_t i = 0; i < text.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(notice->text[i]);
      const char want = (c < 0x20 || c > 0x7e) ? '?' : static_cast<char>(c);
      FUZZ_CHECK(text[i] == want, "byte %zu: '%c', want '%c'", i, text[i], want);
    }
  }
  return 0;
}

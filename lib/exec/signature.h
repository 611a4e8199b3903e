// The signature of a collective call: what every rank must agree on. Before its first step
// each rank sends its signature to the next rank of the ring and checks the one from the
// previous rank; as the ring closes, adjacent agreement means everyone agrees, so ranks that
// called different collectives or arguments get an error naming both, not a hang or silent
// corruption. The message travels beside the data, off the critical path.
#pragma once

#include <cstdint>
#include <string>

#include "ddl/ddl.h"
#include "lib/common/status.h"
#include "lib/transports/transport.h"

namespace ddl {

struct CallSignature {
  uint32_t magic = kMagic;
  uint32_t seq = 0;
  uint8_t collective = 0;  // ddl::Collective
  uint8_t dtype = 0;
  uint8_t op = 0;  // meaningful for reducing collectives only
  uint8_t reserved = 0;
  int32_t root = 0;                               // meaningful for broadcast only
  uint64_t count = 0;                             // as the C call names it
  static constexpr uint32_t kMagic = 0x64646c53;  // "ddlS"
};
static_assert(sizeof(CallSignature) == 24, "the signature's wire size is fixed");

// What a rank that found the job broken (mismatched calls, a dead rank) tells every other
// rank, so that all of them fail at once with the same explanation instead of only the
// neighbours of the problem (the others would wait for their deadline).
struct FailureNotice {
  uint32_t magic = kMagic;
  int32_t rank = -1;  // who found it
  uint32_t seq = 0;
  int32_t code = 0;     // ddl_result_t
  uint32_t length = 0;  // of text
  char text[492] = {};
  static constexpr uint32_t kMagic = 0x64646c4e;  // "ddlN"
};
static_assert(sizeof(FailureNotice) == 512, "the notice's wire size is fixed");

// The notice's text, checked: it comes from the network.
std::string notice_text(const FailureNotice &notice, size_t received);

// "allreduce #12 (count 1024, float32, sum)"
std::string describe_signature(const CallSignature &signature);
// Whether two signatures describe the same call (ignoring fields the collective ignores).
bool same_call(const CallSignature &a, const CallSignature &b);
// The error of ranks that made different calls, naming both: `theirs` describes the call of
// rank `their_rank`, as far as this rank knows it.
Status mismatch_error(int their_rank, const std::string &theirs, int my_rank,
                      const CallSignature &mine);

// The call as it rides on messages of transports that stamp them (Transport::begin_call):
// the fields same_call compares, as bytes.
CallStamp stamp_of(const CallSignature &signature);
// mismatch_error for a stamp of rank `their_rank` that differs from this rank's call.
Status stamp_mismatch_error(int their_rank, const CallStamp &theirs, int my_rank,
                            const CallSignature &mine);

}  // namespace ddl

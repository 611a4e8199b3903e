// The 24-bit tag space of messages (lib/transports/transport.h carries a tag with each message,
// beside its sender and sequence number), and what each part is for: shared by the
// schedules that number their steps, the point-to-point calls, and the transports, which
// treat some tags specially.
#pragma once

#include <cstdint>

namespace ddl {

// Steps of collectives use the lower half; the upper half is point-to-point messages
// (ddl_send_tag and ddl_recv_tag: the base plus the user's tag, lib/core/point_to_point.h),
// whose span ends below the tags the runtime keeps for itself: the agreement's messages
// (lib/core/agreement.cc) above the span, then the call signature every rank sends ahead of a
// collective, and the notices a rank sends everyone when it finds the job's calls
// inconsistent.
constexpr uint32_t kMaxStepTag = (1u << 23) - 1;
constexpr uint32_t kPointToPointTagBase = 1u << 23;
constexpr uint32_t kPointToPointTagSpan = 1u << 22;
constexpr uint32_t kAgreementTag = kPointToPointTagBase + kPointToPointTagSpan;
constexpr uint32_t kNoticeTag = (1u << 24) - 2;
constexpr uint32_t kSignatureTag = (1u << 24) - 1;
static_assert(kAgreementTag < kNoticeTag, "the agreement's tag below the reserved ones");

// Tags from the point-to-point base up belong to no collective call: transports that stamp
// messages with the current call leave them unstamped and never compare them, except the
// signatures and notices.
inline bool stamped_tag(uint32_t tag) {
  return tag < kPointToPointTagBase || tag >= kNoticeTag;
}

}  // namespace ddl

// The executor: runs one rank's plan over a transport. Steps start as soon as their
// dependencies complete, so the chunks of a pipelined schedule overlap sending, receiving
// and reducing. Every wait honours the deadline; a failure names the step and the peer.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "ddl/ddl.h"
#include "lib/exec/plan.h"
#include "lib/exec/signature.h"
#include "lib/transports/transport.h"

namespace ddl {

// The buffers of this rank's peers on its host, as they published them for the call: what
// kPeerRead and kPeerWrite steps copy from and into (lib/core/peer_buffers.h). Offsets are
// bytes into the peer's input (reads) or output (writes). Errors name the peer and the range.
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual Status read(int peer, size_t offset, void *into, size_t bytes) = 0;
  virtual Status write(int peer, size_t offset, const void *from, size_t bytes) = 0;
};

struct ExecArgs {
  const void *input = nullptr;
  void *output = nullptr;
  void *scratch = nullptr;  // at least plan.schedule.scratch_count elements
  ddl_datatype_t dtype = DDL_FLOAT32;
  ddl_op_t op = DDL_SUM;
  int rank = 0;
  int nranks = 1;
  uint32_t seq = 0;
  // This rank's view of the call; exchanged around the ring and compared (may be null).
  const CallSignature *signature = nullptr;
  // The communicator's standing receive of mismatch notices from other ranks (may be null).
  const TransferRequest *notice = nullptr;
  const FailureNotice *notice_message =
      nullptr;  // the collective's sequence number (message matching)
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool> *abort_flag = nullptr;  // ddl_comm_abort: checked while waiting
  // Idle polls before the executor yields the core: long when every rank has a core of its
  // own (a peer is likely running and about to answer), short when ranks outnumber cores
  // (the peer this rank waits for may need this very core to run).
  int spins_before_yield = 2000;
  // Yields before it sleeps between polls. Sleeping (20 us asked, ~70 us with the kernel's
  // timer slack) frees the core for ranks that share it, but costs that much latency: only
  // oversubscribed ranks sleep soon; the others after a long wait (~10 ms).
  int yields_before_sleep = 100000;
  // The peers' buffers, for a plan with kPeerRead or kPeerWrite steps (else null).
  PeerMemory *peer_memory = nullptr;
  // The transport of each peer, to post to directly (else null: everything goes through the
  // transport the run is given, which still drives progress and knows the peers' state).
  const Carriers *carriers = nullptr;
};

// The error a failure notice from another rank (args.notice, done) stands for.
Status notice_error(const ExecArgs &args);
// A failure (a dead peer, one that left the call) that another rank's notice may explain
// better, the notice being on its way: polls every path a few times, and for `grace` more,
// for one. The notice's error (*news = false: everyone was told), else `error` (*news =
// true: this rank's news for everyone).
Status prefer_notice(Transport *transport, const ExecArgs &args, const Status &error,
                     std::chrono::milliseconds grace, bool *news);
// What a waiting loop does after `idle` polls that found nothing: nothing at first, then it
// yields the core, then it sleeps briefly (ExecArgs::spins_before_yield, yields_before_sleep).
void idle_pause(int idle, const ExecArgs &args);

class Executor {
 public:
  // Runs the plan to completion. On error every unfinished transfer is cancelled.
  Status run(const Plan &plan, const ExecArgs &args, Transport *transport);
  // Whether the last failed run found, itself, a problem that every rank should hear of:
  // mismatched calls or a dead rank (not a notice it received, not a timeout).
  bool found_failure() const { return found_failure_; }

 private:
  Status start(const Plan &plan, uint32_t step, const ExecArgs &args, Transport *transport);
  Status finish(const Plan &plan, uint32_t step, const ExecArgs &args, Transport *transport);
  void complete(const Plan &plan, uint32_t step);
  Status waiting_error(const Plan &plan, const ExecArgs &args, Transport *transport,
                       bool timed_out);
  void cancel_all();
  Status post_signature(const Plan &plan, const ExecArgs &args);
  // A mismatch the transport saw in the stamps of arriving messages, else OK; notes the
  // previous rank's stamp arriving (the signature check when it rides on data).
  Status check_stamps(const ExecArgs &args);
  // The mismatch error when the previous rank's signature differs from ours, else OK.
  Status check_signature(const ExecArgs &args);
  // Hands the payload that came with the previous rank's signature to its receive step.
  void deliver_shared(const Plan &plan, const ExecArgs &args);
  // After a data error: a mismatch (ours, or another rank's notice) explains it better.
  Status explain_with_signature(const ExecArgs &args, Transport *transport, Status error);
  // `error` with what the transport knows of failed_peer_ after `grace` (its host, the other
  // ranks lost with it), when that adds anything.
  Status with_peer_state(Transport *transport, Status error, std::chrono::milliseconds grace);

  // Where this run posts to `peer`: ExecArgs::carriers', else the run's transport.
  Transport *carrier(int peer) const {
    return carriers_ ? carriers_->by_peer[static_cast<size_t>(peer)] : transport_;
  }
  // Tells every transport this run posts to that a call begins (its stamp); whether one saw
  // a message of this call with another stamp.
  void begin_call(uint32_t seq, const CallStamp &stamp);
  bool stamp_mismatch(int *peer, CallStamp *theirs) const;
  // Cancels *req on the transport it was posted to (none: never posted), and forgets it.
  static void cancel(TransferRequest *req, Transport **owner);

  Transport *transport_ = nullptr;
  const Carriers *carriers_ = nullptr;
  // Reused between runs to keep the hot path free of allocations.
  std::vector<TransferRequest> requests_;
  std::vector<Transport *> owners_;  // the transport each posted request is on
  std::vector<uint8_t> fused_;       // a kRecvReduce the transport reduces on receive
  std::vector<uint32_t> remaining_;
  std::vector<uint32_t> ready_;
  std::vector<uint32_t> in_flight_;
  size_t completed_ = 0;
  // Signature messages: the call's signature, then, where the message has room, the payload
  // of a small message the schedule sends to the same rank at once (so a small collective
  // over UCX sends one message per peer, not two). Ours, and the previous rank's.
  static constexpr size_t kSharedPayloadMax = 4096;
  alignas(8) unsigned char signature_out_[sizeof(CallSignature) + kSharedPayloadMax];
  alignas(8) unsigned char signature_in_[sizeof(CallSignature) + kSharedPayloadMax];
  TransferRequest signature_send_, signature_recv_;
  Transport *signature_send_owner_ = nullptr, *signature_recv_owner_ = nullptr;
  uint32_t shared_send_ = kNoStep;    // the send step whose payload left with our signature
  uint32_t shared_recv_ = kNoStep;    // the receive step whose payload comes with the previous
  size_t shared_recv_bytes_ = 0;      // rank's signature, and how much comes
  bool shared_recv_waiting_ = false;  // that step has started and waits for the signature
  bool signature_checked_ = true;     // the previous rank's signature arrived and matched
  bool signature_sent_ = true;        // ours left (its buffer may be reused)
  bool found_failure_ = false;
  int failed_peer_ = -1;  // the peer of a transfer that failed, for the error's explanation
  bool stamped_ = false;  // this call's stamp was given to the transport
};

}  // namespace ddl

#include "lib/exec/executor.h"

#include <sched.h>

#include <cstring>
#include <ctime>
#include <set>

#include "lib/common/clock.h"
#include "lib/common/datatype.h"
#include "lib/reduce/reduce.h"

namespace ddl {
namespace {

// Waiting that survives oversubscription: spin while the peer is likely running, then yield
// the core, then sleep briefly so that ranks sharing a core still get to run.
constexpr long kSleepNs = 20000;
// How often (in idle iterations) the deadline and the abort flag are looked at.
constexpr int kCheckEvery = 256;
// Polls of every path for a notice that explains a death, before reporting the death itself.
constexpr int kNoticePolls = 64;
// How long a rank that found a peer dead lets the transport catch up before it words the
// error (Executor::with_peer_state); then it waits until what the transport says about the
// peer has not changed for kPeerStateSettle, for at most kPeerStateLimit in all. A killed
// process's connections close only after the kernel has unmapped its memory: on a loaded
// machine one of a killed host's ranks was seen lost more than 100 ms after the other (1 run
// of test_host_failure's killed host in 30 with a 100 ms settle).
constexpr std::chrono::milliseconds kPeerStateGrace(100);
constexpr std::chrono::milliseconds kPeerStateSettle(300);
constexpr std::chrono::milliseconds kPeerStateLimit(2000);

std::string describe(const Step &step, size_t index, size_t elem_size) {
  if (step.kind == StepKind::kCopy || step.kind == StepKind::kReduce)
    return strprintf("step %zu (%s of %zu B)", index, step_kind_text(step.kind),
                     step.count * elem_size);
  if (is_peer_memory(step.kind))
    return strprintf("step %zu (%s rank %d, %zu B)", index, step_kind_text(step.kind), step.peer,
                     step.count * elem_size);
  return strprintf("step %zu (%s rank %d, tag %u, %zu B)", index, step_kind_text(step.kind),
                   step.peer, step.tag, step.count * elem_size);
}

char *address(const ExecArgs &args, Range range, size_t elem_size) {
  char *base = nullptr;
  switch (range.buffer) {
    case BufferId::kInput:
      base = static_cast<char *>(const_cast<void *>(args.input));
      break;
    case BufferId::kOutput:
      base = static_cast<char *>(args.output);
      break;
    case BufferId::kScratch:
      base = static_cast<char *>(args.scratch);
      break;
  }
  return base + range.offset * elem_size;
}

// A kPeerRead or kPeerWrite step, at once.
Status copy_with_peer(const Step &step, const ExecArgs &args) {
  const size_t elem = datatype_size(args.dtype);
  const size_t bytes = step.count * elem;
  if (!args.peer_memory) return internal_error("no peer buffers were published for this call");
  if (bytes == 0) return Status::Ok();
  if (step.kind == StepKind::kPeerRead)
    return args.peer_memory->read(step.peer, step.src.offset * elem, address(args, step.dst, elem),
                                  bytes);
  return args.peer_memory->write(step.peer, step.dst.offset * elem, address(args, step.src, elem),
                                 bytes);
}

// dst = tmp (op) src for a kRecvReduce or kReduce step. AVG sums along the way and divides
// once, where the element becomes complete.
void apply_reduce(const Step &step, const ExecArgs &args) {
  if (step.count == 0) return;
  const size_t elem = datatype_size(args.dtype);
  const ddl_op_t op = args.op == DDL_AVG && !step.final_reduce ? DDL_SUM : args.op;
  reduce(args.dtype, op, address(args, step.dst, elem), address(args, step.tmp, elem),
         address(args, step.src, elem), step.count, args.nranks);
}

}  // namespace

Status Executor::run(const Plan &plan, const ExecArgs &args, Transport *transport) {
  const size_t n = plan.schedule.steps.size();
  if (requests_.size() < n) requests_.resize(n);
  if (owners_.size() < n) owners_.resize(n);
  if (fused_.size() < n) fused_.resize(n);
  transport_ = transport;
  carriers_ = args.carriers;
  remaining_.assign(plan.dep_counts.begin(), plan.dep_counts.end());
  ready_.assign(plan.initial_ready.begin(), plan.initial_ready.end());
  in_flight_.clear();
  completed_ = 0;
  found_failure_ = false;
  failed_peer_ = -1;
  size_t next_ready = 0;
  int idle = 0;
  Status posted = post_signature(plan, args);
  if (!posted.ok()) {
    if (posted.code() != DDL_ERR_REMOTE) return posted;
    // A dead peer, found as the call begins (a killed host is often seen here first, by the
    // second or third plan of a call): tell everyone, naming all that went with it.
    found_failure_ = true;
    return with_peer_state(transport, posted, kPeerStateGrace);
  }
  if (stamped_) {
    // A message of this call may have arrived before it began, its stamp already compared.
    Status s = check_stamps(args);
    if (!s.ok()) {
      cancel_all();
      return s;
    }
  }
  auto fail = [&](Status error) {
    error = explain_with_signature(args, transport, std::move(error));
    cancel_all();
    return error;
  };
  while (completed_ < n || !signature_checked_ || !signature_sent_) {
    // Start everything that may start. Starting can complete steps (copies, eager
    // messages already there) and so make more steps ready: ready_ grows while we walk it.
    while (next_ready < ready_.size()) {
      const uint32_t index = ready_[next_ready++];
      Status s = start(plan, index, args, transport);
      if (!s.ok()) return fail(s);
      // A single copy with a peer takes a chunk's time at once: between them the network
      // moves too, or a long run of them would leave it idle.
      if (is_peer_memory(plan.schedule.steps[index].kind)) transport->progress();
    }
    // Asleep between polls (ranks outnumber cores, a long wait), it polls every path: a
    // router looks at the network only every so many polls, which at ~70 us a poll took tens
    // of ms to see a failure notice (16 ranks on 2 cores: the last learnt of a death 0.1 s
    // after it, the first 8 ms).
    const bool asleep = idle > args.spins_before_yield + args.yields_before_sleep;
    bool progressed = asleep ? transport->progress_all() : transport->progress();
    // Stamps change only as messages arrive, which progress() reports.
    if (stamped_ && progressed) {
      Status s = check_stamps(args);
      if (!s.ok()) {
        cancel_all();
        return s;
      }
    }
    if (!signature_checked_ && signature_recv_.done) {
      Status s = check_signature(args);
      if (!s.ok()) {
        cancel_all();
        return s;
      }
      if (shared_recv_waiting_) deliver_shared(plan, args);
      progressed = true;
    }
    if (!signature_sent_ && signature_send_.done) {
      signature_sent_ = true;
      if (!signature_send_.status.ok()) {
        Status s = signature_send_.status;
        failed_peer_ = ring_index(args.rank + 1, args.nranks);
        if (s.code() == DDL_ERR_REMOTE) found_failure_ = true;
        return fail(s.prefix("sending the call signature: "));
      }
      progressed = true;
    }
    if (completed_ == n && signature_checked_ && signature_sent_) break;
    for (size_t k = 0; k < in_flight_.size();) {
      const uint32_t step = in_flight_[k];
      if (!requests_[step].done) {
        ++k;
        continue;
      }
      in_flight_[k] = in_flight_.back();
      in_flight_.pop_back();
      Status s = finish(plan, step, args, transport);
      if (!s.ok()) return fail(s);
      progressed = true;
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    if (in_flight_.empty() && next_ready == ready_.size() && signature_checked_ && signature_sent_)
      return internal_error("the schedule cannot make progress: %zu of %zu steps done", completed_,
                            n);
    ++idle;
    if (idle % kCheckEvery == 0) {
      const bool aborted = args.abort_flag && args.abort_flag->load(std::memory_order_relaxed);
      const bool timed_out = coarse_now() >= args.deadline;
      if (args.notice && args.notice->done) {
        cancel_all();
        return notice_error(args);
      }
      Status s = waiting_error(plan, args, transport, timed_out);
      if (aborted) {
        cancel_all();
        return Status(DDL_ERR_INVALID_USAGE, "aborted by ddl_comm_abort while waiting");
      }
      // A confirmed death is the news itself: report it at once (a timeout may still be
      // explained by a mismatch, so it waits for one briefly). But the dead rank may have
      // died of the news: having told everyone of an earlier death, it exited. Its notice
      // is then already here, in a path a router polls only now and then.
      if (!s.ok() && s.code() == DDL_ERR_REMOTE && found_failure_) {
        s = prefer_notice(transport, args, s, std::chrono::milliseconds(0), &found_failure_);
        if (found_failure_) s = with_peer_state(transport, s, kPeerStateGrace);  // our news
        cancel_all();
        return s;
      }
      if (!s.ok()) return fail(s);
    }
    idle_pause(idle, args);
  }
  return Status::Ok();
}

Status Executor::start(const Plan &plan, uint32_t index, const ExecArgs &args,
                       Transport *transport) {
  const Step &step = plan.schedule.steps[index];
  const size_t elem = datatype_size(args.dtype);
  const size_t bytes = step.count * elem;
  TransferRequest *req = &requests_[index];
  Transport *to = step.peer >= 0 ? carrier(step.peer) : transport;
  owners_[index] = nullptr;
  Status s;
  switch (step.kind) {
    case StepKind::kCopy:
      if (bytes) std::memcpy(address(args, step.dst, elem), address(args, step.src, elem), bytes);
      complete(plan, index);
      return Status::Ok();
    case StepKind::kReduce:
      apply_reduce(step, args);
      complete(plan, index);
      return Status::Ok();
    case StepKind::kPeerRead:
    case StepKind::kPeerWrite:
      s = copy_with_peer(step, args);
      if (s.ok()) {
        complete(plan, index);
        return s;
      }
      found_failure_ = true;  // the peer left or died: tell everyone
      failed_peer_ = step.peer;
      return s.prefix(describe(step, index, elem) + ": ");
    case StepKind::kSend:
      if (index == shared_send_) {  // it left with the signature
        complete(plan, index);
        return Status::Ok();
      }
      owners_[index] = to;
      s = to->post_send(step.peer, args.seq, step.tag, address(args, step.src, elem), bytes, req);
      break;
    case StepKind::kRecv:
    case StepKind::kRecvReduce:
      if (index == shared_recv_) {  // it comes with the previous rank's signature
        *req = TransferRequest();
        fused_[index] = false;
        shared_recv_waiting_ = true;
        if (signature_checked_) deliver_shared(plan, args);
        break;
      }
      owners_[index] = to;
      if (step.kind == StepKind::kRecvReduce) {
        fused_[index] = to->reduces_on_receive(step.peer);
        if (fused_[index]) {
          // Reduced straight out of the transport's memory: the landing area stays unused.
          ReduceSpec spec;
          spec.dtype = args.dtype;
          spec.op = args.op == DDL_AVG && !step.final_reduce ? DDL_SUM : args.op;
          spec.avg_divisor = args.nranks;
          s = to->post_recv_reduce(step.peer, args.seq, step.tag, address(args, step.dst, elem),
                                   address(args, step.src, elem), bytes, spec, req);
        } else {
          s = to->post_recv(step.peer, args.seq, step.tag, address(args, step.tmp, elem), bytes,
                            req);
        }
        break;
      }
      s = to->post_recv(step.peer, args.seq, step.tag, address(args, step.dst, elem), bytes, req);
      break;
  }
  if (!s.ok()) {
    if (s.code() == DDL_ERR_REMOTE) {
      found_failure_ = true;  // a dead peer: tell everyone
      failed_peer_ = step.peer;
    }
    return s.prefix(describe(step, index, elem) + ": ");
  }
  if (req->done) return finish(plan, index, args, transport);
  in_flight_.push_back(index);
  return Status::Ok();
}

Status Executor::finish(const Plan &plan, uint32_t index, const ExecArgs &args,
                        Transport *transport) {
  const Step &step = plan.schedule.steps[index];
  const size_t elem = datatype_size(args.dtype);
  TransferRequest &req = requests_[index];
  if (!req.status.ok()) {
    Status s = req.status;
    if (s.code() == DDL_ERR_SYSTEM && step.peer >= 0) s = Status(DDL_ERR_REMOTE, s.message());
    found_failure_ = true;
    failed_peer_ = step.peer;
    return s.prefix(describe(step, index, elem) + ": ");
  }
  // Nothing that came from a rank making another call may be used or passed on: the stamps
  // of what arrived are checked before a receive counts as done.
  if (step.kind != StepKind::kSend && stamped_) DDL_RETURN_IF_ERROR(check_stamps(args));
  if (step.kind != StepKind::kSend && req.received != step.count * elem) {
    // The ranks disagree about the call (counts of a v form, most often): everyone must hear.
    found_failure_ = true;
    return invalid_usage(
        "%s: rank %d sent %zu B instead of %zu B (counts that disagree between the ranks, or "
        "mismatched collective calls)",
        describe(step, index, elem).c_str(), step.peer, req.received, step.count * elem);
  }
  if (step.kind == StepKind::kRecvReduce && !fused_[index]) apply_reduce(step, args);
  complete(plan, index);
  return Status::Ok();
}

void Executor::complete(const Plan &plan, uint32_t index) {
  ++completed_;
  for (uint32_t k = plan.dependents_begin[index]; k < plan.dependents_begin[index + 1]; ++k) {
    const uint32_t next = plan.dependents[k];
    if (--remaining_[next] == 0) ready_.push_back(next);
  }
}

// While waiting: a dead rank this rank waits for is an error now; a passed deadline names
// who is silent. Only direct peers are checked: a rank that finished its part may rightly
// have exited. A rank that notices a death tells everyone (failure notices), which covers
// the ranks that wait for it only indirectly.
Status Executor::waiting_error(const Plan &plan, const ExecArgs &args, Transport *transport,
                               bool timed_out) {
  std::set<int> silent;
  for (uint32_t index : in_flight_) {
    const Step &step = plan.schedule.steps[index];
    Status peer = transport->peer_status(step.peer);
    if (!peer.ok()) {
      found_failure_ = true;
      failed_peer_ = step.peer;
      return peer.prefix(describe(step, index, datatype_size(args.dtype)) + ": ");
    }
    silent.insert(step.peer);
  }
  if (!signature_checked_) {
    const int left = ring_index(args.rank - 1, args.nranks);
    Status peer = transport->peer_status(left);
    if (!peer.ok()) {
      found_failure_ = true;
      failed_peer_ = left;
      return peer.prefix("waiting for the call signature: ");
    }
    silent.insert(left);
  }
  if (!timed_out) return Status::Ok();
  std::string peers;
  for (int p : silent) peers += (peers.empty() ? "" : ", ") + std::to_string(p);
  const uint32_t first = in_flight_.empty() ? 0 : in_flight_.front();
  return timeout_error(
      "timed out with %zu of %zu steps done, waiting for ranks %s (e.g. %s)", completed_,
      plan.schedule.steps.size(), peers.c_str(),
      in_flight_.empty()
          ? "nothing"
          : describe(plan.schedule.steps[first], first, datatype_size(args.dtype)).c_str());
}

void Executor::cancel(TransferRequest *req, Transport **owner) {
  if (*owner) (*owner)->cancel(req);
  *owner = nullptr;
}

void Executor::cancel_all() {
  for (uint32_t index : in_flight_) cancel(&requests_[index], &owners_[index]);
  in_flight_.clear();
  cancel(&signature_send_, &signature_send_owner_);
  cancel(&signature_recv_, &signature_recv_owner_);
  signature_checked_ = signature_sent_ = true;
}

void Executor::begin_call(uint32_t seq, const CallStamp &stamp) {
  if (!carriers_) return transport_->begin_call(seq, stamp);
  for (Transport *t : carriers_->distinct) t->begin_call(seq, stamp);
}

bool Executor::stamp_mismatch(int *peer, CallStamp *theirs) const {
  if (!carriers_) return transport_->stamp_mismatch(peer, theirs);
  for (const Transport *t : carriers_->distinct)
    if (t->stamp_mismatch(peer, theirs)) return true;
  return false;
}

// Every rank checks that the previous rank of the ring made the same call, and the ring
// closes, so all agree. A transport that stamps messages (shm) carries the signature on the
// first data message to the next rank, when one leaves at once; then the previous rank's
// stamp arriving is the check. Whether the previous rank does so is known from its schedule
// (Plan::from_left_at_once). Otherwise (UCX) the signature is a message of its own, which
// both ranks always exchange, so that ranks with different schedules still meet; it also
// carries the payload of the first small message the schedule sends the same rank at once,
// which then needs no message of its own. Should the ranks disagree about the call (and so
// about the schedules), the signatures, or the stamps of whatever arrives, tell.
Status Executor::post_signature(const Plan &plan, const ExecArgs &args) {
  signature_checked_ = signature_sent_ = true;
  signature_send_owner_ = signature_recv_owner_ = nullptr;  // nothing of the last call is posted
  stamped_ = false;
  shared_send_ = shared_recv_ = kNoStep;
  shared_recv_bytes_ = 0;
  shared_recv_waiting_ = false;
  if (!args.signature || args.nranks < 2) return Status::Ok();
  const int right = ring_index(args.rank + 1, args.nranks);
  const int left = ring_index(args.rank - 1, args.nranks);
  begin_call(args.seq, stamp_of(*args.signature));
  stamped_ = true;
  const bool carried = carrier(right)->carries_stamps(right) && !plan.to_right_at_once.empty();
  const bool comes_carried = carrier(left)->carries_stamps(left) && !plan.from_left_at_once.empty();
  // Both ranks pick the same message: the first of the sender's that fits.
  const size_t elem = datatype_size(args.dtype);
  auto shared = [&](const std::vector<AtOnceMessage> &messages) -> const AtOnceMessage * {
    for (const AtOnceMessage &m : messages)
      if (m.count * elem <= kSharedPayloadMax) return &m;
    return nullptr;
  };
  Status s = Status::Ok();
  signature_recv_ = TransferRequest();  // not done: nothing stale from the last call
  if (!comes_carried) {
    if (const AtOnceMessage *m = shared(plan.from_left_at_once)) {
      shared_recv_ = m->step;
      shared_recv_bytes_ = m->count * elem;
    }
    signature_recv_owner_ = carrier(left);
    s = signature_recv_owner_->post_recv(left, args.seq, kSignatureTag, signature_in_,
                                         sizeof signature_in_, &signature_recv_);
    if (!s.ok()) failed_peer_ = left;
  }
  if (s.ok() && !carried) {
    std::memcpy(signature_out_, args.signature, sizeof(CallSignature));
    size_t bytes = sizeof(CallSignature);
    if (const AtOnceMessage *m = shared(plan.to_right_at_once)) {
      const Step &step = plan.schedule.steps[m->step];
      if (m->count)
        std::memcpy(signature_out_ + bytes, address(args, step.src, elem), m->count * elem);
      bytes += m->count * elem;
      shared_send_ = m->step;
    }
    signature_send_owner_ = carrier(right);
    s = signature_send_owner_->post_send(right, args.seq, kSignatureTag, signature_out_, bytes,
                                         &signature_send_);
    if (!s.ok()) failed_peer_ = right;
  }
  if (!s.ok()) {
    cancel(&signature_recv_, &signature_recv_owner_);
    return s.prefix("sending the call signature: ");
  }
  signature_checked_ = false;
  signature_sent_ = carried;
  return Status::Ok();
}

Status Executor::check_stamps(const ExecArgs &args) {
  int peer = -1;
  CallStamp theirs;
  if (stamp_mismatch(&peer, &theirs)) {
    found_failure_ = true;
    return stamp_mismatch_error(peer, theirs, args.rank, *args.signature);
  }
  const int left = ring_index(args.rank - 1, args.nranks);
  if (!signature_checked_ && carrier(left)->stamp_seen(left)) {
    signature_checked_ = true;
    cancel(&signature_recv_, &signature_recv_owner_);  // no separate signature came
  }
  return Status::Ok();
}

Status Executor::check_signature(const ExecArgs &args) {
  signature_checked_ = true;
  const int left = ring_index(args.rank - 1, args.nranks);
  if (!signature_recv_.status.ok()) {
    Status s = signature_recv_.status;
    failed_peer_ = left;
    if (s.code() == DDL_ERR_REMOTE) found_failure_ = true;
    return s.prefix(strprintf("call signature from rank %d: ", left));
  }
  const size_t got = signature_recv_.received;
  CallSignature theirs;
  const bool whole = got >= sizeof theirs;
  if (whole) std::memcpy(&theirs, signature_in_, sizeof theirs);
  if (whole && same_call(theirs, *args.signature)) {
    const size_t payload = got - sizeof theirs;
    if (payload == shared_recv_bytes_ && (payload == 0 || shared_recv_ != kNoStep))
      return Status::Ok();
    found_failure_ = true;
    return internal_error("the call signature from rank %d carried %zu B of data, expected %zu B",
                          left, payload, shared_recv_bytes_);
  }
  found_failure_ = true;
  return mismatch_error(
      left, whole ? describe_signature(theirs) : "something else (wrong signature size)", args.rank,
      *args.signature);
}

void Executor::deliver_shared(const Plan &plan, const ExecArgs &args) {
  const Step &step = plan.schedule.steps[shared_recv_];
  const size_t elem = datatype_size(args.dtype);
  const size_t payload = signature_recv_.received - sizeof(CallSignature);
  // check_signature made sure the payload is what this step expects.
  void *landing = address(args, step.kind == StepKind::kRecv ? step.dst : step.tmp, elem);
  if (payload) std::memcpy(landing, signature_in_ + sizeof(CallSignature), payload);
  TransferRequest &req = requests_[shared_recv_];
  req.received = payload;
  req.done = true;
  shared_recv_waiting_ = false;
}

Status prefer_notice(Transport *transport, const ExecArgs &args, const Status &error,
                     std::chrono::milliseconds grace, bool *news) {
  const auto until = std::chrono::steady_clock::now() + grace;
  int polls = 0;
  while (args.notice && !args.notice->done &&
         (++polls <= kNoticePolls || std::chrono::steady_clock::now() < until))
    transport->progress_all();
  *news = !(args.notice && args.notice->done);  // else everyone was told already
  return *news ? error : notice_error(args);
}

void idle_pause(int idle, const ExecArgs &args) {
  if (idle > args.spins_before_yield + args.yields_before_sleep) {
    const timespec pause = {0, kSleepNs};
    nanosleep(&pause, nullptr);
  } else if (idle > args.spins_before_yield) {
    sched_yield();
  }
}

Status notice_error(const ExecArgs &args) {
  const FailureNotice &notice = *args.notice_message;
  const ddl_result_t code = notice.code == DDL_ERR_REMOTE ? DDL_ERR_REMOTE : DDL_ERR_INVALID_USAGE;
  return Status(code, strprintf("rank %d reports: %s", notice.rank,
                                notice_text(notice, args.notice->received).c_str()));
}

Status Executor::explain_with_signature(const ExecArgs &args, Transport *transport, Status error) {
  // A mismatch found here or reported by another rank explains the error better than its
  // symptom (a truncated message, a dead-looking peer): give both a moment to arrive.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  do {
    if (args.notice && args.notice->done) return notice_error(args);
    if (!signature_checked_ && signature_recv_.done) {
      Status mismatch = check_signature(args);
      if (!mismatch.ok()) return mismatch;
    }
    if (stamped_) {
      Status mismatch = check_stamps(args);
      if (!mismatch.ok()) return mismatch;
    }
    transport->progress();
  } while (std::chrono::steady_clock::now() < until);
  return with_peer_state(transport, std::move(error), std::chrono::milliseconds(0));
}

// A transfer that failed (a connection reset, an endpoint that timed out) says little by
// itself; a moment later the transport knows more about the peer: its host, whether it died,
// and which other ranks became unreachable with it (a killed host resets every connection to
// its ranks at once; the heartbeat thread sees each within its 20 ms poll).
Status Executor::with_peer_state(Transport *transport, Status error,
                                 std::chrono::milliseconds grace) {
  if (failed_peer_ < 0) return error;
  // A killed host's connections break one by one as their resets arrive, each seen by the
  // heartbeat thread within its poll; on a busy machine that takes longer than the grace, and
  // the error would name only some of the host's ranks. So wait until the picture settles.
  // A death the transport saw itself (a pid on this host that ended) is the whole picture at
  // once: the wait cost a killed rank's peers 0.3 s of their recovery (bench/recovery.md).
  const auto start = std::chrono::steady_clock::now();
  std::string said = transport->peer_status(failed_peer_).message();
  auto changed = start;
  for (auto now = start; now - start < kPeerStateLimit; now = std::chrono::steady_clock::now()) {
    if (transport->peer_death_final(failed_peer_)) break;
    if (now - start >= grace && now - changed >= kPeerStateSettle) break;
    transport->progress_all();
    const timespec pause = {0, kSleepNs};
    nanosleep(&pause, nullptr);
    std::string says = transport->peer_status(failed_peer_).message();
    if (says != said) {
      said = std::move(says);
      changed = std::chrono::steady_clock::now();
    }
  }
  const Status peer = transport->peer_status(failed_peer_);
  if (peer.ok() || error.message().find(peer.message()) != std::string::npos) return error;
  return Status(DDL_ERR_REMOTE, error.message() + "; " + peer.message());
}

}  // namespace ddl

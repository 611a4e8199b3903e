#include "lib/core/point_to_point.h"

#include "lib/common/datatype.h"
#include "lib/core/progress.h"
#include "lib/device/bounce.h"

namespace ddl {

static_assert(kPointToPointTagBase + kPointToPointTagSpan <= kNoticeTag,
              "point-to-point tags stay below the reserved ones");

namespace {

// How often (in idle polls) the deadline, notices, abort and the peers' life are looked at.
constexpr int kCheckEvery = 256;
// Transports match sequence numbers of kTransportSeqBits (lib/transports/transport.h): the
// k-th message of a pair and tag travels as k modulo this, which both sides compute alike.
constexpr uint32_t kNumberMask = (1u << kTransportSeqBits) - 1;

uint32_t transport_tag(const CollectiveCall &call) {
  return kPointToPointTagBase + static_cast<uint32_t>(call.tag);
}

}  // namespace

struct PointToPointBatch::Transfer {
  const CollectiveCall *call = nullptr;
  int peer = -1;        // the rank it goes to or comes from (found later for any source)
  uint32_t number = 0;  // the k-th of this direction, pair and tag (its sequence number)
  uint64_t ticket = 0;  // receives: the order they were posted in (ddl_comm::receives_posted)
  size_t bytes = 0;
  // Device memory goes through host memory (lib/device/bounce.h); null for host memory.
  std::unique_ptr<device::Bounce> bounce;
  bool posted = false;  // handed to the transport (a receive from any source: once found)
  bool seen = false;    // its completion was looked at
  TransferRequest request;

  // "send #3 to rank 1 (tag 0, count 8, float32)", "recv from any rank (tag 2, ...)"
  std::string name() const {
    const bool send = call->collective == Collective::kSend;
    const std::string who = peer >= 0
                                ? strprintf("#%u %s rank %d", number, send ? "to" : "from", peer)
                                : std::string("from any rank");
    return strprintf("%s %s (tag %d, count %zu, %s)", send ? "send" : "recv", who.c_str(),
                     call->tag, call->count, datatype_name(call->dtype));
  }
};

PointToPointBatch::PointToPointBatch(ddl_comm *comm, std::vector<CollectiveCall> calls)
    : comm_(comm), calls_(std::move(calls)), transfers_(calls_.size()) {
  const char *what = collective_name(calls_[0].collective);
  if (!comm->failure.ok()) {
    over_ = true;
    status_ = Status(comm->failure.code(),
                     strprintf("rank %d: %s: the communicator failed earlier and must be "
                               "destroyed: ",
                               comm->rank, what) +
                         comm->failure.message());
    return;
  }
  if (comm->aborted.load()) {
    over_ = true;
    status_ =
        invalid_usage("rank %d: %s: the communicator was aborted; destroy it", comm->rank, what);
    return;
  }
  for (size_t i = 0; i < calls_.size(); ++i) {
    Transfer &t = transfers_[i];
    t.call = &calls_[i];
    t.bytes = call_bytes(calls_[i]);
    t.peer = calls_[i].peer;
    if (comm->device_buffers && !prepare_bounce(t)) return;
    if (t.call->collective == Collective::kRecv) t.ticket = comm->receives_posted++;
    if (t.peer == DDL_ANY_SOURCE) comm->any_source_open[t.call->tag].insert(t.ticket);
    if (t.peer == DDL_ANY_SOURCE || waits(t)) {
      ++unposted_;
      continue;
    }
    if (!post(t)) return;
  }
}

// A transfer of device memory goes through a bounce buffer in host memory, a send's filled
// now. False when that copy failed (the batch has failed).
bool PointToPointBatch::prepare_bounce(Transfer &t) {
  const bool send = t.call->collective == Collective::kSend;
  device::Bounce::of(send ? t.call->sendbuf : t.call->recvbuf, t.bytes, &t.bounce);
  if (!t.bounce || !send) return true;
  Status s = t.bounce->copy_from_device(comm_, t.call->sendbuf);
  if (s.ok()) return true;
  fail(s.prefix(strprintf("rank %d: ", comm_->rank) + t.name() + ": "), true);
  return false;
}

// Whether a receive must wait for a receive from any source with its tag posted before it.
bool PointToPointBatch::waits(const Transfer &t) const {
  if (t.call->collective != Collective::kRecv) return false;
  const auto open = comm_->any_source_open.find(t.call->tag);
  return open != comm_->any_source_open.end() && !open->second.empty() &&
         *open->second.begin() < t.ticket;
}

// Numbers the transfer within its pair and tag and hands it to the transport.
bool PointToPointBatch::post(Transfer &t) {
  const CollectiveCall &call = *t.call;
  const bool send = call.collective == Collective::kSend;
  t.number = (send ? comm_->pairs_sent : comm_->pairs_received)[{t.peer, call.tag}]++;
  const uint32_t seq = t.number & kNumberMask;
  Transport *transport = comm_->routes.get();
  Status s =
      send ? transport->post_send(t.peer, seq, transport_tag(call),
                                  t.bounce ? t.bounce->host() : call.sendbuf, t.bytes, &t.request)
           : transport->post_recv(t.peer, seq, transport_tag(call),
                                  t.bounce ? t.bounce->host() : call.recvbuf, t.bytes, &t.request);
  if (!s.ok()) {
    fail(s.prefix(strprintf("rank %d: ", comm_->rank) + t.name() + ": "), true);
    return false;
  }
  t.posted = true;
  return true;
}

// The receives that could not be posted at once, in order: those behind a receive from any
// source with their tag (until it is matched), and those from any source. A receive from any
// source takes the first rank whose next message with its tag (the one no receive posted so
// far has taken) has arrived, ranks looked at from the one after the last found so that no
// sender is always passed over.
bool PointToPointBatch::post_waiting() {
  const int n = comm_->nranks;
  for (Transfer &t : transfers_) {
    if (t.posted || waits(t)) continue;
    if (t.peer == DDL_ANY_SOURCE) {
      for (int i = 1; i <= n && t.peer == DDL_ANY_SOURCE; ++i) {
        const int peer = (comm_->last_any_source + i) % n;
        const uint32_t next = comm_->pairs_received[{peer, t.call->tag}];
        if (peer != comm_->rank &&
            comm_->routes->probe(peer, next & kNumberMask, transport_tag(*t.call)))
          t.peer = peer;
      }
      if (t.peer == DDL_ANY_SOURCE) continue;  // nothing has arrived yet
      comm_->last_any_source = t.peer;
      comm_->any_source_open[t.call->tag].erase(t.ticket);
    }
    if (!post(t)) return false;
    --unposted_;
  }
  return true;
}

PointToPointBatch::~PointToPointBatch() {
  if (!over_) fail(internal_error("a point-to-point batch was dropped unfinished"), false);
}

void PointToPointBatch::fail(Status s, bool news) {
  for (Transfer &t : transfers_) {
    if (t.posted && !t.request.done) comm_->routes->cancel(&t.request);
    if (t.peer == DDL_ANY_SOURCE) comm_->any_source_open[t.call->tag].erase(t.ticket);
  }
  if (news) send_failure_notice(comm_, s);
  comm_->failure = s;  // messages may still be in flight: no safe reuse
  status_ = std::move(s);
  over_ = true;
}

bool PointToPointBatch::poll() {
  if (over_) return true;
  if (comm_->routes->progress()) idle_ = 0;
  if (unposted_ > 0 && !post_waiting()) return true;
  for (Transfer &t : transfers_) {
    if (t.seen || !t.posted || !t.request.done) continue;
    t.seen = true;
    ++done_;
    // Built only on failure: the success path stays free of string formatting.
    auto where = [&] { return strprintf("rank %d: ", comm_->rank) + t.name(); };
    const bool recv = t.call->collective == Collective::kRecv;
    if (recv && t.request.status.code() == DDL_ERR_INVALID_USAGE) {  // longer than the receive
      fail(invalid_usage("%s: rank %d sent more than the %zu B this receive expects (a send and "
                         "its receive must have the same count and datatype)",
                         where().c_str(), t.peer, t.bytes),
           true);
      return true;
    }
    if (!t.request.status.ok()) {
      const ddl_result_t code =
          t.request.status.code() == DDL_ERR_SYSTEM ? DDL_ERR_REMOTE : t.request.status.code();
      fail(Status(code, where() + ": " + t.request.status.message()), true);
      return true;
    }
    if (!recv) continue;
    if (t.request.received != t.bytes) {
      fail(invalid_usage("%s: rank %d sent %zu B but this receive expects %zu B (a send and its "
                         "receive must have the same count and datatype)",
                         where().c_str(), t.peer, t.request.received, t.bytes),
           true);
      return true;
    }
    if (t.bounce) {
      Status s = t.bounce->copy_to_device(comm_, t.call->recvbuf);
      if (!s.ok()) {
        fail(s.prefix(where() + ": "), false);
        return true;
      }
    }
    if (t.call->source) *t.call->source = t.peer;
  }
  if (done_ == transfers_.size()) {
    over_ = true;
    return true;
  }
  if (++idle_ % kCheckEvery == 0) {
    Status s = check_waiting();
    if (!s.ok()) return true;
  }
  return false;
}

// What a long wait tells: a notice, an abort, a dead peer, the deadline.
Status PointToPointBatch::check_waiting() {
  comm_->routes->progress_all();
  ExecArgs exec;
  exec.notice = &comm_->notice_recv;
  exec.notice_message = &comm_->notice_in;
  const std::string rank = strprintf("rank %d: ", comm_->rank);
  if (comm_->notice_recv.done) {
    fail(notice_error(exec).prefix(rank), false);
    return status_;
  }
  if (comm_->aborted.load(std::memory_order_relaxed)) {
    fail(invalid_usage("%ssend/recv: aborted by ddl_comm_abort while waiting", rank.c_str()),
         false);
    return status_;
  }
  std::string pending;
  for (const Transfer &t : transfers_) {
    if (t.posted && t.request.done) continue;
    // A receive from any source waits for no rank in particular: only the deadline ends it.
    Status alive = t.peer >= 0 ? comm_->routes->peer_status(t.peer) : Status::Ok();
    if (!alive.ok()) {
      fail(alive.prefix(rank + t.name() + ": "), true);
      return status_;
    }
    pending += (pending.empty() ? "" : "; ") + t.name();
  }
  // The deadline counts from the first look: a batch that completes at once reads no clock.
  const auto now = std::chrono::steady_clock::now();
  if (deadline_ == std::chrono::steady_clock::time_point())
    deadline_ = now + std::chrono::milliseconds(comm_->config.timeout_ms);
  if (now < deadline_) return Status::Ok();
  fail(timeout_error("%stimed out after %d ms waiting for %s (did the peer post the matching "
                     "call? two ranks that both send first can wait for each other: group the "
                     "exchange with ddl_group_start/end, or use ddl_isend/ddl_irecv)",
                     rank.c_str(), comm_->config.timeout_ms, pending.c_str()),
       false);
  return status_;
}

Status PointToPointBatch::wait() {
  ExecArgs pacing;
  pacing.spins_before_yield = on_progress_thread()
                                  ? std::min(comm_->spins_before_yield, kProgressThreadSpins)
                                  : comm_->spins_before_yield;
  pacing.yields_before_sleep = comm_->yields_before_sleep;
  while (!poll()) idle_pause(idle_, pacing);
  return status_;
}

Status run_point_to_point(ddl_comm *comm, std::vector<CollectiveCall> calls) {
  PointToPointBatch batch(comm, std::move(calls));
  return batch.wait();
}

}  // namespace ddl

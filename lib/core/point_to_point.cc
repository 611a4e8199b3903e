#include "lib/core/point_to_point.h"

#include "lib/common/datatype.h"
#include "lib/core/progress.h"

namespace ddl {

static_assert(kPointToPointTagBase == kFirstUnstampedTag,
              "point-to-point messages are the ones transports leave unstamped");
static_assert(kPointToPointTagBase + kPointToPointTagSpan <= kNoticeTag,
              "point-to-point tags stay below the reserved ones");

namespace {

// How often (in idle polls) the deadline, notices, abort and the peers' life are looked at.
constexpr int kCheckEvery = 256;

}  // namespace

struct PointToPointBatch::Transfer {
  const CollectiveCall *call = nullptr;
  uint32_t number = 0;  // the k-th of this direction and pair (what its tag says)
  size_t bytes = 0;
  bool seen = false;  // its completion was looked at
  TransferRequest request;

  // "send #3 to rank 1 (count 8, float32)"
  std::string name() const {
    const bool send = call->collective == Collective::kSend;
    return strprintf("%s #%u %s rank %d (count %zu, %s)", send ? "send" : "recv", number,
                     send ? "to" : "from", call->peer, call->count, datatype_name(call->dtype));
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
  if (comm->pairs_sent.size() != static_cast<size_t>(comm->nranks)) {
    comm->pairs_sent.assign(comm->nranks, 0);
    comm->pairs_received.assign(comm->nranks, 0);
  }
  Transport *transport = comm->routes.get();
  for (size_t i = 0; i < calls_.size(); ++i) {
    Transfer &t = transfers_[i];
    const CollectiveCall &call = calls_[i];
    const bool send = call.collective == Collective::kSend;
    t.call = &call;
    t.number = (send ? comm->pairs_sent : comm->pairs_received)[call.peer]++;
    t.bytes = call_bytes(call);
    const uint32_t tag = kPointToPointTagBase + t.number % kPointToPointTagSpan;
    Status s = send ? transport->post_send(call.peer, 0, tag, call.sendbuf, t.bytes, &t.request)
                    : transport->post_recv(call.peer, 0, tag, call.recvbuf, t.bytes, &t.request);
    if (!s.ok()) {
      fail(s.prefix(strprintf("rank %d: ", comm->rank) + t.name() + ": "), true);
      return;
    }
    ++posted_;
  }
}

PointToPointBatch::~PointToPointBatch() {
  if (!over_) fail(internal_error("a point-to-point batch was dropped unfinished"), false);
}

void PointToPointBatch::fail(Status s, bool news) {
  for (size_t i = 0; i < posted_; ++i)
    if (!transfers_[i].request.done) comm_->routes->cancel(&transfers_[i].request);
  if (news) send_failure_notice(comm_, s);
  comm_->failure = s;  // messages may still be in flight: no safe reuse
  status_ = std::move(s);
  over_ = true;
}

bool PointToPointBatch::poll() {
  if (over_) return true;
  if (comm_->routes->progress()) idle_ = 0;
  for (size_t i = 0; i < posted_; ++i) {
    Transfer &t = transfers_[i];
    if (t.seen || !t.request.done) continue;
    t.seen = true;
    ++done_;
    // Built only on failure: the success path stays free of string formatting.
    auto where = [&] { return strprintf("rank %d: ", comm_->rank) + t.name(); };
    if (!t.request.status.ok()) {
      const ddl_result_t code =
          t.request.status.code() == DDL_ERR_SYSTEM ? DDL_ERR_REMOTE : t.request.status.code();
      fail(Status(code, where() + ": " + t.request.status.message()), true);
      return true;
    }
    if (t.call->collective == Collective::kRecv && t.request.received != t.bytes) {
      fail(invalid_usage("%s: rank %d sent %zu B but this receive expects %zu B (a send and its "
                         "receive must have the same count and datatype)",
                         where().c_str(), t.call->peer, t.request.received, t.bytes),
           true);
      return true;
    }
  }
  if (done_ == posted_) {
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
  for (size_t i = 0; i < posted_; ++i) {
    const Transfer &t = transfers_[i];
    if (t.request.done) continue;
    Status alive = comm_->routes->peer_status(t.call->peer);
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

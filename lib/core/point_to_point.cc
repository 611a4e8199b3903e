#include "lib/core/point_to_point.h"

#include <chrono>

#include "lib/common/datatype.h"
#include "lib/common/process_liveness.h"
#include "lib/core/progress.h"

namespace ddl {
namespace {

static_assert(kPointToPointTagBase == kFirstUnstampedTag,
              "point-to-point messages are the ones transports leave unstamped");
static_assert(kPointToPointTagBase + kPointToPointTagSpan <= kNoticeTag,
              "point-to-point tags stay below the reserved ones");

// How often (in idle polls) the deadline, notices, abort and the peers' life are looked at.
constexpr int kCheckEvery = 256;

struct Transfer {
  const CollectiveCall *call;
  uint32_t number;  // the k-th of this direction and pair (what its tag says)
  size_t bytes;
  TransferRequest request;
};

// "send #3 to rank 1 (count 8, float32)"
std::string transfer_name(const Transfer &t) {
  const bool send = t.call->collective == Collective::kSend;
  return strprintf("%s #%u %s rank %d (count %zu, %s)", send ? "send" : "recv", t.number,
                   send ? "to" : "from", t.call->peer, t.call->count, datatype_name(t.call->dtype));
}

// "rank 0: send #3 to rank 1 (count 8, float32)"
std::string describe(const ddl_comm *comm, const Transfer &t) {
  return strprintf("rank %d: ", comm->rank) + transfer_name(t);
}

// The error of a finished transfer, else OK. *news: the job is broken and every rank should
// hear of it (a dead peer, a size that disagrees).
Status finished(const ddl_comm *comm, const Transfer &t, bool *news) {
  const TransferRequest &req = t.request;
  if (!req.status.ok()) {
    *news = true;
    const ddl_result_t code =
        req.status.code() == DDL_ERR_SYSTEM ? DDL_ERR_REMOTE : req.status.code();
    return Status(code, describe(comm, t) + ": " + req.status.message());
  }
  if (t.call->collective == Collective::kRecv && req.received != t.bytes) {
    *news = true;
    return invalid_usage(
        "%s: rank %d sent %zu B but this receive expects %zu B (a send and its receive must "
        "have the same count and datatype)",
        describe(comm, t).c_str(), t.call->peer, req.received, t.bytes);
  }
  return Status::Ok();
}

// What a long wait tells: a notice, an abort, a dead peer, the deadline.
Status check_waiting(ddl_comm *comm, const ExecArgs &exec, const std::vector<Transfer> &transfers,
                     bool *news) {
  comm->routes->progress_all();
  if (exec.notice && exec.notice->done) return notice_error(exec);
  if (comm->aborted.load(std::memory_order_relaxed))
    return invalid_usage("rank %d: send/recv: aborted by ddl_comm_abort while waiting", comm->rank);
  for (const Transfer &t : transfers) {
    if (t.request.done) continue;
    Status alive = comm->routes->peer_status(t.call->peer);
    if (!alive.ok()) {
      *news = true;
      return alive.prefix(describe(comm, t) + ": ");
    }
  }
  if (std::chrono::steady_clock::now() < exec.deadline) return Status::Ok();
  std::string pending;
  for (const Transfer &t : transfers)
    if (!t.request.done) pending += (pending.empty() ? "" : "; ") + transfer_name(t);
  return timeout_error(
      "rank %d: timed out after %d ms waiting for %s (did the peer post the matching call? two "
      "ranks that both send first can wait for each other: group the exchange with "
      "ddl_group_start/end)",
      comm->rank, comm->config.timeout_ms, pending.c_str());
}

Status run_batch(ddl_comm *comm, std::vector<Transfer> &transfers, bool *news) {
  Transport *transport = comm->routes.get();
  if (comm->pairs_sent.size() != static_cast<size_t>(comm->nranks)) {
    comm->pairs_sent.assign(comm->nranks, 0);
    comm->pairs_received.assign(comm->nranks, 0);
  }
  size_t posted = 0;
  Status s;
  for (Transfer &t : transfers) {
    const CollectiveCall &call = *t.call;
    const bool send = call.collective == Collective::kSend;
    t.number = (send ? comm->pairs_sent : comm->pairs_received)[call.peer]++;
    t.bytes = call_bytes(call);
    const uint32_t tag = kPointToPointTagBase + t.number % kPointToPointTagSpan;
    s = send ? transport->post_send(call.peer, 0, tag, call.sendbuf, t.bytes, &t.request)
             : transport->post_recv(call.peer, 0, tag, call.recvbuf, t.bytes, &t.request);
    if (!s.ok()) {
      *news = true;
      s.prefix(describe(comm, t) + ": ");
      break;
    }
    ++posted;
  }
  ExecArgs exec;
  exec.rank = comm->rank;
  exec.nranks = comm->nranks;
  exec.notice = &comm->notice_recv;
  exec.notice_message = &comm->notice_in;
  exec.deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(comm->config.timeout_ms);
  exec.spins_before_yield = on_progress_thread()
                                ? std::min(comm->spins_before_yield, kProgressThreadSpins)
                                : comm->spins_before_yield;
  exec.yields_before_sleep = comm->yields_before_sleep;
  size_t done = 0;
  std::vector<bool> seen(transfers.size(), false);
  for (int idle = 1; s.ok() && done < posted; ++idle) {
    const bool moved = transport->progress();
    for (size_t i = 0; i < posted && s.ok(); ++i) {
      if (seen[i] || !transfers[i].request.done) continue;
      seen[i] = true;
      ++done;
      s = finished(comm, transfers[i], news);
    }
    if (moved) idle = 0;
    if (s.ok() && done < posted && idle % kCheckEvery == 0)
      s = check_waiting(comm, exec, transfers, news);
    if (s.ok() && done < posted) idle_pause(idle, exec);
  }
  if (!s.ok())
    for (size_t i = 0; i < posted; ++i)
      if (!transfers[i].request.done) transport->cancel(&transfers[i].request);
  return s;
}

}  // namespace

Status run_point_to_point(ddl_comm *comm, const std::vector<CollectiveCall> &calls) {
  if (!comm->failure.ok())
    return Status(comm->failure.code(),
                  strprintf("rank %d: %s: the communicator failed earlier and must be destroyed: ",
                            comm->rank, collective_name(calls[0].collective)) +
                      comm->failure.message());
  if (comm->aborted.load())
    return invalid_usage("rank %d: %s: the communicator was aborted; destroy it", comm->rank,
                         collective_name(calls[0].collective));
  std::vector<Transfer> transfers(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) transfers[i].call = &calls[i];
  bool news = false;
  Status s = run_batch(comm, transfers, &news);
  if (!s.ok()) {
    if (news) send_failure_notice(comm, s);
    comm->failure = s;  // messages may still be in flight: no safe reuse
  }
  return s;
}

}  // namespace ddl

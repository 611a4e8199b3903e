#include "lib/core/agreement.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "lib/algorithms/schedule.h"
#include "lib/bootstrap/token.h"
#include "lib/common/log.h"
#include "lib/common/process_liveness.h"
#include "lib/core/comm.h"

namespace ddl {
namespace {

// Above the point-to-point messages' tags and below the two reserved last ones (tags.h):
// unstamped, so that no collective's stamp check ever looks at them.
constexpr uint32_t kValueTag = kPointToPointTagBase + kPointToPointTagSpan;
constexpr uint32_t kDecisionTag = kValueTag + 1;
static_assert(kDecisionTag < kNoticeTag, "agreement tags below the reserved ones");
constexpr uint32_t kMagic = 0x64646c41;  // "ddlA"
constexpr size_t kMaxRendezvousBytes = 1024;
// How often a peer's process state is read from /proc while waiting for it.
constexpr int64_t kStateCheckMs = 10;

struct ValueMessage {
  uint32_t magic = kMagic;
  uint32_t epoch = 0;
  uint64_t value = 0;
};

// A decision on the wire: this header, the failed ranks as a bitmap of nranks bits, then the
// rendezvous text.
struct DecisionHeader {
  uint32_t magic = kMagic;
  uint32_t epoch = 0;
  int32_t proposer = -1;
  int32_t nranks = 0;
  uint64_t value = 0;
  uint32_t rendezvous_bytes = 0;
  uint32_t reserved = 0;
};

size_t bitmap_bytes(int nranks) {
  return (static_cast<size_t>(nranks) + 7) / 8;
}
size_t max_decision_bytes(int nranks) {
  return sizeof(DecisionHeader) + bitmap_bytes(nranks) + kMaxRendezvousBytes;
}

std::string encode(const Decision &d, uint32_t epoch, int nranks) {
  DecisionHeader h;
  h.epoch = epoch;
  h.proposer = d.proposer;
  h.nranks = nranks;
  h.value = d.value;
  h.rendezvous_bytes = static_cast<uint32_t>(d.rendezvous.size());
  std::string bytes(reinterpret_cast<const char *>(&h), sizeof h);
  std::string bitmap(bitmap_bytes(nranks), '\0');
  for (int r : d.failed) bitmap[static_cast<size_t>(r) / 8] |= static_cast<char>(1 << (r % 8));
  return bytes + bitmap + d.rendezvous;
}

// False for anything that is not a decision of this agreement (it comes from the network).
bool decode(const std::string &bytes, size_t received, uint32_t epoch, int nranks, Decision *d) {
  DecisionHeader h;
  if (received < sizeof h + bitmap_bytes(nranks) || received > bytes.size()) return false;
  std::memcpy(&h, bytes.data(), sizeof h);
  const size_t text_at = sizeof h + bitmap_bytes(nranks);
  if (h.magic != kMagic || h.epoch != epoch || h.nranks != nranks || h.proposer < 0 ||
      h.proposer >= nranks || h.rendezvous_bytes > kMaxRendezvousBytes ||
      text_at + h.rendezvous_bytes != received)
    return false;
  *d = Decision();
  d->proposer = h.proposer;
  d->value = h.value;
  for (int r = 0; r < nranks; ++r)
    if (bytes[text_at - bitmap_bytes(nranks) + static_cast<size_t>(r) / 8] & (1 << (r % 8)))
      d->failed.push_back(r);
  d->rendezvous = bytes.substr(text_at, h.rendezvous_bytes);
  // The proposer never declares itself failed: it is the new communicator's rank 0.
  return !d->excludes(d->proposer);
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

AgreementState &state_of(ddl_comm *comm) {
  if (!comm->agreement) {
    comm->agreement.reset(new AgreementState());
    comm->agreement->stopped_since_ms.assign(comm->nranks, -1);
    comm->agreement->state_checked_ms.assign(comm->nranks, 0);
  }
  return *comm->agreement;
}

bool on_this_host(const ddl_comm *comm, int peer) {
  return std::find(comm->host_ranks.begin(), comm->host_ranks.end(), peer) !=
         comm->host_ranks.end();
}

// Drives the transport until a condition holds or the communicator's deadline passes,
// handing the core over between polls: ranks may outnumber cores, and the one waited for
// may be queued behind this one.
class Waiter {
 public:
  explicit Waiter(ddl_comm *comm) : comm_(comm), start_ms_(now_ms()) {}
  template <class Done>
  bool until(Done done) {
    for (int polls = 0;; ++polls) {
      comm_->transport->progress();
      if (done()) return true;
      if (now_ms() - start_ms_ >= comm_->config.timeout_ms) return false;
      if (polls < 100)
        sched_yield();
      else
        usleep(polls < 20000 ? 50 : 1000);
    }
  }
  Status timeout(uint32_t epoch, const char *what, int peer) const {
    return timeout_error(
        "agreement #%u: timed out after %lld ms waiting for %s of rank %d, which this rank does "
        "not find failed: every live rank must make the same calls (ddl_comm_agree, "
        "ddl_comm_shrink) in the same order",
        epoch, static_cast<long long>(now_ms() - start_ms_), what, peer);
  }

 private:
  ddl_comm *comm_;
  int64_t start_ms_;
};

}  // namespace

bool Decision::excludes(int rank) const {
  return std::binary_search(failed.begin(), failed.end(), rank);
}

void AgreementState::cancel_all(Transport *transport) {
  for (Message &m : in_flight)
    if (!m.request.done) transport->cancel(&m.request);
  in_flight.clear();
}

Status peer_failure(ddl_comm *comm, int peer) {
  Status s = comm->transport->peer_status(peer);
  if (!s.ok()) return s;
  const pid_t pid = comm->pids[peer];
  if (pid <= 0 || !on_this_host(comm, peer)) return Status::Ok();
  // A process stopped on this host is as silent as a frozen one elsewhere, whose heartbeats
  // stop: the same limit makes it failed.
  AgreementState &st = state_of(comm);
  const int64_t now = now_ms();
  if (now - st.state_checked_ms[peer] >= kStateCheckMs) {
    st.state_checked_ms[peer] = now;
    if (!process_is_stopped(pid))
      st.stopped_since_ms[peer] = -1;
    else if (st.stopped_since_ms[peer] < 0)
      st.stopped_since_ms[peer] = now;
  }
  const int limit = peer_timeout_ms();
  if (st.stopped_since_ms[peer] >= 0 && limit > 0 && now - st.stopped_since_ms[peer] >= limit)
    return remote_error("rank %d (pid %d on this host) has been stopped (SIGSTOP) for %.1f s", peer,
                        static_cast<int>(pid),
                        static_cast<double>(now - st.stopped_since_ms[peer]) / 1000.0);
  return Status::Ok();
}

Status agree(ddl_comm *comm, const AgreeRequest &request, Decision *decision, int *listen_fd) {
  *listen_fd = -1;
  *decision = Decision();
  AgreementState &st = state_of(comm);
  st.in_flight.remove_if([](const AgreementState::Message &m) { return m.request.done; });
  const uint32_t epoch = ++st.epoch;
  // The transport's sequence numbers wrap there.
  const uint32_t seq = epoch & ((1u << kTransportSeqBits) - 1);
  const int n = comm->nranks, me = comm->rank;
  Transport *transport = comm->transport.get();
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int r : request.exclude) excluded[r] = true;
  auto failed = [&](int r) { return excluded[r] || !peer_failure(comm, r).ok(); };
  Waiter wait(comm);

  // A send to a failed peer is refused at once; the waits find it failed as well.
  auto send = [&](int peer, uint32_t tag, std::string bytes) {
    st.in_flight.push_back({std::move(bytes), TransferRequest()});
    AgreementState::Message &m = st.in_flight.back();
    if (!transport->post_send(peer, seq, tag, &m.bytes[0], m.bytes.size(), &m.request).ok())
      st.in_flight.pop_back();
  };
  // One receive from every other rank; nullptr where it could not be posted (a failed peer).
  auto receive_all = [&](uint32_t tag, size_t bytes) {
    std::vector<AgreementState::Message *> in(static_cast<size_t>(n), nullptr);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      st.in_flight.push_back({std::string(bytes, '\0'), TransferRequest()});
      AgreementState::Message &m = st.in_flight.back();
      if (transport->post_recv(r, seq, tag, &m.bytes[0], bytes, &m.request).ok())
        in[r] = &m;
      else
        st.in_flight.pop_back();
    }
    return in;
  };
  auto arrived = [](const AgreementState::Message *m) {
    return m && m->request.done && m->request.status.ok();
  };
  auto settled = [&](const AgreementState::Message *m, int r) {
    return !m || m->request.done || failed(r);
  };

  // The values, first, when they are to be combined: each rank combines those it gets from
  // every rank it does not find failed.
  uint64_t value = request.value;
  if (request.exchange_values) {
    ValueMessage mine;
    mine.epoch = epoch;
    mine.value = request.value;
    const std::string bytes(reinterpret_cast<const char *>(&mine), sizeof mine);
    for (int r = 0; r < n; ++r)
      if (r != me && !failed(r)) send(r, kValueTag, bytes);
    std::vector<AgreementState::Message *> in = receive_all(kValueTag, sizeof(ValueMessage));
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      if (!wait.until([&] { return settled(in[r], r); }))
        return wait.timeout(epoch, "the value", r);
      ValueMessage theirs;
      if (!arrived(in[r]) || in[r]->request.received != sizeof theirs || excluded[r]) continue;
      std::memcpy(&theirs, in[r]->bytes.data(), sizeof theirs);
      if (theirs.magic != kMagic || theirs.epoch != epoch) continue;
      value = request.op == AgreeOp::kAnd ? value & theirs.value : value | theirs.value;
    }
  }

  // The decision: adopted from the highest lower rank that spoke, else this rank's own. So
  // the lower ranks are looked at from the nearest down, and the first that spoke decides:
  // without failures, only rank me-1 is waited for (whose decision is rank 0's).
  std::vector<AgreementState::Message *> in = receive_all(kDecisionTag, max_decision_bytes(n));
  bool adopted = false;
  for (int i = me - 1; i >= 0 && !adopted; --i) {
    if (!wait.until([&] { return settled(in[i], i); }))
      return wait.timeout(epoch, "the decision", i);
    Decision theirs;
    if (arrived(in[i]) && decode(in[i]->bytes, in[i]->request.received, epoch, n, &theirs)) {
      *decision = std::move(theirs);
      adopted = true;
    }
  }
  if (!adopted) {
    decision->proposer = me;
    decision->value = value;
    // Every lower rank failed (none spoke), and those this rank finds failed above it.
    for (int r = 0; r < n; ++r)
      if (r < me || (r > me && failed(r))) decision->failed.push_back(r);
    if (request.open_rendezvous && static_cast<int>(decision->failed.size()) < n - 1) {
      std::string served, token;
      Status s = random_token(&token);
      if (s.ok()) s = comm->bootstrap->open_group_listener(listen_fd, &served);
      if (!s.ok()) return s.prefix("opening the new communicator's rendezvous: ");
      decision->rendezvous = served + " " + token;
    }
    DDL_INFO("agreement #%u: rank %d decides: %zu rank%s failed", epoch, me,
             decision->failed.size(), decision->failed.size() == 1 ? "" : "s");
  }
  // Passed on to every rank that can still hear it: the higher ones adopt it; a lower one
  // (stopped, or late, while the others went on) learns from it that it was left out. The
  // next rank first, then upwards: rank me+1 waits for this message alone, and posting the
  // sends from rank 0 would put me sends before it, so that the chain's k-th hop took k
  // sends' time (n^2/2 in all: ~4 s among 4,096 ranks at 0.5 us a send, against ~10 ms).
  const std::string bytes = encode(*decision, epoch, n);
  for (int k = 1; k < n; ++k) {
    const int r = (me + k) % n;
    if (transport->peer_status(r).ok()) send(r, kDecisionTag, bytes);
  }
  transport->progress();
  int left_out_by = decision->excludes(me) ? decision->proposer : -1;
  for (int j = me + 1; j < n && left_out_by < 0; ++j) {
    Decision theirs;
    if (arrived(in[j]) && decode(in[j]->bytes, in[j]->request.received, epoch, n, &theirs) &&
        theirs.excludes(me))
      left_out_by = j;
  }
  // The receives still open stay posted (with their buffers, in in_flight) until the
  // communicator goes: what the other ranks send later lands there, not in UCX's queue of
  // unexpected messages.
  if (left_out_by >= 0) {
    if (*listen_fd >= 0) ::close(*listen_fd);
    *listen_fd = -1;
    return remote_error(
        "agreement #%u: the other ranks declared rank %d failed (rank %d's decision) and went "
        "on without it: it was stopped, cut off or too late; destroy this communicator",
        epoch, me, left_out_by);
  }
  return Status::Ok();
}

}  // namespace ddl

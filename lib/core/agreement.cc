#include "lib/core/agreement.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <utility>

#include "lib/bootstrap/token.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/common/process_liveness.h"
#include "lib/common/tags.h"
#include "lib/core/comm.h"

namespace ddl {
namespace {

// Standing receives of agreement messages from any rank, over the network transport (the one
// that offers them): a rank gets one from its parent and one from each child (about log2 n)
// in a short time; more wait among UCX's unexpected messages. And one from each rank on this
// host over the communicator's routes (shared memory; see path()).
constexpr int kMailboxSlots = 8;
// Every agreement message goes with this sequence number: a standing receive from one rank
// takes its messages in order, whichever agreement they belong to (the epoch is inside).
constexpr uint32_t kAgreementSeq = 0;
// How often a peer's process state is read from /proc while waiting for it.
constexpr int64_t kStateCheckMs = 10;

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

// DDL_AGREEMENT_FAULT=RANK:POINT (agreement.h): this process dies at that point of the
// communicator's first agreement.
void fault_point(const ddl_comm *comm, uint32_t epoch, const char *point) {
  static const std::string spec = env_string("DDL_AGREEMENT_FAULT");
  if (spec.empty() || epoch != 1) return;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || std::atoi(spec.c_str()) != comm->rank ||
      spec.compare(colon + 1, std::string::npos, point) != 0)
    return;
  DDL_WARN("DDL_AGREEMENT_FAULT: rank %d dies at '%s'", comm->rank, point);
  raise(SIGKILL);
}

// The routes (shared memory, then the network), which also poll and cancel what was posted
// on the network transport itself.
Transport *every_path(ddl_comm *comm) {
  return comm->routes ? static_cast<Transport *>(comm->routes.get()) : comm->transport.get();
}

// What this rank's agreement messages take. While no call on comm has failed here, the
// routes: shared memory to ranks on this host. Ranks that agree over UCX's tcp transport on
// one host meet a bug of UCX 1.13 when one of them dies meanwhile: a survivor with a message
// still going to it gets two events of its socket at once, the second after the first closed
// the endpoint, and aborts ("Assertion `ep->conn_state != UCT_TCP_EP_CONN_STATE_CLOSED'" in
// uct_tcp_iface_handle_events; 3 of 84 of tests/multiproc/test_agreement's kills, every rank
// on one host; bench/recovery.md). After a failed call, the network transport: a collective cut
// short may leave part of a message in a shared-memory channel, which would swallow what follows.
Transport *path(ddl_comm *comm) {
  return comm->failure.ok() ? every_path(comm) : comm->transport.get();
}

// Sends one message (fire and forget: a send to a failed peer is refused at once, and the
// receiver's waits find it failed as well). Over UCX, not to a rank on this host whose
// process is gone, which the transport finds only at its next look at the pids (see path()).
void send(ddl_comm *comm, int peer, const AgreementMessage &message) {
  Transport *transport = path(comm);
  // Read from /proc (microseconds): only where it matters, on the network transport.
  if (transport == comm->transport.get() && on_this_host(comm, peer) && comm->pids[peer] > 0 &&
      !process_is_alive(comm->pids[peer]))
    return;
  AgreementState &st = state_of(comm);
  ++st.sent;
  st.in_flight.push_back({encode(message, comm->nranks), TransferRequest()});
  AgreementState::Message &m = st.in_flight.back();
  if (!transport
           ->post_send(peer, kAgreementSeq, kAgreementTag, &m.bytes[0], m.bytes.size(), &m.request)
           .ok())
    st.in_flight.pop_back();
}

AgreementMessage message_of(AgreementKind kind, uint32_t epoch, int from, int ballot) {
  AgreementMessage m;
  m.kind = kind;
  m.epoch = epoch;
  m.from = from;
  m.ballot = ballot;
  return m;
}

AgreementMessage down_message(uint32_t epoch, int from, int ballot, const Decision &decision) {
  AgreementMessage m = message_of(AgreementKind::kDown, epoch, from, ballot);
  m.has_decision = true;
  m.decision = decision;
  return m;
}

// The children of this rank in the tree it sees now.
std::vector<int> children_of(const ddl_comm *comm, const std::function<bool(int)> &failed) {
  std::vector<int> children;
  AgreementTree(comm->nranks, failed).children(comm->rank, [&](int child) {
    children.push_back(child);
  });
  return children;
}

// Polls the standing receives and hands each message that arrived to `deliver`, or keeps it
// for a later agreement; reposts them. Made by the first agreement.
void pump(ddl_comm *comm, const std::function<void(const AgreementMessage &)> &deliver) {
  AgreementState &st = state_of(comm);
  const size_t room = max_agreement_message_bytes(comm->nranks);
  auto post = [&](AgreementState::Message &m) {
    return (m.from < 0
                ? comm->transport->post_recv_any(kAgreementTag, &m.bytes[0], room, &m.request)
                : every_path(comm)->post_recv(m.from, kAgreementSeq, kAgreementTag, &m.bytes[0],
                                              room, &m.request))
        .ok();
  };
  if (st.mailbox.empty()) {
    std::vector<int> sources(kMailboxSlots, -1);
    for (int r : comm->host_ranks)
      if (r != comm->rank) sources.push_back(r);
    for (int from : sources) {
      st.mailbox.push_back({std::string(room, '\0'), TransferRequest(), from});
      if (!post(st.mailbox.back())) st.mailbox.pop_back();
    }
  }
  for (auto it = st.mailbox.begin(); it != st.mailbox.end();) {
    if (!it->request.done) {
      ++it;
      continue;
    }
    AgreementMessage message;
    const bool ok = it->request.status.ok() &&
                    decode(it->bytes.data(), it->request.received, comm->nranks, &message);
    if (ok && message.epoch > st.epoch)
      st.later.push_back(it->bytes.substr(0, it->request.received));
    // A receive that failed (its rank died, the transport went) is not made again.
    if (!it->request.status.ok() || !post(*it))
      it = st.mailbox.erase(it);
    else
      ++it;
    if (ok && message.epoch <= st.epoch) deliver(message);
  }
}

// What a rank that decided answers about that agreement (agreement.h): the decision, to a
// rank that asks or sends its values up; a higher ballot of the same decision, passed on.
void answer(ddl_comm *comm, const AgreementMessage &m) {
  AgreementState &st = state_of(comm);
  if (m.epoch != st.decided_epoch || st.decided_ballot < 0) return;
  if (m.kind != AgreementKind::kDown) {
    send(comm, m.from, down_message(m.epoch, comm->rank, st.decided_ballot, st.decided));
    return;
  }
  if (m.ballot <= st.decided_ballot) return;
  if (!(m.decision == st.decided)) {
    DDL_WARN(
        "agreement #%u: rank %d's ballot carries another decision than this rank's (rank "
        "%d's): ignored",
        m.epoch, m.from, st.decided.proposer);
    return;
  }
  st.decided_ballot = m.ballot;
  const AgreementMessage down = down_message(m.epoch, comm->rank, m.ballot, st.decided);
  for (int child : children_of(comm, [&](int r) {
         if (r != comm->rank && !st.decided_view[r] && !peer_failure(comm, r).ok())
           st.decided_view[r] = 1;
         return r != comm->rank && st.decided_view[r] != 0;
       }))
    send(comm, child, down);
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
      every_path(comm_)->progress_all();
      if (done()) return true;
      if (now_ms() - start_ms_ >= comm_->config.timeout_ms) return false;
      if (polls < 100)
        sched_yield();
      else
        usleep(polls < 20000 ? 50 : 1000);
    }
  }
  int64_t elapsed_ms() const { return now_ms() - start_ms_; }

 private:
  ddl_comm *comm_;
  int64_t start_ms_;
};

// One agreement, as one rank runs it (agreement.h).
class Agreement {
 public:
  Agreement(ddl_comm *comm, const AgreeRequest &request, uint32_t epoch)
      : comm_(comm),
        request_(request),
        epoch_(epoch),
        n_(comm->nranks),
        me_(comm->rank),
        failed_(static_cast<size_t>(n_), 0),
        ups_(static_cast<size_t>(n_)),
        answered_(static_cast<size_t>(n_), false) {
    for (int r : request.exclude) failed_[r] = 1;
  }

  Status run(Decision *decision, int *listen_fd) {
    fault_point(comm_, epoch_, "start");
    AgreementState &st = state_of(comm_);
    const uint64_t sent_before = st.sent;
    std::vector<std::string> later;
    later.swap(st.later);
    for (const std::string &bytes : later) {
      AgreementMessage m;
      if (!decode(bytes.data(), bytes.size(), n_, &m)) continue;
      if (m.epoch == epoch_)
        handle(m);
      else if (m.epoch > epoch_)
        st.later.push_back(bytes);
    }
    Waiter wait(comm_);
    Status error;
    const bool over = wait.until([&] {
      pump(comm_, [&](const AgreementMessage &m) {
        if (m.epoch == epoch_ && !decided_)
          handle(m);
        else
          answer(comm_, m);
      });
      if (!decided_) error = step(listen_fd);
      return decided_ || !error.ok();
    });
    if (!error.ok()) return error;
    if (!over) return timed_out(wait.elapsed_ms());
    *decision = decision_;
    DDL_DEBUG("agreement #%u: rank %d decided at ballot %d, %llu message(s) sent", epoch_, me_,
              st.decided_ballot, static_cast<unsigned long long>(st.sent - sent_before));
    if (decision_.excludes(me_)) {
      if (*listen_fd >= 0) ::close(*listen_fd);
      *listen_fd = -1;
      return remote_error(
          "agreement #%u: the other ranks declared rank %d failed (rank %d's decision) and went "
          "on without it: it was stopped, cut off or too late; destroy this communicator",
          epoch_, me_, decision_.proposer);
    }
    fault_point(comm_, epoch_, "returned");
    return Status::Ok();
  }

 private:
  bool failed(int r) {
    if (r == me_) return false;
    if (!failed_[r] && !peer_failure(comm_, r).ok()) failed_[r] = 1;
    return failed_[r] != 0;
  }

  // Whether x's part of the tree is in for the ballot gathered now: its values, or word that
  // it took a decision (which stands for its subtree in any ballot).
  bool known(int x) const { return answered_[x] || ups_[x].ballot == ballot_; }

  void handle(const AgreementMessage &m) {
    // A sender gathering for (or deciding at) a higher ballot found every rank below it failed.
    for (int r = 0; r < std::min(m.ballot, me_); ++r) failed_[r] = 1;
    switch (m.kind) {
      case AgreementKind::kPull:
        pullers_.push_back({m.from, m.ballot});
        asked_by_.insert(m.from);
        break;
      case AgreementKind::kUp:
        asked_by_.insert(m.from);
        if (m.ballot >= ups_[m.from].ballot) ups_[m.from] = m;
        if (m.has_decision) hear_of(m.report_ballot, m.decision);
        break;
      case AgreementKind::kDown:
        if (m.ballot >= promise_ || only_sent_up_to(m.from, m.ballot)) {
          accept(m.ballot, m.decision);
        } else {
          // A decision of a ballot this rank promised to overrule: the sender took it, so
          // the root must propose it again (agreement.h).
          answered_[m.from] = true;
          hear_of(m.ballot, m.decision);
        }
        break;
    }
  }

  // Whether every up message this rank sent for a ballot above `ballot` went to `rank`. A
  // rank that decided at `ballot` passes no up message on (it answers them), so then none of
  // this rank's values reached a root of a higher ballot but through `rank`, whose answer to
  // that root will be its decision: taking it here breaks no promise. (Its parent may have
  // returned with a decision while this rank's view moved on to another root, which never
  // runs that ballot: it decided already.)
  bool only_sent_up_to(int rank, int ballot) const {
    return std::all_of(ups_sent_.begin(), ups_sent_.end(), [&](const std::pair<int, int> &up) {
      return up.second <= ballot || up.first == rank;
    });
  }

  void hear_of(int ballot, const Decision &d) {
    if (ballot <= report_ballot_) return;
    report_ballot_ = ballot;
    report_ = d;
  }

  // One look at the tree as this rank sees it now: send what can be sent, decide if root.
  Status step(int *listen_fd) {
    AgreementTree tree(n_, [&](int r) { return failed(r); });
    const int root = tree.root();
    if (initial_ballot_ < 0) initial_ballot_ = root;
    ballot_ = root;
    // A root takes no decision of a lower ballot from now on: it proposes it again (Paxos).
    if (root == me_) promise_ = std::max(promise_, me_);
    uint64_t value = request_.value;
    std::vector<bool> covered(static_cast<size_t>(n_), false);
    covered[me_] = true;
    pending_.clear();
    tree.children(
        me_,
        [&](int x) {
          if (!known(x)) {
            pending_.push_back(x);
            // A child gathering for another ballot, or any child once the root changed, is
            // asked for this ballot's values (one that decided answers with its decision).
            if ((ballot_ != initial_ballot_ || ups_[x].ballot >= 0) &&
                pulled_.insert({x, ballot_}).second) {
              send(comm_, x, message_of(AgreementKind::kPull, epoch_, me_, ballot_));
            }
            return;
          }
          if (answered_[x] || ups_[x].ballot != ballot_) return;
          const AgreementMessage &up = ups_[x];
          value = request_.op == AgreeOp::kAnd ? value & up.value : value | up.value;
          for (int r = 0; r < n_; ++r)
            if (up.covered[r]) covered[r] = true;
        },
        [&](int x) { return known(x); });
    if (!pending_.empty()) return Status::Ok();
    if (root == me_) return decide(value, covered, listen_fd);

    AgreementMessage up = message_of(AgreementKind::kUp, epoch_, me_, ballot_);
    up.value = value;
    up.covered = covered;
    up.has_decision = report_ballot_ >= 0;
    up.report_ballot = report_ballot_;
    up.decision = report_;
    const int parent = tree.parent(me_);
    if (std::find(ups_sent_.begin(), ups_sent_.end(), std::make_pair(parent, ballot_)) ==
        ups_sent_.end()) {
      fault_point(comm_, epoch_, "gathered");
      promise_ = std::max(promise_, ballot_);
      send(comm_, parent, up);
      ups_sent_.push_back({parent, ballot_});
      fault_point(comm_, epoch_, "sent_up");
    }
    for (auto &puller : pullers_)
      if (puller.second == ballot_ && puller.first != parent) {
        send(comm_, puller.first, up);
        ups_sent_.push_back({puller.first, ballot_});
        puller.second = -1;  // answered
      }
    return Status::Ok();
  }

  // The root's decision: one a rank had taken already, proposed again, else its own.
  Status decide(uint64_t value, const std::vector<bool> &covered, int *listen_fd) {
    Decision d;
    if (report_ballot_ >= 0) {
      d = report_;
    } else {
      d.proposer = me_;
      d.value = value;
      for (int r = 0; r < n_; ++r)
        if (!covered[r]) d.failed.push_back(r);
      if (request_.open_rendezvous && static_cast<int>(d.failed.size()) < n_ - 1) {
        std::string served, token;
        Status s = random_token(&token);
        if (s.ok()) s = comm_->bootstrap->open_group_listener(listen_fd, &served);
        if (!s.ok()) return s.prefix("opening the new communicator's rendezvous: ");
        d.rendezvous = served + " " + token;
      }
    }
    DDL_INFO("agreement #%u: rank %d decides at ballot %d: %zu rank%s failed%s", epoch_, me_,
             ballot_, d.failed.size(), d.failed.size() == 1 ? "" : "s",
             report_ballot_ >= 0 ? " (a decision taken before, proposed again)" : "");
    accept(ballot_, d);
    // A live rank declared failed learns from the decision that it was left out.
    if (d.proposer == me_)
      for (int r : d.failed)
        if (peer_failure(comm_, r).ok()) send(comm_, r, down_message(epoch_, me_, ballot_, d));
    return Status::Ok();
  }

  void accept(int ballot, const Decision &d) {
    decided_ = true;
    decision_ = d;
    AgreementState &st = state_of(comm_);
    st.decided_epoch = epoch_;
    st.decided_ballot = ballot;
    st.decided = d;
    st.decided_view = failed_;
    const AgreementMessage down = down_message(epoch_, me_, ballot, d);
    if (d.excludes(me_)) return;
    // Its children first, then every other rank that sent it values or asked for them (they
    // took it for their parent, seeing other ranks failed than this one does).
    std::vector<int> to = children_of(comm_, [&](int r) { return failed(r); });
    for (int r : asked_by_)
      if (std::find(to.begin(), to.end(), r) == to.end() && !failed(r)) to.push_back(r);
    for (size_t i = 0; i < to.size(); ++i) {
      send(comm_, to[i], down);
      if (i == 0) fault_point(comm_, epoch_, "passing_on");
    }
    every_path(comm_)->progress_all();
  }

  Status timed_out(int64_t elapsed_ms) {
    AgreementTree tree(n_, [&](int r) { return failed(r); });
    const int peer = pending_.empty() ? tree.parent(me_) : pending_.front();
    return timeout_error(
        "agreement #%u: timed out after %lld ms waiting for %s of rank %d, which this rank does "
        "not find failed: every live rank must make the same calls (ddl_comm_agree, "
        "ddl_comm_shrink) in the same order",
        epoch_, static_cast<long long>(elapsed_ms),
        pending_.empty() ? "the decision" : "the values", peer);
  }

  ddl_comm *comm_;
  const AgreeRequest &request_;
  const uint32_t epoch_;
  const int n_, me_;
  std::vector<char> failed_;                   // by rank: found failed (only ever set)
  int initial_ballot_ = -1;                    // the root when this rank began
  int ballot_ = -1;                            // the root it gathers for now
  int promise_ = -1;                           // the highest ballot it sent its values up for
  std::vector<AgreementMessage> ups_;          // by rank: the latest up message from it
  std::vector<bool> answered_;                 // by rank: answered with a decision it took
  std::vector<int> pending_;                   // children whose part is not in yet
  std::set<std::pair<int, int>> pulled_;       // (child, ballot) asked
  std::vector<std::pair<int, int>> pullers_;   // (rank, ballot) that asked this rank
  std::set<int> asked_by_;                     // ranks that sent it values or asked for them
  std::vector<std::pair<int, int>> ups_sent_;  // (rank, ballot) of every up message sent
  int report_ballot_ = -1;                     // the highest ballot of a decision heard of
  Decision report_;
  bool decided_ = false;
  Decision decision_;
};

}  // namespace

void cancel_agreement(ddl_comm *comm) {
  if (comm->agreement) comm->agreement->cancel_all(every_path(comm));
}

void AgreementState::cancel_all(Transport *transport) {
  for (std::list<Message> *list : {&in_flight, &mailbox})
    for (Message &m : *list)
      if (!m.request.done) transport->cancel(&m.request);
  in_flight.clear();
  mailbox.clear();
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
  Agreement agreement(comm, request, ++st.epoch);
  return agreement.run(decision, listen_fd);
}

void answer_agreements(ddl_comm *comm) {
  if (!comm->agreement || comm->agreement->decided_ballot < 0) return;
  every_path(comm)->progress_all();
  pump(comm, [comm](const AgreementMessage &m) { answer(comm, m); });
}

}  // namespace ddl

// Fault-tolerant agreement among the live ranks of a communicator: what ddl_comm_agree and
// ddl_comm_shrink decide with, after ranks may have died (ULFM's MPIX_Comm_agree).
//
// Every live rank ends with the same decision: a value (the AND or OR of the values of the
// ranks it covers) and the set of ranks it declares failed. No rank coordinates alone, so any
// rank, rank 0 included, may die during the agreement.
//
// How: over a binomial tree of the ranks (AgreementTree, agreement_wire.h), depth ceil(log2
// n), from which each rank drops the ranks it finds failed. The values go up: each rank waits
// for an "up" message from each child (the AND/OR of its subtree's values and which ranks they
// are) and sends its own to its parent. The root (the lowest rank not failed) then decides:
// the combined value, every rank no up message covered as failed, and for a shrink the new
// communicator's rendezvous, which it serves as its rank 0. The decision goes down the tree
// ("down"), each rank passing it to its children before it returns. Without failures: 2
// ceil(log2 n) message latencies (24 among 4,096 ranks: ~50 us at 2 us a latency), and each
// rank sends one message up and one to each child (the chain this replaces took n - 1
// latencies and n - 1 sends per rank).
//
// A rank returns as soon as it passed the decision on, before it knows that every other got
// it (ULFM's early-returning agreement, "ERA", works so too). Should a rank die on the way,
// the ranks below it lose their path: they find it failed, their parent is now its parent,
// and they send their up message there again. A rank that has decided answers whatever
// reaches it about that agreement with the decision, also after it returned, whenever it
// drives the communicator: in its next agreement and while a shrink builds the new
// communicator (answer_agreements). It also sends the decision to every rank that sent it
// values or asked for them (ranks that see other ranks failed than it does). Should the root
// die, the next lowest rank becomes root: a new ballot (numbered by its root), whose root asks
// its children for their values again. Safety, as in Paxos: a rank that sent an up message
// for ballot b takes no decision of a lower ballot any more (unless every such message of its
// went to the rank that offers it, which decided and so passed none of them on), but reports
// it upwards, and a new root that hears of a decision proposes it again rather than its own.
// So a decision one rank returned with is the one every survivor returns with. A rank that
// finds a ballot higher than its own in a message counts the ranks below it failed too: views
// of who failed only grow, and meet.
//
// Failed means: the transport says so (a closed connection, a silent remote host: UCX
// heartbeats, a dead pid on this host), the caller excludes it, another rank's higher ballot
// says so, or the process is stopped on this host (SIGSTOP) for longer than
// DDL_PEER_TIMEOUT_MS, the heartbeats' limit for frozen processes elsewhere. A rank that is
// merely slow to arrive (still computing) is waited for, up to the communicator's deadline:
// only a detector, never impatience, excludes a rank. A live rank the root declares failed is
// sent the decision, and learns from it that it was left out (an error).
//
// Messages go over shared memory to ranks on this host while no call failed here, else over
// the network transport (agreement.cc, path(): why), received by standing receives.
//
// Testing: DDL_AGREEMENT_FAULT=RANK:POINT kills (SIGKILL) that rank at that point of the
// communicator's first agreement, POINT one of start (on entry), gathered (its subtree's
// values in, before sending them up), sent_up (after), passing_on (the decision taken and
// sent to its first child only) and returned (the decision passed on, as it returns).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <list>
#include <memory>

#include "lib/common/status.h"
#include "lib/core/agreement_wire.h"
#include "lib/transports/transport.h"

struct ddl_comm;

namespace ddl {

// What a communicator keeps between agreements: their count (every rank counts alike: it
// numbers their messages), the standing receives of their messages, the messages whose
// buffers the transport may still use, and the latest decision, which this rank answers with.
struct AgreementState {
  struct Message {
    std::string bytes;
    TransferRequest request;
    int from = -1;  // a standing receive: the rank on this host it takes (-1: any rank)
  };
  uint32_t epoch = 0;
  uint64_t sent = 0;             // messages sent, all agreements together (a debug log counts them)
  std::list<Message> in_flight;  // sends still going, receives given up on
  std::list<Message> mailbox;    // standing receives from any rank (made by the first)
  std::vector<std::string> later;         // messages of an agreement this rank has not begun
  std::vector<int64_t> stopped_since_ms;  // by rank: when it was first seen stopped (-1: not)
  std::vector<int64_t> state_checked_ms;  // by rank: when its process state was last read
  // The latest decision this rank took: its agreement, the highest ballot it came with, and
  // the ranks this rank found failed then (whom its answers go past).
  uint32_t decided_epoch = 0;
  int decided_ballot = -1;
  Decision decided;
  std::vector<char> decided_view;
  // Cancels what is still in flight (before the transport goes).
  void cancel_all(Transport *transport);
};

enum class AgreeOp { kAnd, kOr };

struct AgreeRequest {
  uint64_t value = 0;  // this rank's value, combined with every live rank's by op
  AgreeOp op = AgreeOp::kAnd;
  std::vector<int> exclude;  // ranks the caller declares failed (the same on every rank)
  // Shrink: a rank that makes its own decision opens the new communicator's rendezvous and
  // puts "host:port token" in it (Decision::rendezvous); its socket is *listen_fd.
  bool open_rendezvous = false;
};

// Collective over the live ranks of comm (every live rank calls it, in the same order as its
// other agreements). Bounded by the communicator's deadline. *listen_fd is the rendezvous
// socket when this rank made the decision and opened one (else -1); the caller owns it.
Status agree(ddl_comm *comm, const AgreeRequest &request, Decision *decision, int *listen_fd);

// Cancels what the agreements left with the transports (before they go, or go to a shrunk
// communicator).
void cancel_agreement(ddl_comm *comm);

// Answers what reached this rank about the agreement it decided last (see above): called
// while it waits on comm outside an agreement (a shrink building the new communicator).
void answer_agreements(ddl_comm *comm);

// Whether `peer` counts as failed for an agreement on comm (see above). Also the watch that
// a shrink keeps on the members of its new communicator while it is built.
Status peer_failure(ddl_comm *comm, int peer);

}  // namespace ddl

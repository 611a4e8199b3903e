// Fault-tolerant agreement among the live ranks of a communicator: what ddl_comm_agree and
// ddl_comm_shrink decide with, after ranks may have died (ULFM's MPIX_Comm_agree).
//
// Every live rank ends with the same decision: a value (the AND or OR of the values of the
// ranks it covers) and the set of ranks it declares failed. No rank coordinates alone, so any
// rank, rank 0 included, may die during the agreement.
//
// How (hierarchical consensus with a failure detector, as in Cachin, Guerraoui and Rodrigues,
// "Introduction to Reliable and Secure Distributed Programming", 5.1): ranks take turns in
// rank order. Rank j waits for the lower ranks from j-1 down, each until its decision arrives
// or it is known failed, and adopts the decision of the first (the highest) that spoke, or,
// when every lower rank failed, makes its own (the ranks it finds failed, its value, and for
// a shrink the rendezvous of the new communicator, which it will serve as its rank 0). Then it
// sends that decision to every rank, rank j+1 first, and keeps it. The lowest rank that stays
// alive makes or passes on a decision that every higher rank adopts, so all survivors keep
// the same one; a rank that decided and then died changes nothing for the others. No round
// trips: the decision travels up the ranks, one message per pair.
//
// Cost: without failures rank j waits for rank j-1 alone, so the last rank decides after n-1
// message latencies and sends (a chain: ~10 ms among 4,096 ranks at 2 us a latency and 0.5 us
// a send), and every rank sends n-1 messages. A tree would take log2 n latencies, but then a
// rank returns before it knows that every other got the decision, and must answer the ranks
// that did not, later, wherever its program is (ULFM's early-returning agreement does it in
// MPI's progress engine); ddl has no such responder.
//
// Tried (2026-11-28, bench/recovery.md): hierarchical uniform consensus (Cachin, Guerraoui
// and Rodrigues), leaders in rank order proposing, every live rank acknowledging, the
// decided word passed on by every rank before it returns: three latencies whatever n, the
// same O(n) work per rank. Correct under every kill tried (the stress script's kinds, rank 0
// killed at a random moment of the shrink), but it doubles the messages of a call and adds
// two phases: on this host ddl_comm_agree took 25-28 us against 15-16 on 2 ranks and 1.3-1.5x
// the chain's time on 16 ranks sharing 2 cores, kill -> next collective the same; it would
// gain only among thousands of ranks, each on its own core (~1.4x by the counts above).
//
// Failed means: the transport says so (a closed connection, a silent remote host: UCX
// heartbeats, a dead pid on this host), the caller excludes it, or the process is stopped on
// this host (SIGSTOP) for longer than DDL_PEER_TIMEOUT_MS, the heartbeats' limit for frozen
// processes elsewhere. A rank that is merely slow to arrive (still computing) is waited for,
// up to the communicator's deadline: only a detector, never impatience, excludes a rank.
//
// For ddl_comm_agree, a first exchange sends every rank's value to every rank, and each
// proposes the AND/OR of those that arrived from the ranks it did not find failed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <list>
#include <memory>

#include "lib/common/status.h"
#include "lib/transports/transport.h"

struct ddl_comm;

namespace ddl {

// What a communicator keeps between agreements: their count (every rank counts alike: it
// numbers their messages), and the messages whose buffers the transport may still use.
struct AgreementState {
  struct Message {
    std::string bytes;
    TransferRequest request;
  };
  uint32_t epoch = 0;
  std::list<Message> in_flight;           // sends still going, receives given up on
  std::vector<int64_t> stopped_since_ms;  // by rank: when it was first seen stopped (-1: not)
  std::vector<int64_t> state_checked_ms;  // by rank: when its process state was last read
  // Cancels what is still in flight (before the transport goes).
  void cancel_all(Transport *transport);
};

enum class AgreeOp { kAnd, kOr };

struct AgreeRequest {
  bool exchange_values = false;  // ddl_comm_agree: combine every live rank's value
  uint64_t value = 0;            // this rank's value
  AgreeOp op = AgreeOp::kAnd;
  std::vector<int> exclude;  // ranks the caller declares failed (the same on every rank)
  // Shrink: a rank that makes its own decision opens the new communicator's rendezvous and
  // puts "host:port token" in it (Decision::rendezvous); its socket is *listen_fd.
  bool open_rendezvous = false;
};

struct Decision {
  uint64_t value = 0;
  std::vector<int> failed;  // ascending
  int proposer = -1;        // the rank that made it: the lowest rank it does not declare failed
  std::string rendezvous;   // "host:port token", when opened
  bool excludes(int rank) const;
};

// Collective over the live ranks of comm (every live rank calls it, in the same order as its
// other agreements). Bounded by the communicator's deadline. *listen_fd is the rendezvous
// socket when this rank made the decision and opened one (else -1); the caller owns it.
Status agree(ddl_comm *comm, const AgreeRequest &request, Decision *decision, int *listen_fd);

// Whether `peer` counts as failed for an agreement on comm (see above). Also the watch that
// a shrink keeps on the members of its new communicator while it is built.
Status peer_failure(ddl_comm *comm, int peer);

}  // namespace ddl

// Fault-tolerant agreement among the live ranks of a communicator: what ddl_comm_agree and
// ddl_comm_shrink decide with, after ranks may have died (ULFM's MPIX_Comm_agree).
//
// Every live rank ends with the same decision: a value (the AND or OR of the values of the
// ranks it covers) and the set of ranks it declares failed. No rank coordinates alone, so any
// rank, rank 0 included, may die during the agreement.
//
// How (the hierarchical uniform consensus of Cachin, Guerraoui and Rodrigues, "Introduction to
// Reliable and Secure Distributed Programming", with ddl's failure detectors for its perfect
// one; below): leaders take turns in rank order. Rank r leads once it has found every lower rank
// failed; every rank waits for the proposal of the lowest rank it has not found failed.
//  1. The leader proposes to every rank: its decision (the ranks it finds failed, its value,
//     and for a shrink the rendezvous of the new communicator, which it will serve as rank
//     0), or, when a failed leader's proposal reached it, that proposal unchanged.
//  2. Each rank keeps every proposal that reaches it and acknowledges those of leaders it has
//     not passed over (found failed). Passing a failed leader over, it carries that leader's
//     proposal on, if it came.
//  3. Acknowledged by every rank it does not find failed, the leader decides and tells every
//     rank that its proposal is decided; every rank that hears it decides too, and passes the
//     word on to every rank before it returns.
// Why every rank that decides decides the same, any rank dying anywhere: a leader decides
// only when every live rank holds its proposal, so every later leader carries that
// proposal on; and a rank that decided passed the word on before returning, so a rank still
// waiting (for a leader that died after deciding, say) hears it and never waits for a rank
// that has returned. A rank that decided and then died changes nothing for the others.
//
// Cost without failures: three message latencies (proposal, acknowledgement, decided), every
// rank's work O(n): the leader sends n-1 proposals and n-1 words and takes n-1
// acknowledgements, every other rank sends one acknowledgement and n-1 words, 16-24 bytes
// each (a proposal carries n bits of failed ranks and the rendezvous). Among 4,096 ranks at 2
// us a latency and 0.5 us a send, ~6 us of latencies and ~4 ms of the leader's sends and
// receives, where the chain that came before (each rank deciding after every lower one, n-1
// latencies in a row) took ~10 ms, and on ranks that share cores each of its hops waited for
// the next rank's turn on a core (16 ranks on 2 cores: up to 45 ms). Each failed leader adds a
// detection and a round.
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

// The one small interface every transport implements (after gloo's transport::Pair):
// post a send or a receive of a byte range to or from a peer, drive progress, learn when a
// peer is gone. Connection setup is transport-specific; the rendezvous that carries the
// addresses (lib/bootstrap) stays outside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ddl/ddl.h"
#include "lib/common/status.h"
#include "lib/common/tags.h"

namespace ddl {

// Sequence numbers match modulo 2^kTransportSeqBits: a message of call k never waits beside
// one of call k + 2^16 from the same sender (a peer's messages arrive, and its calls' receives
// are posted, in order), and the UCX tag keeps its other bits for ranks and generations.
constexpr int kTransportSeqBits = 16;

// One posted send or receive. The caller owns it and must keep it in place until `done`,
// or until cancel() returned.
struct TransferRequest {
  bool done = false;
  Status status;               // the failure, when done with an error
  size_t received = 0;         // bytes that arrived (receives)
  void *handle = nullptr;      // the transport's own request
  bool empty_payload = false;  // transport's: a zero-byte message sent as a placeholder
  uint8_t route = 0;           // a router's: which of its transports holds the request
};

// What a receive-and-reduce applies to each arriving element: dst = incoming (op) src.
struct ReduceSpec {
  ddl_datatype_t dtype = DDL_FLOAT32;
  ddl_op_t op = DDL_SUM;
  int avg_divisor = 1;  // read for DDL_AVG only
};

// A call's identity as it travels on messages: 16 bytes the transport does not interpret
// (the executor's normalized call signature). All zero means "no call".
struct CallStamp {
  uint8_t bytes[16] = {};
};

class Transport;

// Which transport carries the messages to and from each peer (notices aside): what a router
// (RoutedTransport::carriers) resolves once per communicator, so that a caller posting many
// messages (the executor) talks to each peer's transport itself.
struct Carriers {
  std::vector<Transport *> by_peer;
  std::vector<Transport *> distinct;  // each of them once (what stamps a call's messages)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char *name() const = 0;

  // Messages are matched by (sender, collective sequence number, step tag). The sequence
  // number wraps at 2^kTransportSeqBits and the tag has 24 bits.
  virtual Status post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                           TransferRequest *req) = 0;
  virtual Status post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                           TransferRequest *req) = 0;
  // A receive of the next message with this tag from any rank and of any sequence number
  // (for out-of-band notices).
  virtual Status post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) = 0;
  // Whether the message (peer, seq, tag) has arrived, or begun to, without taking it: a
  // receive posted for it then matches it. Receives from any source find their sender so.
  virtual bool probe(int peer, uint32_t seq, uint32_t tag) = 0;
  // Transports that hold arriving data in their own memory (shared memory) can reduce it
  // from there while it is still in cache, saving the copy into a landing buffer. Only
  // called when reduces_on_receive(peer); a message of another size than `bytes` completes
  // with `received` set to its size and nothing written.
  virtual bool reduces_on_receive(int /*peer*/) const { return false; }
  virtual Status post_recv_reduce(int /*peer*/, uint32_t /*seq*/, uint32_t /*tag*/, void * /*dst*/,
                                  const void * /*src*/, size_t /*bytes*/,
                                  const ReduceSpec & /*spec*/, TransferRequest * /*req*/) {
    return unsupported("%s cannot reduce on receive", name());
  }
  // Transports with room in their message headers stamp every message with the sender's
  // current call and compare the stamps of arriving messages of the same call (sequence
  // number) with their own, so that checking that ranks agree costs no message of its own.
  virtual bool carries_stamps(int /*peer*/) const { return false; }
  // The call this rank now runs: stamped on what it sends from now on.
  virtual void begin_call(uint32_t /*seq*/, const CallStamp & /*stamp*/) {}
  // A message of the current call arrived from *peer with another stamp (*theirs).
  virtual bool stamp_mismatch(int * /*peer*/, CallStamp * /*theirs*/) const { return false; }
  // Whether a message of the current call from `peer` arrived (so its stamp was compared).
  virtual bool stamp_seen(int /*peer*/) const { return false; }
  // Drives communication and completes requests; true when anything happened.
  virtual bool progress() = 0;
  // Drives every path now, including those a router polls only now and then.
  virtual bool progress_all() { return progress(); }
  // Detaches an unfinished request (after an error or a timeout): the transport will never
  // touch *req again, and cancels the operation where it can.
  virtual void cancel(TransferRequest *req) = 0;
  // OK while the peer looks alive; else why it is not (closed connection, error).
  virtual Status peer_status(int peer) const = 0;
  // Whether peer_status's word on a failed peer is final: the transport saw the process end
  // itself (a pid on this host), so waiting for more before wording an error adds nothing.
  virtual bool peer_death_final(int /*peer*/) const { return false; }
};

}  // namespace ddl

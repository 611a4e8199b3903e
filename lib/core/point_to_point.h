// ddl_send and ddl_recv: messages between two ranks, outside the collectives' sequence.
//
// Messages of one pair of ranks and one tag are matched in the order they were posted (MPI's
// and NCCL's rule): the k-th send from a to b with tag t travels with transport tag
// kPointToPointTagBase + t and sequence number k, and b's k-th receive from a with tag t
// expects it. A receive from any source probes each rank's next message with its tag (the one
// no receive has taken yet) until one has arrived, then receives it as above; receives of its
// tag posted after it wait until it has found its sender, so that it takes the first message
// as MPI's order says. Both sides
// count, so no message of its own tells the peer what is coming; counts that disagree fail on
// the receiver (its size check) and the receiver tells everyone, as for mismatched
// collectives. The messages leave straight from
// the caller's buffer: shared memory's cells inside a host, UCX across hosts (rendezvous for
// large ones: no copy into a bounce buffer); device memory through a buffer in host memory
// (lib/device/bounce.h), a send's copied out when it is posted, a receive's copied in when
// it has arrived, on the thread that polls the batch.
//
// A batch (one call, or a group's sends and receives) is posted at once and then polled. The
// progress thread keeps its batches in flight while it runs later jobs, so an isend and an irecv
// issued one after the other never wait for each other. Every wait has the communicator's deadline
// and watches for dead peers, notices and ddl_comm_abort, like a collective's.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lib/core/collectives.h"

namespace ddl {

class PointToPointBatch {
 public:
  // Posts checked sends and receives (call.collective kSend or kRecv) on comm. The calls are
  // copied; their buffers must stay until the batch is done.
  PointToPointBatch(ddl_comm *comm, std::vector<CollectiveCall> calls);
  ~PointToPointBatch();
  PointToPointBatch(const PointToPointBatch &) = delete;
  PointToPointBatch &operator=(const PointToPointBatch &) = delete;

  // Drives the transport and looks at the transfers; true once the batch is over (status()
  // then tells how). After a failure the communicator is failed, as after a collective's.
  bool poll();
  const Status &status() const { return status_; }
  // Polls until the batch is over, pausing as waiting collectives do.
  Status wait();

 private:
  struct Transfer;
  bool prepare_bounce(Transfer &t);
  bool post(Transfer &t);
  bool waits(const Transfer &t) const;
  bool post_waiting();
  void fail(Status s, bool news);
  Status check_waiting();

  ddl_comm *comm_;
  std::vector<CollectiveCall> calls_;
  std::vector<Transfer> transfers_;
  size_t done_ = 0;
  size_t unposted_ = 0;  // receives waiting for their sender or an earlier receive
  int idle_ = 0;
  bool over_ = false;
  Status status_;
  std::chrono::steady_clock::time_point deadline_;  // set by the first check_waiting
};

// Runs a batch on the calling thread and returns when it is over.
Status run_point_to_point(ddl_comm *comm, std::vector<CollectiveCall> calls);

}  // namespace ddl

// Gates that let a rank write into a peer's buffers only while that peer is in the call.
//
// The single-copy allreduce pushes each reduced piece straight into the peers' outputs
// (process_vm_writev, or stores into a mapped ddl_mem_alloc buffer). On success a final
// barrier tells every rank that nobody writes into its memory any more. A rank that fails
// and returns early has no such barrier, and its caller may reuse the buffer at once: a
// slower peer must not write into it from then on. So each rank holds a gate open for the
// call it is in, and a writer announces itself before each write and checks the gate after:
//
//   writer W into X:  writing[X][W] = call;  if (open[X] != call) { writing[X][W] = 0; stop; }
//                     ... write ...;         writing[X][W] = 0;
//   X leaving:        open[X] = 0;           wait until no writing[X][W] == call (or W dead)
//
// With sequentially consistent stores and loads on both sides, either the writer sees the
// gate closed or X sees the writer's announcement and waits for it: no write lands after X
// has left. (Dekker's handshake.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ddl {

class WriteGates {
 public:
  // Bytes of shared memory per rank for `nranks` ranks (zero-filled: every gate closed).
  static size_t bytes_per_rank(int nranks);
  // `region`: nranks blocks of bytes_per_rank(nranks), shared by the host's ranks, which
  // are all the communicator's ranks (rank r owns block r).
  WriteGates(char *region, int nranks, int rank);

  // This rank accepts writes for `call` (before it tells peers where its buffers are).
  void open(uint64_t call);
  // It accepts no more writes: none starts after this returns.
  void close();
  // Before writing into `peer`'s memory during `call`: false when the peer has left it.
  bool begin_write(int peer, uint64_t call);
  void end_write(int peer);
  // Whether `writer` may be writing into this rank's memory during `call` now.
  bool writing(int writer, uint64_t call) const;

 private:
  std::atomic<uint64_t> &open_flag(int rank) const;
  std::atomic<uint64_t> &writing_flag(int owner, int writer) const;

  char *region_;
  int nranks_;
  int rank_;
};

}  // namespace ddl

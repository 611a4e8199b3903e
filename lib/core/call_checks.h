// The argument checks of every call (collective or point to point), before anything is sent:
// pointers, enum values, ranks, counts and the layouts of the v forms. A failed check touches
// nothing and names the argument; the caller prefixes the rank and the call.
#pragma once

#include "lib/core/collectives.h"

namespace ddl {

// Checks call on comm and decides whether it runs in place (*in_place; only meaningful on a
// successful check).
Status check_call(const ddl_comm *comm, const CollectiveCall &call, bool *in_place);
// Whether a checked call runs in place (the layouts NCCL and MPI use: the smaller buffer
// inside the larger).
bool call_in_place(const ddl_comm *comm, const CollectiveCall &call);

// The send and receive extents of call's buffers, in bytes (0 where the rank does not use
// that buffer), for a call that passed check_call.
struct CallExtents {
  size_t send = 0, recv = 0;
};
CallExtents call_extents(const ddl_comm *comm, const CollectiveCall &call, bool in_place);

// Where rank j's block lies in an allgather(v)'s output, and its size (bytes).
struct BlockAt {
  size_t offset, bytes;
};
BlockAt gathered_block(const CollectiveCall &call, int j);
// What a rank reads of an allgather(v)'s blocks, the same on every rank (the paths that
// decide by it must decide alike): all blocks less one rank's share of them.
size_t gathered_read_bytes(const ddl_comm *comm, const CollectiveCall &call);

}  // namespace ddl

// The one dispatch: every way ddl runs a call is a row of one table, and one function picks
// the row, logs it once per shape with why, and runs it.
//
//   send_recv  a send or receive between two ranks (point_to_point.h)
//   cuda_ipc   an allreduce of device buffers, every rank on this host: the ranks read each
//              other's device memory and reduce with ddl's kernels (lib/device)
//   staged     any other call of device buffers: through pinned host memory in chunks, each
//              chunk a host call dispatched here again (lib/device/staging.h)
//   direct     one host, single copy: each rank reads its peers' buffers (direct_allreduce.h)
//   flat       one host, the shared slots (flat_collectives.h)
//   schedule   everything else: the schedule the cost models (or DDL_ALGO) choose, on the
//              executor (lib/algorithms, lib/exec)
//
// The rows are asked in this order; the first that can take the call and should, unforced,
// runs it. DDL_ALGO is one more input of the choice, read here alone: a row's name (direct,
// flat) forces that row wherever it can take the call, a schedule's name forces the schedule
// row for its own collective; a name that is neither for this call leaves it to the usual
// choice. Stream-ordered calls wait for their stream (lib/device/stream_calls.cc) and then
// come here like any other; batches of sends and receives (groups, nonblocking calls) run
// the send_recv row's mechanism for all their calls at once (lib/core/progress.cc).
#pragma once

#include <string>
#include <vector>

#include "lib/core/collectives.h"
#include "lib/device/cuda_driver.h"

namespace ddl {

// What the rows read beside the call: where its buffers are, and whether it is a
// stream-ordered call whose stream has been waited for.
struct CallPlace {
  device::PointerInfo where;
  bool from_stream = false;
  bool on_device() const { return where.kind == device::MemoryKind::kDevice; }
};

// A way of running calls. Every rank decides alike from the same call.
struct Way {
  const char *name;
  // Whether DDL_ALGO may force it by its name.
  bool forcible;
  // Whether it can take the call at all (checked calls only): what forcing it asks.
  bool (*possible)(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);
  // Whether it should, unforced: possible and the better way (the rows that take every call
  // of their kind and place: possible alone).
  bool (*applies)(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);
  // Why it takes the call: one line for the log, starting with the way's name.
  std::string (*why)(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);
  Status (*run)(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);
};

// The table, in the order the rows are asked.
const std::vector<Way> &ways();

// The row that runs a checked call.
const Way &choose_way(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);

// Validates and runs one call on comm (a live communicator owned by this thread): finds where
// its buffers are, then dispatch().
Status run_collective(ddl_comm *comm, const CollectiveCall &call);

// Runs a call whose place is known through the row choose_way picks (logged once per shape).
Status dispatch(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place);

// At ddl_comm_init: a DDL_ALGO way (direct, flat) this communicator cannot take, said once.
void warn_of_unavailable_way(const ddl_comm *comm);

}  // namespace ddl

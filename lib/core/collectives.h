// The collectives behind the C API: argument checks, plan lookup, execution, and error
// messages that name the rank, the collective, its sequence number and the cause.
#pragma once

#include <memory>

#include "lib/algorithms/schedule.h"
#include "lib/core/comm.h"
#include "lib/exec/executor.h"
#include "lib/exec/signature.h"

namespace ddl {
namespace device {
struct StreamCall;  // lib/device/stream_calls.cc
}  // namespace device

struct CollectiveCall {
  Collective collective = Collective::kAllreduce;
  const void *sendbuf = nullptr;
  void *recvbuf = nullptr;
  size_t count = 0;  // as the C call names it (per-rank count for allgather/reduce_scatter)
  // The raw integers the caller passed (raw_enum_value): they become ddl_datatype_t and
  // ddl_op_t only once checked, as an out-of-range enum value is undefined behaviour in C++.
  int dtype = DDL_FLOAT32;
  int op = DDL_SUM;
  int root = 0;           // rooted collectives
  int peer = -1;          // send, recv (DDL_ANY_SOURCE: a receive from any rank)
  int tag = 0;            // send, recv: 0..DDL_TAG_UB
  int *source = nullptr;  // recv: where the sender's rank goes once it is done (may be null)
  // The v forms: this rank's counts and displacements, copied from the caller's arrays at the
  // call (null for the other calls).
  std::shared_ptr<const BlockLayout> layout;
  // A stream-ordered call (ddl_*_stream): what orders it on the caller's CUDA stream.
  device::StreamCall *stream = nullptr;
};

// A way to run a call: the shared slots, the single copy, a schedule on the executor, or
// lib/device's CUDA-IPC allreduce. run_host_collective chooses one (the first whose applies()
// holds, the schedule last: it takes every call) and hands it the call as it prepared it:
// checked, numbered (call_number, as ddl_comm::calls), with its ExecArgs (sequence number,
// signature, notices, deadline, abort); run_host_collective keeps the rest (the log line once
// per shape, failure notices when *found_failure, the sticky failure, the error's prefix
// naming the call).
class CallRunner {
 public:
  virtual ~CallRunner() = default;
  // Whether it takes this checked call; every rank must decide alike.
  virtual bool applies(const ddl_comm *comm, const CollectiveCall &call) const = 0;
  // Why it takes it: one line for the log.
  virtual std::string why(ddl_comm *comm, const CollectiveCall &call) = 0;
  virtual Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                     uint64_t call_number, bool *found_failure) = 0;
};

// Bytes of call.count elements of its datatype (a checked one).
size_t call_bytes(const CollectiveCall &call);

// The CollectiveArgs that build a plan for a checked call on comm.
CollectiveArgs args_of(const ddl_comm *comm, const CollectiveCall &call, bool in_place);

// Validates and runs one collective on comm (a live communicator owned by this thread):
// host buffers as they are, device buffers and stream calls through lib/device/staging.h.
Status run_collective(ddl_comm *comm, const CollectiveCall &call);
// The host path of run_collective: every buffer of call is host memory, run the way
// choose_runner says; or, with a runner (lib/device's), the call as that runner moves it.
Status run_host_collective(ddl_comm *comm, const CollectiveCall &call,
                           CallRunner *runner = nullptr);
// The way a checked host call runs: the one place that decides, DDL_ALGO (config.algorithm)
// included: "direct" or "flat" where that way can take the call, a name of one of the
// collective's schedules, else the single copy or the slots where their sizes say, else the
// schedule the cost models choose.
CallRunner &choose_runner(const ddl_comm *comm, const CollectiveCall &call);
// DDL_ALGO's name where it names one of this collective's schedules, else "" (the models).
std::string forced_schedule(const ddl_comm *comm, Collective collective);
// At ddl_comm_init: a DDL_ALGO way (direct, flat) this communicator cannot take, said once.
void warn_of_unavailable_way(const ddl_comm *comm);

// The argument checks of run_collective alone, for calls queued to run later (nonblocking
// calls, groups): they fail at the call, naming the rank and the collective.
Status check_collective(const ddl_comm *comm, const CollectiveCall &call);

// Builds this rank's plan for args, every step tag raised by tag_offset (for plans that run
// beside another one within the same call); *why tells how the algorithm was chosen.
Status make_comm_plan(const ddl_comm *comm, const CollectiveArgs &args, uint32_t tag_offset,
                      std::unique_ptr<Plan> *out, std::string *why);

// A peer left the call (it died, or its memory cannot be read). If it died, that is the news
// (after a quick look for a notice that explains the death, as the executor does). If it
// failed and returned, its notice (sent to everyone) names the cause better: it waits for
// one briefly. *found_failure: the error is this rank's news for everyone.
Status explain_peer_failure(ddl_comm *comm, const ExecArgs &exec, int peer, const Status &error,
                            bool *found_failure);

// What every rank must agree on for this call (checked around the ring).
CallSignature signature_of(const CollectiveCall &call, uint32_t seq);

// "rank 3: allreduce #12 (count 1024, float32, sum)": how errors name a call.
std::string describe_call(const ddl_comm *comm, const CollectiveCall &call, uint32_t seq);

}  // namespace ddl

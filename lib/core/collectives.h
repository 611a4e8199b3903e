// The collectives behind the C API: argument checks, plan lookup, execution, and error
// messages that name the rank, the collective, its sequence number and the cause.
#pragma once

#include <memory>

#include "lib/algorithms/schedule.h"
#include "lib/common/call.h"
#include "lib/core/comm.h"
#include "lib/exec/executor.h"
#include "lib/exec/signature.h"

namespace ddl {
namespace device {
struct PointerInfo;  // lib/device/cuda_driver.h
}  // namespace device

// How a host row of the dispatch (lib/core/dispatch.h: direct, flat, schedule) or lib/device's
// CUDA-IPC allreduce moves a call, once run_host_collective has prepared it: checked, numbered
// (call_number, as ddl_comm::calls), with its ExecArgs (sequence number, signature, notices,
// deadline, abort); run_host_collective keeps the rest (failure notices when *found_failure,
// the sticky failure, the error's prefix naming the call).
class CallRunner {
 public:
  virtual ~CallRunner() = default;
  virtual Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                     uint64_t call_number, bool *found_failure) = 0;
};

// The schedule row's runner: the call's schedule (the algorithm the models or DDL_ALGO
// choose) on the executor, with the peers' buffers published around it when its steps copy
// between them; and why that schedule, for the log.
class ScheduleRunner : public CallRunner {
 public:
  Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec, uint64_t call_number,
             bool *found_failure) override;
};
std::string why_schedule(ddl_comm *comm, const CollectiveCall &call);

// The CollectiveArgs that build a plan for a checked call on comm.
CollectiveArgs args_of(const ddl_comm *comm, const CollectiveCall &call, bool in_place);

// Whether a call may start on comm: not when it failed earlier (a host collective's failure, or
// a device barrier's of a stream-ordered allreduce that passed its deadline: recorded here as
// the communicator's) or was aborted. `context` starts the words ("rank 0: allreduce #3 ...: ").
Status check_usable(ddl_comm *comm, const std::string &context);

// A checked call (the dispatch checked it) whose buffers are all host memory, as `runner`
// moves it (see CallRunner).
Status run_host_collective(ddl_comm *comm, const CollectiveCall &call, CallRunner &runner);
// DDL_ALGO's name where it names one of this collective's schedules, else "" (the models).
std::string forced_schedule(const ddl_comm *comm, Collective collective);

// Where the call's buffers are (host and device mixed is an error), and the refusal of device
// buffers for the calls that have no device path.
Status locate_buffers(const CollectiveCall &call, device::PointerInfo *where);

// The argument checks of run_collective alone (lib/core/dispatch.h), for calls queued to run later
// (nonblocking calls, groups): they fail at the call, naming the rank and the collective.
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

// "rank 3: allreduce: ": how errors start about a call before (or outside) its sequence.
std::string call_words(const ddl_comm *comm, const CollectiveCall &call);

// "rank 3: allreduce #12 (count 1024, float32, sum)": how errors name a call.
std::string describe_call(const ddl_comm *comm, const CollectiveCall &call, uint32_t seq);

}  // namespace ddl

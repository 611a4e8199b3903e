// The allreduce of device buffers among the ranks of one host, straight out of each other's
// device memory through CUDA IPC (issue 13, item 4, first slice). Used when every rank of
// the communicator is on this host, every buffer of the call is device memory, the driver
// has the IPC entry points and the build has the reduction kernels; otherwise the call is
// staged through pinned host memory (staging.h), and the log says which and why.
//
// Each rank owns one block of the vector (BlockSplit). Per call:
//  0. Ready: a blocking call waits for the work queued so far on the legacy default stream
//     (which waits for every blocking stream); a stream-ordered call's stream was waited for
//     by run_stream_call. Either way this rank's input is final before anyone learns where it is.
//  1. Exchange (an allgather over the host transport that carries the call's signature, so
//     mismatched calls fail here, before anyone touches another's memory): each rank's input
//     and output as (allocation handle, offset), or why it cannot export them. If any rank
//     cannot, every rank stages this call (they all see the same records).
//     A call on a progress thread that may not synchronize the device (the asynchronous
//     stream mode: device_state.h) opens nothing: every rank then votes whether it has each
//     peer's buffers open already, and unless all have, every rank stages the call and the
//     allocations it lacked are opened on its caller's thread before its next call (torch's
//     caching allocator hands out the same few allocations call after call).
//  2. Reduce: each rank opens its peers' allocations (cached) and reduces its block from all
//     ranks' inputs into its own output: one kernel launch for up to 8 ranks (device_reduce),
//     ceil((n-1)/7) for more (partial results in the output; AVG divides in the last pass
//     only). It waits for its kernels.
//  3. Barrier: every block is reduced. In place, a rank's output blocks are peers' inputs,
//     which are read in phase 2 until then.
//  4. Gather: each rank copies the other blocks from their owners' outputs into its own
//     (device-to-device copies, starting with the next rank so that not every rank reads
//     the same peer at once), and waits for them.
//  5. Barrier: no rank returns (and lets its caller reuse its buffers) while a peer still
//     reads them.
// A rank only ever writes its own output, so no write gate is needed. Every wait has the
// communicator's deadline and sees ddl_comm_abort; the host-side exchanges name a dead or
// failed peer as the host collectives do. A rank that fails waits for its own stream's
// work before it returns (its kernels write its caller's output); a peer that fails after
// the exchange may still read this rank's buffers until it learns of the failure, which is
// harmless to this rank's memory (reads only), and its call fails too.
//
// Tested against the stand-in driver (tests/device/fakes), which checks the protocol, and on
// an H200 with 2 and 4 ranks sharing it (tests/gpu/run_gpu_checks.sh, 2026-11-26): results
// equal to a float64 reference, a killed rank named by the survivors. Ranks sharing one GPU
// need MPS to be fast (bench/gpu.md, "On a GPU").
#include <algorithm>
#include <vector>

#include "lib/algorithms/blocks.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"
#include "lib/core/progress.h"
#include "lib/device/cuda_ipc.h"
#include "lib/device/device_reduce.h"
#include "lib/device/device_state.h"
#include "lib/device/staging.h"

namespace ddl {
namespace device {
namespace {

constexpr int kMaxKernelInputs = 8;  // device_reduce's limit

// What each rank publishes in phase 1.
struct IpcRecord {
  uint32_t usable = 0;  // 0: `why` says what this rank could not export
  uint32_t reserved = 0;
  IpcBufferRef input, output;
  char why[160] = {};
};

bool all_on_one_host(const ddl_comm *comm) {
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  return std::all_of(hosts.group_of.begin(), hosts.group_of.end(),
                     [&](int group) { return group == hosts.group_of[0]; });
}

// Whether the IPC path may take the call: only conditions every rank sees alike (the job's
// layout, the call, the build, the driver, the environment), so that all choose the same.
bool ipc_applies(const ddl_comm *comm, const CudaDriver &cu, const CollectiveCall &call,
                 std::string *why) {
  const char *missing = nullptr;
  if (call.collective != Collective::kAllreduce)
    *why = "only allreduce takes CUDA IPC so far";
  else if (comm->nranks < 2 || call.count == 0)
    *why = "nothing to exchange";
  else if (!all_on_one_host(comm))
    *why = strprintf("the ranks are on %d hosts (CUDA IPC needs every rank on this host)",
                     comm->hosts);
  else if (env_string("DDL_CUDA_IPC") == "0")
    *why = "DDL_CUDA_IPC=0";
  else if (!has_ipc_entry_points(cu, &missing))
    *why = strprintf("the CUDA driver %s lacks %s", cu.library.c_str(), missing);
  else if (!cuda_kernels_built())
    *why = "this build has no CUDA kernels: " + cuda_kernels_absent_reason();
  else if (!cu.module_load_data || !cu.launch_kernel)
    *why = strprintf("the CUDA driver %s lacks cuModuleLoadData or cuLaunchKernel",
                     cu.library.c_str());
  else
    return true;
  return false;
}

char *at(CUdeviceptr base, size_t offset) {
  return reinterpret_cast<char *>(base + offset);
}

// The dispatch's cuda_ipc row decided (every rank's device buffers on this host, CUDA IPC up).
class IpcAllreduce : public CallRunner {
 public:
  IpcAllreduce(DeviceState *st, const PointerInfo &where, bool from_stream)
      : st_(st), cu_(*st->cu), where_(where), from_stream_(from_stream) {}
  bool fell_back() const { return fell_back_; }
  const std::string &fallback_reason() const { return fallback_reason_; }

  Status run(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec, uint64_t call_number,
             bool *found_failure) override {
    ScopedContext scope(cu_, where_.context);
    *found_failure = true;  // until the exchange: this rank's own trouble, news for peers
    const bool may_open = may_sync_device(comm);
    // Remaking the state for another context closes what it opened: not without may_open
    // (this call is then staged by the vote below).
    const bool other_context = !may_open && st_->ipc && st_->ipc->context != where_.context;
    Status s = other_context ? Status::Ok()
                             : prepare_ipc(comm, st_, where_.context, sizeof(IpcRecord), &ipc_);
    if (other_context) ipc_ = st_->ipc;
    if (!s.ok()) return s.prefix("preparing the CUDA-IPC path: ");
    if (!from_stream_ && !other_context) {  // staged, the call waits for it there
      s = wait_on(ipc_->ready, legacy_stream(), exec,
                  "waiting for the default stream's work before the call");
      if (!s.ok()) return s;
    }
    std::vector<IpcRecord> records(comm->nranks);
    s = exchange(comm, call, exec, &records, found_failure);
    if (!s.ok() || fell_back_) return s;
    // Every rank votes where any rank may have to (the mode is the same on every rank); one
    // that may open votes yes.
    if (stream_calls_async(comm)) {
      bool ready = may_open || (!other_context && !ipc_->close_each_call &&
                                device_kernels_loaded(where_.context));
      for (int peer = 0; peer < comm->nranks && !may_open; ++peer) {
        if (peer == comm->rank) continue;
        // Both buffers asked after, so that both are queued for opening.
        const bool in = peer_is_open(comm, ipc_, peer, records[peer].input, !other_context);
        const bool out = peer_is_open(comm, ipc_, peer, records[peer].output, !other_context);
        ready = ready && in && out;
      }
      s = vote(comm, exec, ready, found_failure);
      if (!s.ok() || fell_back_) return s;
    }
    std::vector<CUdeviceptr> inputs(comm->nranks), outputs(comm->nranks);
    for (int peer = 0; peer < comm->nranks; ++peer) {
      if (peer == comm->rank) {
        inputs[peer] = reinterpret_cast<CUdeviceptr>(exec.input);
        outputs[peer] = reinterpret_cast<CUdeviceptr>(exec.output);
        continue;
      }
      s = peer_address(comm, ipc_, peer, records[peer].input, call_number, &inputs[peer]);
      if (s.ok())
        s = peer_address(comm, ipc_, peer, records[peer].output, call_number, &outputs[peer]);
      if (!s.ok()) return s.prefix("opening the peers' buffers: ");
    }
    const BlockSplit split(call.count, comm->nranks);
    s = reduce_block(comm, exec, split.block(comm->rank), inputs, outputs[comm->rank]);
    if (s.ok()) s = wait_on(ipc_->done, ipc_->stream, exec, "reducing this rank's block");
    if (!s.ok()) return drained(exec, s);
    s = barrier(comm, exec, 0, "waiting for every rank to reduce its block", found_failure);
    if (!s.ok()) return s;
    *found_failure = true;
    s = gather_blocks(comm, exec, split, outputs);
    if (s.ok()) s = wait_on(ipc_->done, ipc_->stream, exec, "copying the other ranks' blocks");
    if (!s.ok()) return drained(exec, s);
    s = barrier(comm, exec, 1, "waiting for every rank to finish reading", found_failure);
    if (!s.ok()) return s;
    end_ipc_call(comm, ipc_, call_number);
    return Status::Ok();
  }

 private:
  Status cuda_failed(const std::string &what, CUresult r) const {
    return Status(DDL_ERR_SYSTEM,
                  strprintf("CUDA %s: %s", what.c_str(), cuda_error_text(cu_, r).c_str()));
  }

  Status wait_on(CUevent event, CUstream stream, const ExecArgs &exec, const char *what) {
    const CUresult r = cu_.event_record(event, stream);
    if (r != kCudaSuccess) return cuda_failed(std::string("cuEventRecord while ") + what, r);
    return wait_event(cu_, event, exec.deadline, exec.abort_flag, what);
  }

  // A failure with work of this call on the stream: none of it may write the caller's output
  // after the call has returned.
  Status drained(const ExecArgs &exec, Status error) {
    (void)exec;
    if (cu_.event_record(ipc_->done, ipc_->stream) == kCudaSuccess)
      wait_event(cu_, ipc_->done,
                 std::chrono::steady_clock::now() + std::chrono::milliseconds(2000), nullptr,
                 "ending the stream's work after a failure");
    return error;
  }

  Status exchange(ddl_comm *comm, const CollectiveCall &call, const ExecArgs &exec,
                  std::vector<IpcRecord> *records, bool *found_failure) {
    IpcRecord mine;
    const size_t bytes = call.count * datatype_size(exec.dtype);
    Status s = describe_buffer(cu_, exec.input, bytes, &mine.input);
    if (s.ok()) s = describe_buffer(cu_, exec.output, bytes, &mine.output);
    mine.usable = s.ok() ? 1 : 0;
    if (!s.ok()) snprintf(mine.why, sizeof mine.why, "%s", s.message().c_str());
    ExecArgs x = exec;
    x.input = &mine;
    x.output = records->data();
    x.dtype = DDL_UINT8;
    s = comm->executor.run(*ipc_->exchange, x, comm->routes.get());
    if (!s.ok()) {
      *found_failure = comm->executor.found_failure();
      return s.prefix("exchanging CUDA IPC handles: ");
    }
    for (int r = 0; r < comm->nranks; ++r) {
      const IpcRecord &theirs = (*records)[r];
      if (theirs.usable) continue;
      fell_back_ = true;
      fallback_reason_ = strprintf("rank %d cannot export its buffers: %.*s", r,
                                   static_cast<int>(sizeof theirs.why), theirs.why);
      return Status::Ok();
    }
    return Status::Ok();
  }

  // Whether every rank may go on without opening anything (ready: this rank may); if not, the
  // call falls back to staging on every rank alike.
  Status vote(ddl_comm *comm, const ExecArgs &exec, bool ready, bool *found_failure) {
    const uint32_t mine = ready ? 1 : 0;
    std::vector<uint32_t> votes(comm->nranks);
    ExecArgs x = exec;
    x.input = &mine;
    x.output = votes.data();
    x.dtype = DDL_UINT8;
    x.signature = nullptr;  // checked by the exchange
    Status s = comm->executor.run(*ipc_->vote, x, comm->routes.get());
    if (!s.ok()) {
      *found_failure = comm->executor.found_failure();
      return s.prefix("voting on the CUDA-IPC path: ");
    }
    for (int r = 0; r < comm->nranks; ++r) {
      if (votes[r]) continue;
      fell_back_ = true;
      fallback_reason_ = strprintf(
          "rank %d lacks a peer's allocation opened (or its kernels loaded), which a progress "
          "thread that streams wait for may not do (its caller's thread does it before its "
          "next call)",
          r);
      break;
    }
    return Status::Ok();
  }

  // This rank's block of the output from every rank's input, own input first (in place it
  // is the output, which the first pass must read before anything is written there).
  Status reduce_block(ddl_comm *comm, const ExecArgs &exec, const Extent &block,
                      const std::vector<CUdeviceptr> &inputs, CUdeviceptr output) {
    if (block.count == 0) return Status::Ok();
    const size_t offset = block.offset * datatype_size(exec.dtype);
    std::vector<const void *> srcs;
    srcs.push_back(at(inputs[comm->rank], offset));
    for (int peer = 0; peer < comm->nranks; ++peer)
      if (peer != comm->rank) srcs.push_back(at(inputs[peer], offset));
    void *dst = at(output, offset);
    const int n = comm->nranks;
    for (int next = 0; next < n;) {
      const void *pass[kMaxKernelInputs];
      int k = 0;
      if (next > 0) pass[k++] = dst;  // the partial result so far
      while (k < kMaxKernelInputs && next < n) pass[k++] = srcs[next++];
      const bool last = next == n;
      const ddl_op_t op = exec.op == DDL_AVG && !last ? DDL_SUM : exec.op;
      Status s = device_reduce(cu_, ipc_->stream, dst, pass, k, block.count, exec.dtype, op, n);
      if (!s.ok()) return s.prefix("reducing this rank's block: ");
    }
    return Status::Ok();
  }

  Status gather_blocks(ddl_comm *comm, const ExecArgs &exec, const BlockSplit &split,
                       const std::vector<CUdeviceptr> &outputs) {
    const size_t elem = datatype_size(exec.dtype);
    for (int k = 1; k < comm->nranks; ++k) {
      const int peer = (comm->rank + k) % comm->nranks;
      const Extent block = split.block(peer);
      if (block.count == 0) continue;
      const size_t offset = block.offset * elem;
      const CUresult r = cu_.memcpy_dtod_async(outputs[comm->rank] + offset, outputs[peer] + offset,
                                               block.count * elem, ipc_->stream);
      if (r != kCudaSuccess)
        return cuda_failed(
            strprintf("cuMemcpyDtoDAsync of rank %d's block (%zu B)", peer, block.count * elem), r);
    }
    return Status::Ok();
  }

  Status barrier(ddl_comm *comm, const ExecArgs &exec, int which, const char *what,
                 bool *found_failure) {
    ExecArgs b = exec;
    b.signature = nullptr;  // checked by the exchange
    Status s = comm->executor.run(*ipc_->barrier[which], b, comm->routes.get());
    if (s.ok()) return s;
    *found_failure = comm->executor.found_failure();
    return s.prefix(strprintf("%s: ", what));
  }

  DeviceState *st_;
  const CudaDriver &cu_;
  PointerInfo where_;
  bool from_stream_;
  IpcState *ipc_ = nullptr;
  bool fell_back_ = false;
  std::string fallback_reason_;
};

// Logs where a call the dispatch gave CUDA IPC went instead (the vote staged it), once per
// collective and reason.
void log_path(DeviceState *st, const CollectiveCall &call, const std::string &path) {
  const std::string line =
      strprintf("%s of device buffers: %s", collective_name(call.collective), path.c_str());
  if (st->paths_logged.size() < 64 && st->paths_logged.insert(line).second)
    DDL_INFO("%s", line.c_str());
}

}  // namespace

bool cuda_ipc_possible(const ddl_comm *comm, const CollectiveCall &call, std::string *why_not) {
  std::string why;
  const CudaDriver *cu = cuda_driver();
  if (!cu) {
    why = "no CUDA driver: " + cuda_absent_reason();
  } else if (ipc_applies(comm, *cu, call, &why)) {
    return true;
  }
  if (why_not) *why_not = why;
  return false;
}

Status run_cuda_ipc(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where,
                    bool from_stream) {
  DeviceState *st = nullptr;
  Status s = device_state(comm, &st);
  if (!s.ok())
    return s.prefix(
        strprintf("rank %d: %s of device buffers: ", comm->rank, collective_name(call.collective)));
  IpcAllreduce runner(st, where, from_stream);
  s = run_host_collective(comm, call, runner);
  if (!runner.fell_back()) return s;
  log_path(st, call, "staged through pinned host memory: " + runner.fallback_reason());
  return run_staged(comm, call, where, from_stream);
}

Status prepare_ipc_call(ddl_comm *comm, const CollectiveCall &call, const PointerInfo &where) {
  DeviceState *st = nullptr;
  DDL_RETURN_IF_ERROR(device_state(comm, &st));
  std::string why;
  if (!ipc_applies(comm, *st->cu, call, &why)) return Status::Ok();
  ScopedContext scope(*st->cu, where.context);
  // A state for another context is remade (its allocations closed) only while no call of
  // the progress thread can be using it; else this call is staged (the vote).
  const bool idle = !comm->progress || comm->progress->idle();
  if (st->ipc && st->ipc->context != where.context && !idle) return Status::Ok();
  IpcState *ipc = nullptr;
  DDL_RETURN_IF_ERROR(prepare_ipc(comm, st, where.context, sizeof(IpcRecord), &ipc));
  // A failed load stages the calls (the vote) instead of failing them here.
  const Status loaded = load_device_kernels(*st->cu, where.context);
  if (!loaded.ok()) DDL_DEBUG("rank %d: %s", comm->rank, loaded.message().c_str());
  open_pending(comm, ipc);
  return Status::Ok();
}

void destroy_ipc(DeviceState *st) {
  if (!st->ipc) return;
  destroy_ipc_state(*st->cu, st->ipc);
  delete st->ipc;
  st->ipc = nullptr;
}

}  // namespace device
}  // namespace ddl

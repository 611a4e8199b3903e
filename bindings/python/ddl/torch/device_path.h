// CUDA tensors in the "ddl" backend. Included by backend.cpp only.
//
// Written against torch's device-generic interfaces (c10's DeviceGuardImpl, c10::Event,
// c10::Stream::native_handle) rather than c10::cuda, so that the backend compiles without
// CUDA's headers: one source for CPU-only and CUDA torch, built the same way on both.
//
// Two ways, as ProcessGroupNCCL and gloo do for what each supports:
// - Stream-ordered (allreduce, broadcast, allgather, reduce_scatter, alltoall(v), reduce,
//   gather, scatter): each runs through libddl's *_stream call (the last four host-synchronous
//   in libddl's every mode). A blocking one
//   (dist.all_reduce(t)) runs on the caller's current stream itself, which later work on it
//   then follows, with no event of ours. An asynchronous one (async_op=True, DDP's buckets)
//   runs on a side stream of the tensor's device that first waits for the caller's current
//   stream, so that it sees what the caller queued before it; an event recorded after it is
//   the Work: wait() makes the caller's
//   current stream wait for it (the host goes on), synchronize() blocks the host, and
//   isCompleted() polls it. Its tensors are recorded on the side stream in the caching
//   allocator, so that their memory is not handed out again before the side stream has passed
//   the call. How much the host waits is libddl's mode (ddl.h: host-synchronous by default).
// - Staged (send and receive: libddl has no device path for them yet): the CUDA tensors are
//   copied to pinned host memory after the caller's
//   stream's earlier work, the host collective runs as for CPU tensors, and the results are
//   copied back when it ends (at the call, or in the Work's wait). The host waits for the
//   copies.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "libddl_api.h"

namespace ddl_torch {

inline bool on_device(const at::Tensor& t) { return t.defined() && !t.device().is_cpu(); }

// The first of a call's buffers that is not in host memory (then the call is on that device).
inline const at::Tensor* first_on_device(const std::vector<at::Tensor>& buffers) {
  for (const auto& t : buffers)
    if (on_device(t)) return &t;
  return nullptr;
}

// A stream-ordered collective: done when the side stream passes its end event. It failed at
// the call or not at all (libddl reports a stream-ordered call's later failure at the
// communicator's next call).
class DeviceWork : public c10d::Work {
 public:
  DeviceWork(int rank, c10d::OpType type, const c10::Stream& side, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        device_(side.device()),
        side_(side),
        end_(side.device_type()),
        outputs_(std::move(outputs)) {
    end_.record(side);
  }

  bool isCompleted() override { return end_.query(); }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    c10::impl::VirtualGuardImpl impl(device_.type());
    end_.block(impl.getStream(device_));
    return true;
  }
  void synchronize() override { end_.synchronize(); }
  // Made when first asked for (DDP's comm hooks ask; most callers never do): a device-aware
  // Future records its own events on the current stream when completed, so the side stream
  // is made current for that, and then() callbacks and waiters wait for the collective (and
  // for anything queued on the side stream since, which only orders more).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> g(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device_});
      c10::StreamGuard on_side(side_);
      future_->markCompleted(c10::IValue(outputs_));
    }
    return future_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }

  void synchronize_host() const { end_.synchronize(); }

 private:
  c10::Device device_;
  c10::Stream side_;
  c10::Event end_;
  std::vector<at::Tensor> outputs_;
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The side stream of each device (one per backend and device, from torch's pool, as
// ProcessGroupNCCL keeps one per device): ddl's calls on it run in the order they were
// issued, beside the caller's compute.
class SideStreams {
 public:
  c10::Stream of(const c10::Device& device) {
    auto it = streams_.find(device.index());
    if (it != streams_.end()) return it->second;
    c10::impl::VirtualGuardImpl impl(device.type());
    c10::Stream s = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
    streams_.emplace(device.index(), s);
    return s;
  }

 private:
  std::map<c10::DeviceIndex, c10::Stream> streams_;
};

// A blocking call (asyncOp false: the caller waits at once): `call(stream)` (a libddl
// *_stream call) and then `after` on the caller's current stream itself, which then is
// ordered after the collective as a side stream's Work would make it, without the events.
inline int run_on_caller_stream(const c10::Device& device, const std::function<void()>& after,
                                const std::function<int(void*)>& call) {
  c10::DeviceGuard on_this_device(device);
  c10::impl::VirtualGuardImpl impl(device.type());
  const int rc = call(impl.getStream(device).native_handle());
  if (rc == 0 && after) after();
  return rc;
}

// Runs `call(stream)` on the side stream of `device`, after the caller's current stream's
// work; then `after` (copies into the caller's tensors) on the side stream too. Returns
// libddl's result and, on success, the Work (whose end is recorded after `after`).
inline int run_on_side_stream(SideStreams& streams, int rank, c10d::OpType type,
                              const c10::Device& device, const std::vector<at::Tensor>& outputs,
                              const std::vector<at::Tensor>& keep,
                              const std::function<void()>& after,
                              const std::function<int(void*)>& call,
                              c10::intrusive_ptr<DeviceWork>* work) {
  c10::DeviceGuard on_this_device(device);
  c10::impl::VirtualGuardImpl impl(device.type());
  const c10::Stream caller = impl.getStream(device);
  const c10::Stream side = streams.of(device);
  c10::Event ready(device.type());
  ready.record(caller);
  ready.block(side);
  const int rc = call(side.native_handle());
  if (rc) return rc;
  c10::StreamGuard on_side(side);
  if (after) after();
  for (const auto* list : {&keep, &outputs})
    for (const auto& t : *list)
      if (on_device(t)) impl.recordDataPtrOnStream(t.storage().data_ptr(), side);
  *work = c10::make_intrusive<DeviceWork>(rank, type, side, outputs);
  return 0;
}

// `work` run later (a Work's completion, on whatever thread) on the current stream that
// `t`'s device has now (the caller's), the host waiting for it, so that what the caller
// queues after the call, or after waiting for its Work, follows it. As it is for CPU tensors.
inline std::function<void()> on_callers_stream(const at::Tensor& t, std::function<void()> work) {
  if (!on_device(t) || !work) return work;
  c10::impl::VirtualGuardImpl impl(t.device().type());
  const c10::Stream caller = impl.getStream(t.device());
  return [caller, work = std::move(work)] {
    c10::StreamGuard on_caller(caller);
    work();
    caller.synchronize();
  };
}

// Pinned host copies of a call's CUDA tensors, for the staged calls: stage() swaps each one
// for its copy (inputs copied in at once, on the caller's current stream), restore() puts the
// caller's tensors back (also when the call throws), copy_back() copies the outputs' results
// into them on the caller's stream.
class Staging {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() { restore(); }

  void stage(at::Tensor& t, bool input, bool output) {
    if (!on_device(t)) return;
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    if (input) host.copy_(t);  // waits for the caller's stream's earlier work
    swapped_.push_back({&t, t});
    if (output) outputs_.push_back({t, host});
    t = host;
  }
  void stage(std::vector<at::Tensor>& ts, bool input, bool output) {
    for (auto& t : ts) stage(t, input, output);
  }
  bool any() const { return !swapped_.empty(); }
  void restore() {
    for (auto& [where, original] : swapped_) *where = original;
    swapped_.clear();
  }
  std::vector<at::Tensor> originals() const {
    std::vector<at::Tensor> out;
    for (const auto& [original, host] : outputs_) out.push_back(original);
    return out;
  }
  // Copies each output back into the caller's tensor, on the caller's stream (as it was at
  // the call), the host waiting for the copies.
  std::function<void()> copy_back() const {
    if (outputs_.empty()) return nullptr;
    return on_callers_stream(outputs_.front().first, [outputs = outputs_]() mutable {
      for (auto& [original, host] : outputs) original.copy_(host);
    });
  }

 private:
  std::vector<std::pair<at::Tensor*, at::Tensor>> swapped_;
  std::vector<std::pair<at::Tensor, at::Tensor>> outputs_;  // (the caller's, the host copy)
};

}  // namespace ddl_torch

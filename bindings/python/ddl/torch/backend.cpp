// The "ddl" backend of torch.distributed: a c10d::Backend that hands CPU tensors to libddl.
//
// Written in C++ rather than as a Python subclass of torch's Backend because the Python route
// costs a GIL round trip, argument conversion and a Python Work object per collective (measured
// in bench/torch_vs_gloo.py: tens of microseconds at 8 B on these machines), and because DDP
// waits on the Future of a Work from C++: here a C++ thread completes it without the GIL.
//
// The communicator is made by the ddl Python package (ddl.Communicator); this file receives its
// ddl_comm_t as an integer and resolves libddl's functions with dlsym from the library the
// package already loaded, so that both use one copy of libddl and nothing here links to it.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include "device_path.h"
#include "direct_ops.h"  // torch.ops.ddl.all_reduce_
#include "libddl_api.h"
#include "work.h"

namespace ddl_torch {

class DdlBackend : public c10d::Backend {
 public:
  DdlBackend(int rank, int size, uintptr_t comm, const std::string& library, py::object owner)
      : c10d::Backend(rank, size),
        comm_(reinterpret_cast<Comm>(comm)),
        api_(std::make_shared<const Api>(Api::load(library))),
        async_(api_->nonblocking()),
        completer_(std::make_shared<Completer>()),
        owner_(std::move(owner)),
        library_(library) {
    enable_direct_ops(api_);
  }

  ~DdlBackend() override {
    // The completer may need the GIL to finish (a Future's Python callback, the last reference
    // to a tensor's Python object): never wait for it while holding the GIL.
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      completer_->stop();
    } else {
      completer_->stop();
    }
    // owner_ keeps the Python ddl.Communicator (and so comm_) alive; drop it with the GIL.
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      owner_ = py::object();
    } else {
      owner_.release();
    }
  }

  const std::string getBackendName() const override { return "ddl"; }

  bool nonblocking() const { return async_; }

  void abort() override { api_->comm_abort(comm_); }

  // SUCCESS until a call failed in a way that leaves the group unusable (then shrink it).
  c10d::ErrorType getError() override { return completer_->error(); }

  // The group's life after a failure and its parts (membership.h): shutdown, split, shrink.
  void shutdown() override;
  // The ddl.Communicator behind this backend (ddl.torch.shrink_group agrees on it).
  py::object communicator() const { return owner_; }
  // DDP's gradient buckets in ddl's host-shareable memory (ddl_mem_alloc), when torch's
  // Reducer asks for them (DDP_DISABLE_COMM_MEM=0): the ranks of a host then reduce them in
  // place, reading each other's buckets, instead of copying them through the kernel.
  bool supportsTensorAlloc(c10::DeviceIndex device) override {
    return device < 0 && api_->mem_alloc && api_->mem_free;  // CPU tensors only
  }
  at::Tensor allocateTensor(long size, at::TensorOptions options) override;
  int64_t tensors_allocated() const { return tensors_allocated_.load(); }
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  // A backend on a ddl.Communicator made from this one's (split, shrink), which it keeps alive.
  c10::intrusive_ptr<c10d::Backend> adopt(py::object comm) const;

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (tensors.size() != 1) {
      c10d::AllreduceCoalescedOptions copts;
      copts.reduceOp = opts.reduceOp;
      copts.asyncOp = opts.asyncOp;
      return allreduce_coalesced(tensors, copts);
    }
    at::Tensor& t = tensors[0];
    check_tensor(t, "allreduce's tensor");
    std::vector<std::function<void()>> back;
    at::Tensor buf = contiguous_for(t, back, true);
    premultiplied(opts.reduceOp, buf, true);
    int type = ddl_type(buf), op = ddl_op(opts.reduceOp, buf);
    void* p = buf.data_ptr();
    size_t n = buf.numel();
    return run(
        c10d::OpType::ALLREDUCE, opts.asyncOp, tensors, {buf}, all_of(std::move(back)),
        [&] { return api_->allreduce(p, p, n, type, op, comm_); },
        [&](Req* r) { return api_->iallreduce(p, p, n, type, op, comm_, r); },
        [&](void* st) { return api_->allreduce_stream(p, p, n, type, op, comm_, st); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    // One ddl group: ddl fuses the small allreduces into one buffer (DDL_FUSION_BYTES).
    std::vector<std::function<void()>> back;
    std::vector<at::Tensor> keep;
    std::vector<std::function<int(Req*)>> calls;
    std::vector<std::function<int(void*)>> on_stream;
    for (auto& t : tensors) {
      check_tensor(t, "allreduce_coalesced's tensor");
      at::Tensor buf = contiguous_for(t, back, true);
      premultiplied(opts.reduceOp, buf, true);
      int type = ddl_type(buf), op = ddl_op(opts.reduceOp, buf);
      void* p = buf.data_ptr();
      size_t n = buf.numel();
      keep.push_back(buf);
      calls.push_back([this, p, n, type, op](Req* r) {
        return api_->iallreduce(p, p, n, type, op, comm_, r);
      });
      on_stream.push_back([this, p, n, type, op](void* st) {
        return api_->allreduce_stream(p, p, n, type, op, comm_, st);
      });
    }
    return run_group(c10d::OpType::ALLREDUCE_COALESCED, opts.asyncOp, tensors, keep,
                     all_of(std::move(back)), calls, on_stream);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0,
                "ddl backend: broadcast takes one tensor per process");
    at::Tensor& t = tensors[0];
    check_tensor(t, "broadcast's tensor");
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ddl backend: broadcast root ",
                opts.rootRank, " is not a rank of this group of ", size_);
    std::vector<std::function<void()>> back;
    at::Tensor buf = contiguous_for(t, back, true);
    int type = ddl_type(buf), root = static_cast<int>(opts.rootRank);
    void* p = buf.data_ptr();
    size_t n = buf.numel();
    return run(
        c10d::OpType::BROADCAST, opts.asyncOp, tensors, {buf}, all_of(std::move(back)),
        [&] { return api_->broadcast(p, n, type, root, comm_); },
        [&](Req* r) { return api_->ibroadcast(p, n, type, root, comm_, r); },
        [&](void* st) { return api_->broadcast_stream(p, n, type, root, comm_, st); });
  }

  // The list form: every rank's tensor into its own output tensor, through one flat buffer.
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "ddl backend: allgather takes one tensor per process");
    at::Tensor in = inputs[0];
    check_tensor(in, "allgather's input");
    auto& outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "ddl backend: allgather needs ", size_,
                " output tensors, got ", outs.size());
    bool even = true;
    for (auto& o : outs) {
      check_tensor(o, "allgather's output");
      TORCH_CHECK(o.scalar_type() == in.scalar_type(),
                  "ddl backend: allgather's outputs must have the input's dtype");
      even = even && o.numel() == in.numel();
    }
    if (!even) return uneven_allgather(opts, in.contiguous(), outs);
    std::vector<std::vector<at::Tensor>> by_rank;
    for (auto& o : outs) by_rank.push_back({o});
    return flat_allgather(c10d::OpType::ALLGATHER, opts, in.contiguous(), std::move(by_rank));
  }

  // all_gather_coalesced, the list-of-lists form: outputs[r][i] gets rank r's inputs[i]. The
  // inputs go into one flat buffer, which one allgather moves (as gloo does).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(!inputs.empty(), "ddl backend: all_gather_coalesced needs input tensors");
    TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "ddl backend: all_gather_coalesced "
                "needs one output list per rank (", size_, "), got ", outputs.size());
    std::vector<at::Tensor> flat_inputs;
    for (auto& t : inputs) {
      check_tensor(t, "all_gather_coalesced's input");
      TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type() && t.device() == inputs[0].device(),
                  "ddl backend: all_gather_coalesced's inputs must share one dtype and device");
      flat_inputs.push_back(t.reshape({-1}));
    }
    for (size_t r = 0; r < outputs.size(); ++r) {
      TORCH_CHECK(outputs[r].size() == inputs.size(), "ddl backend: all_gather_coalesced's "
                  "output list ", r, " has ", outputs[r].size(), " tensors for ", inputs.size(),
                  " inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        at::Tensor& o = outputs[r][i];
        check_tensor(o, "all_gather_coalesced's output");
        TORCH_CHECK(o.numel() == inputs[i].numel() && o.scalar_type() == inputs[i].scalar_type(),
                    "ddl backend: all_gather_coalesced's output [", r, "][", i,
                    "] must match input ", i, "'s size and dtype");
      }
    }
    return flat_allgather(c10d::OpType::ALLGATHER_COALESCED, opts, at::cat(flat_inputs), outputs);
  }

  // One allgather of a contiguous `in` into a flat buffer of every rank's `in`, then copied
  // out: by_rank[r]'s tensors, one after the other, get rank r's part (the list forms).
  c10::intrusive_ptr<c10d::Work> flat_allgather(c10d::OpType type_of_op,
                                                const c10d::AllgatherOptions& opts, at::Tensor in,
                                                std::vector<std::vector<at::Tensor>> by_rank) {
    const int64_t n = in.numel();
    at::Tensor flat = at::empty({n * size_}, in.options());
    std::vector<at::Tensor> targets;
    for (auto& tensors : by_rank) targets.insert(targets.end(), tensors.begin(), tensors.end());
    auto copy_out = [by_rank, flat, n]() mutable {
      for (size_t r = 0; r < by_rank.size(); ++r) {
        int64_t offset = static_cast<int64_t>(r) * n;
        for (auto& o : by_rank[r]) {
          o.copy_(flat.narrow(0, offset, o.numel()).view(o.sizes()));
          offset += o.numel();
        }
      }
    };
    int type = ddl_type(in);
    const void* s = in.data_ptr();
    void* r = flat.data_ptr();
    return run(
        type_of_op, opts.asyncOp, targets, {in, flat}, copy_out,
        [&] { return api_->allgather(s, r, n, type, comm_); },
        [&](Req* q) { return api_->iallgather(s, r, n, type, comm_, q); },
        [&](void* st) { return api_->allgather_stream(s, r, n, type, comm_, st); });
  }

  // all_gather_into_tensor: output holds size * input.numel() elements, in rank order. The
  // names torch has had since 2.x (newer torch forwards all_gather_single and
  // all_gather_single_coalesced to them), so that one source builds against every torch.
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    std::vector<at::Tensor> outs{output}, ins{input};
    return gather_tensors(outs, ins, opts, c10d::OpType::_ALLGATHER_BASE);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return gather_tensors(outputs, inputs, opts, c10d::OpType::ALLGATHER_COALESCED);
  }

  // The list form: inputs[0] holds one tensor per rank; rank r gets the reduction of the r-th.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "ddl backend: reduce_scatter takes one tensor per process");
    auto& ins = inputs[0];
    TORCH_CHECK(static_cast<int>(ins.size()) == size_, "ddl backend: reduce_scatter needs ",
                size_, " input tensors, got ", ins.size());
    std::vector<at::Tensor> flat_parts;
    bool even = true;
    for (auto& t : ins) {
      check_tensor(t, "reduce_scatter's input");
      TORCH_CHECK(t.scalar_type() == outputs[0].scalar_type(),
                  "ddl backend: reduce_scatter's inputs must have the output's dtype");
      even = even && t.numel() == outputs[0].numel();
      flat_parts.push_back(t.reshape({-1}));
    }
    at::Tensor flat = at::cat(flat_parts);  // a fresh tensor: PREMUL_SUM may scale it in place
    if (!even) return uneven_reduce_scatter(opts, flat, ins, outputs[0]);
    std::vector<at::Tensor> outs{outputs[0]}, flats{flat};
    return scatter_tensors(outs, flats, opts, c10d::OpType::REDUCE_SCATTER, true);
  }

  // reduce_scatter_tensor: input holds size * output.numel() elements. The names every torch
  // 2.x has (newer torch forwards reduce_scatter_single(_coalesced) to them).
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    std::vector<at::Tensor> outs{output}, ins{input};
    return scatter_tensors(outs, ins, opts, c10d::OpType::_REDUCE_SCATTER_BASE, false);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return scatter_tensors(outputs, inputs, opts, c10d::OpType::_REDUCE_SCATTER_BASE, false);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return run(
        c10d::OpType::BARRIER, opts.asyncOp, {}, {}, nullptr, [&] { return api_->barrier(comm_); },
        [&](Req* r) { return api_->ibarrier(comm_, r); });
  }

  // ---- alltoall, reduce, gather, scatter, send and receive, and coalescing

  // all_gather and reduce_scatter of tensors of different sizes: uneven_calls.h.
  c10::intrusive_ptr<c10d::Work> uneven_allgather(const c10d::AllgatherOptions& opts,
                                                  at::Tensor in, std::vector<at::Tensor> outs);
  c10::intrusive_ptr<c10d::Work> uneven_reduce_scatter(const c10d::ReduceScatterOptions& opts,
                                                       at::Tensor flat,
                                                       const std::vector<at::Tensor>& ins,
                                                       at::Tensor& output);

  // alltoall(v), point to point, reduce, gather and scatter: rooted_calls.h.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  // alltoall_base's work, then `then` (the list form's copies out of its flat output).
  c10::intrusive_ptr<c10d::Work> alltoall_flat(at::Tensor& output, at::Tensor& input,
                                               const std::vector<int64_t>& outputSplitSizes,
                                               const std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts,
                                               std::function<void()> then);
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;

  // torch's _coalescing_manager (batch_isend_irecv, coalesced collectives): the calls between
  // start and end form one ddl group, so that a batch's sends and receives are posted together
  // and never wait for each other. endCoalescing's Work is done when all of them are. The
  // group opens at the batch's first host call (open_group): CUDA tensors' stream-ordered
  // calls cannot be grouped (ddl.h), and run at once on the side stream instead.
  bool supportsCoalescing() const override { return async_; }
  void startCoalescing() override {
    // A batch whose call threw (torch's _coalescing_manager then never ends it) is dropped.
    if (coalescing_) abandon_batch();
    coalescing_ = true;
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TORCH_CHECK(coalescing_, "ddl backend: endCoalescing without startCoalescing");
    coalescing_ = false;
    auto w = c10::make_intrusive<DdlWork>(rank_, c10d::OpType::COALESCED, api_,
                                          std::vector<at::Tensor>(), completer_);
    w->parts = std::move(coalesced_);
    coalesced_.clear();
    // Stream-ordered calls ran at once, in order on their side stream: the last one's end
    // is all of theirs.
    c10::intrusive_ptr<DeviceWork> on_stream = std::move(coalesced_on_stream_);
    coalesced_on_stream_.reset();
    const int rc = group_open_ ? api_->group_end() : 0;
    group_open_ = false;
    if (rc) {
      for (auto& part : w->parts) part->complete();  // their requests end with the group
      completer_->note_failure(rc);
      C10_THROW_ERROR(DistBackendError, api_->message(rc, nullptr, "coalesced calls"));
    }
    if (on_stream && w->parts.empty()) return on_stream;
    if (on_stream) w->after = [on_stream] { on_stream->synchronize_host(); };
    return w;
  }

 private:
  // Runs one collective: blocking when the caller waits at once (opts.asyncOp false, as
  // dist.all_reduce(t) sets it), else nonblocking with a Work that owns the request.
  // CUDA tensors go to `on_stream` instead (device_path.h).
  template <class Blocking, class Nonblocking>
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, bool async, std::vector<at::Tensor> outputs,
                                     std::vector<at::Tensor> keep, std::function<void()> after,
                                     Blocking blocking, Nonblocking nonblocking,
                                     std::function<int(void*)> on_stream = nullptr) {
    if (const at::Tensor* t = first_on_device(keep))
      return run_on_stream(type, async, t->device(), std::move(outputs), std::move(keep),
                           std::move(after), on_stream);
    if (coalescing_) async = true;  // recorded in the group: its results come at the end
    if (!async || !async_) {
      int rc = blocking();
      if (rc) throw_failure(rc, type);
      if (after) after();
      // torch's Python API treats a null Work of a call made with asyncOp false as "already
      // synchronised" and skips work.wait(): one Python-to-C++ call less per collective.
      if (!async) return {};
      return DdlWork::finished(rank_, type, std::move(outputs));
    }
    open_group(type);
    Req req = nullptr;
    int rc = nonblocking(&req);
    if (rc) throw_failure(rc, type);
    auto w = c10::make_intrusive<DdlWork>(rank_, type, api_, std::move(outputs), completer_);
    w->requests.push_back(req);
    w->keep = std::move(keep);
    w->after = std::move(after);
    if (coalescing_) coalesced_.push_back(w);
    return w;
  }

  // Several collectives issued together in one ddl group; one Work for all of them.
  c10::intrusive_ptr<c10d::Work> run_group(c10d::OpType type, bool async,
                                           std::vector<at::Tensor> outputs,
                                           std::vector<at::Tensor> keep,
                                           std::function<void()> after,
                                           const std::vector<std::function<int(Req*)>>& calls,
                                           const std::vector<std::function<int(void*)>>& on_stream) {
    if (const at::Tensor* t = first_on_device(keep)) {
      // One after the other on the side stream: the stream orders them.
      return run_on_stream(type, async, t->device(), std::move(outputs), std::move(keep),
                           std::move(after), [&on_stream](void* st) {
                             for (auto& call : on_stream)
                               if (int rc = call(st)) return rc;
                             return 0;
                           });
    }
    TORCH_CHECK(async_, "ddl backend: coalesced collectives need a libddl with nonblocking "
                        "collectives and groups (ddl_group_start); rebuild ddl");
    open_group(type);
    auto w = c10::make_intrusive<DdlWork>(rank_, type, api_, std::move(outputs), completer_);
    int rc = api_->group_start();
    if (rc) throw_failure(rc, type);
    int failed = 0;
    for (auto& call : calls) {
      Req req = nullptr;
      failed = call(&req);
      if (failed) break;
      w->requests.push_back(req);
    }
    // Always end the group, so that this thread does not go on recording.
    std::string words = failed ? api_->message(failed, comm_, "coalesced collective") : "";
    rc = api_->group_end();
    if (failed || rc) {
      for (Req r : w->requests) {
        api_->wait(r);
        api_->request_free(r);
      }
      w->requests.clear();
      if (!failed) words = api_->message(rc, nullptr, "coalesced collective");
      C10_THROW_ERROR(DistBackendError, words);
    }
    w->keep = std::move(keep);
    w->after = std::move(after);
    if (coalescing_) {  // inside the caller's group: nothing ran yet
      coalesced_.push_back(w);
      return w;
    }
    if (!async) {
      w->wait(std::chrono::milliseconds(0));
      return {};
    }
    return w;
  }

  // CUDA tensors (device_calls.h): stream-ordered, or staged through pinned host memory.
  c10::intrusive_ptr<c10d::Work> run_on_stream(c10d::OpType type, bool async,
                                               const c10::Device& device,
                                               std::vector<at::Tensor> outputs,
                                               std::vector<at::Tensor> keep,
                                               std::function<void()> after,
                                               const std::function<int(void*)>& call);
  template <class HostCall>
  c10::intrusive_ptr<c10d::Work> staged(Staging& staging, HostCall host_call);

  c10::intrusive_ptr<c10d::Work> gather_tensors(std::vector<at::Tensor>& outputs,
                                                std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions& opts,
                                                c10d::OpType type) {
    TORCH_CHECK(outputs.size() == inputs.size(), "ddl backend: all_gather_into_tensor needs "
                                                 "as many outputs as inputs");
    std::vector<std::function<void()>> back;
    std::vector<at::Tensor> keep;
    std::vector<std::function<int(Req*)>> calls;
    std::vector<std::function<int(void*)>> on_stream;
    std::function<int()> single;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "all_gather_into_tensor's input");
      check_tensor(outputs[i], "all_gather_into_tensor's output");
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                      outputs[i].scalar_type() == inputs[i].scalar_type(),
                  "ddl backend: all_gather_into_tensor's output must hold ", size_,
                  " x the input's elements (", inputs[i].numel() * size_, "), of its dtype; it "
                  "holds ", outputs[i].numel());
      at::Tensor in = inputs[i].contiguous();
      at::Tensor out = contiguous_for(outputs[i], back, true);
      keep.push_back(in);
      keep.push_back(out);
      const void* s = in.data_ptr();
      void* r = out.data_ptr();
      size_t n = in.numel();
      int dt = ddl_type(in);
      calls.push_back(
          [this, s, r, n, dt](Req* q) { return api_->iallgather(s, r, n, dt, comm_, q); });
      single = [this, s, r, n, dt] { return api_->allgather(s, r, n, dt, comm_); };
      on_stream.push_back([this, s, r, n, dt](void* st) {
        return api_->allgather_stream(s, r, n, dt, comm_, st);
      });
    }
    if (calls.size() == 1)
      return run(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), single, calls[0],
                 on_stream[0]);
    return run_group(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), calls, on_stream);
  }

  c10::intrusive_ptr<c10d::Work> scatter_tensors(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::ReduceScatterOptions& opts,
                                                 c10d::OpType type, bool inputs_are_ours) {
    TORCH_CHECK(outputs.size() == inputs.size(), "ddl backend: reduce_scatter_tensor needs "
                                                 "as many outputs as inputs");
    std::vector<std::function<void()>> back;
    std::vector<at::Tensor> keep;
    std::vector<std::function<int(Req*)>> calls;
    std::vector<std::function<int(void*)>> on_stream;
    std::function<int()> single;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "reduce_scatter_tensor's input");
      check_tensor(outputs[i], "reduce_scatter_tensor's output");
      TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                      outputs[i].scalar_type() == inputs[i].scalar_type(),
                  "ddl backend: reduce_scatter_tensor's input must hold ", size_,
                  " x the output's elements (", outputs[i].numel() * size_, "), of its dtype; "
                  "it holds ", inputs[i].numel());
      at::Tensor in = inputs[i].contiguous();
      // PREMUL_SUM scales a copy: the caller's input stays as it was.
      in = premultiplied(opts.reduceOp, in, inputs_are_ours);
      at::Tensor out = contiguous_for(outputs[i], back, true);
      keep.push_back(in);
      keep.push_back(out);
      const void* s = in.data_ptr();
      void* r = out.data_ptr();
      size_t n = out.numel();
      int dt = ddl_type(in), op = ddl_op(opts.reduceOp, in);
      calls.push_back([this, s, r, n, dt, op](Req* q) {
        return api_->ireduce_scatter(s, r, n, dt, op, comm_, q);
      });
      single = [this, s, r, n, dt, op] { return api_->reduce_scatter(s, r, n, dt, op, comm_); };
      on_stream.push_back([this, s, r, n, dt, op](void* st) {
        return api_->reduce_scatter_stream(s, r, n, dt, op, comm_, st);
      });
    }
    if (calls.size() == 1)
      return run(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), single, calls[0],
                 on_stream[0]);
    return run_group(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), calls, on_stream);
  }

  // Opens ddl's group for a coalesced batch at its first host call (startCoalescing).
  void open_group(c10d::OpType type) {
    if (!coalescing_ || group_open_) return;
    const int rc = api_->group_start();
    if (rc) throw_failure(rc, type);
    group_open_ = true;
  }

  // Ends a coalesced batch that cannot go on: ddl's group is per thread, and one left open
  // would swallow this thread's later calls on every communicator.
  void abandon_batch() {
    if (group_open_) api_->group_end();
    for (auto& part : coalesced_) part->complete();
    coalesced_.clear();
    coalesced_on_stream_.reset();
    coalescing_ = group_open_ = false;
  }

  [[noreturn]] void throw_failure(int rc, c10d::OpType type) {
    if (coalescing_) abandon_batch();
    completer_->note_failure(rc);
    C10_THROW_ERROR(DistBackendError,
                    api_->message(rc, comm_, c10d::opTypeToString(type).c_str()));
  }

  // The nonblocking call `start` of a point-to-point transfer or rooted collective, in a Work
  // (run's nonblocking path, with the group of startCoalescing when one is open).
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int srcRank, int tag);
  c10::intrusive_ptr<c10d::Work> start(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> keep, std::function<void()> after,
                                       const std::function<int(Req*)>& start_call) {
    return run(type, true, std::move(outputs), std::move(keep), std::move(after),
               [] { return 0; }, start_call);
  }
  void need(bool have, const char* what) const {
    TORCH_CHECK(async_ && have, "ddl backend: ", what, " needs a libddl with it (",
                "ddl_i", what, "); rebuild ddl from a current checkout");
  }
  void check_root(int64_t root, const char* what) const {
    TORCH_CHECK(root >= 0 && root < size_, "ddl backend: ", what, " root ", root,
                " is not a rank of this group of ", size_);
  }
  // Tags other than 0 (and receives from any source) need ddl_isend_tag/ddl_irecv_tag.
  void check_tag(int tag, const char* what) const {
    TORCH_CHECK(tag >= 0 && tag <= kLargestTag, "ddl backend: ", what, " with tag ", tag,
                ": tags are 0..", kLargestTag);
    TORCH_CHECK(api_->isend_tag || tag == 0, "ddl backend: ", what, " with tag ", tag,
                " needs a libddl with ddl_isend_tag; rebuild ddl from a current checkout");
  }
  void check_any_source() const {
    TORCH_CHECK(api_->irecv_tag, "ddl backend: recv from any source needs a libddl with ",
                "ddl_irecv_tag; rebuild ddl from a current checkout");
  }
  void check_peer(int peer, const char* what) const {
    TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "ddl backend: ", what, " peer ", peer,
                " is not another rank of this group of ", size_, " (this is rank ", rank_, ")");
  }
  Comm comm_;
  std::shared_ptr<const Api> api_;
  std::atomic<int64_t> tensors_allocated_{0};  // by allocateTensor (DDP's buckets)
  bool async_;
  std::shared_ptr<Completer> completer_;
  py::object owner_;
  std::string library_;  // libddl's path, for the backends of shrunk groups
  // Between startCoalescing and endCoalescing: every call is recorded in one ddl group and
  // its Work kept here for the Work endCoalescing returns.
  bool coalescing_ = false;
  bool group_open_ = false;  // ddl_group_start called for this batch (open_group)
  std::vector<c10::intrusive_ptr<DdlWork>> coalesced_;
  c10::intrusive_ptr<DeviceWork> coalesced_on_stream_;  // the last stream-ordered call in it
  SideStreams streams_;
};

}  // namespace ddl_torch

inline at::Tensor ddl_torch::DdlBackend::allocateTensor(long size, at::TensorOptions options) {
  TORCH_CHECK(!options.has_device() || options.device().is_cpu(),
              "ddl backend: allocateTensor makes CPU tensors only, not ", options.device());
  TORCH_CHECK(size >= 0, "ddl backend: allocateTensor of ", size, " elements");
  const size_t bytes = static_cast<size_t>(size) * options.dtype().itemsize();
  void* p = nullptr;
  const int rc = api_->mem_alloc(&p, bytes);
  TORCH_CHECK(rc == 0, "ddl backend: allocateTensor of ", bytes, " B: ", api_->last_error(nullptr));
  ++tensors_allocated_;
  std::shared_ptr<const Api> api = api_;  // the memory may outlive this backend
  return at::from_blob(
      p, {size}, [api](void* q) { api->mem_free(q); }, options.device(at::kCPU));
}

#include "device_calls.h"  // DdlBackend's calls on CUDA tensors
#include "rooted_calls.h"  // alltoall, send, recv, reduce, gather, scatter
#include "uneven_calls.h"  // all_gather and reduce_scatter of tensors of different sizes
#include "membership.h"    // DdlBackend's shutdown, split and shrink

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ddl's torch.distributed backend (see ddl/torch/__init__.py)";
  // c10d::Backend is registered by torch._C; import it so pybind11 knows the base class.
  py::module_::import("torch.distributed");
  py::class_<ddl_torch::DdlBackend, c10d::Backend, c10::intrusive_ptr<ddl_torch::DdlBackend>>(m, "DdlBackend")
      .def(py::init<int, int, uintptr_t, const std::string&, py::object>(), py::arg("rank"),
           py::arg("size"), py::arg("comm"), py::arg("library"), py::arg("owner"))
      .def_property_readonly("communicator", &ddl_torch::DdlBackend::communicator,
                             "the ddl.Communicator this backend runs on")
      .def_property_readonly("tensors_allocated", &ddl_torch::DdlBackend::tensors_allocated,
                             "tensors made in ddl's memory for torch (DDP's buckets)")
      .def_property_readonly("nonblocking", &ddl_torch::DdlBackend::nonblocking,
                             "whether libddl has nonblocking collectives (else every call blocks)");
  // torch.ops.ddl.all_reduce_'s kernel without torch's operator call from Python (parsing the
  // arguments against the schema, the dispatcher's boxed path: ~1.3 us of a 2.4 us call at 8
  // B), for ddl.torch.all_reduce_ outside torch.compile. The GIL is released during the call.
  m.def(
      "all_reduce_",
      [](at::Tensor tensor, int64_t comm, int64_t op) {
        try {
          ddl_torch::all_reduce_direct(tensor, comm, op);
        } catch (const c10::Error& e) {
          throw std::runtime_error(e.what_without_backtrace());
        }
      },
      py::arg("tensor"), py::arg("comm"), py::arg("op"), py::call_guard<py::gil_scoped_release>());
}

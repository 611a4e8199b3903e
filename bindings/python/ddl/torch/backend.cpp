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

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include "libddl_api.h"

namespace ddl_torch {

class Completer;

// One collective (or a coalesced batch of them) in flight: its ddl requests, the tensors that
// must live until it ends, what to copy afterwards, and the Future torch's hooks wait on.
class DdlWork : public c10d::Work {
 public:
  DdlWork(int rank, c10d::OpType type, std::shared_ptr<const Api> api,
          std::vector<at::Tensor> outputs, std::shared_ptr<Completer> completer)
      : c10d::Work(rank, type),
        api_(std::move(api)),
        outputs_(std::move(outputs)),
        completer_(std::move(completer)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // A collective that already ran (blocking): finished, with its Future completed.
  static c10::intrusive_ptr<DdlWork> finished(int rank, c10d::OpType type,
                                              std::vector<at::Tensor> outputs) {
    auto w = c10::make_intrusive<DdlWork>(rank, type, nullptr, std::move(outputs), nullptr);
    w->done_ = true;
    w->publish(nullptr);
    return w;
  }

  // Dropped before it finished (an async_op=True call nobody waited for): ddl may still read
  // or write the buffers in `keep`, so they must not go before the requests have ended.
  // It also copies out, as a Work that was waited for would (gloo's do the same). Nothing took
  // its Future (the completer would hold it), so completing it runs no one's callbacks.
  ~DdlWork() override {
    if (done_) return;
    try {
      complete();
    } catch (...) {
    }
  }

  std::vector<Req> requests;          // freed here once done
  std::vector<at::Tensor> keep;       // buffers ddl reads or writes until then
  std::function<void()> after;        // copies out of temporaries, on success

  bool isCompleted() override {
    if (done_) return true;
    std::unique_lock<std::mutex> g(run_, std::try_to_lock);
    if (!g.owns_lock()) return false;  // another thread is completing it
    if (!done_) {
      for (Req r : requests) {
        int flag = 0;
        if (api_->test(r, &flag) == 0 && !flag) return false;
      }
    }
    g.unlock();
    complete();  // every request has finished: this does not block
    return true;
  }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> g(mutex_);
    return completed_ && !exception_;
  }

  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> g(mutex_);
    return exception_;
  }

  // ddl's deadline (the process group's timeout) bounds the wait; torch's per-call timeout
  // argument is not used.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    complete();
    std::lock_guard<std::mutex> g(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  std::vector<at::Tensor> result() override { return outputs_; }

  // Waits for every request (in this thread, without the GIL), frees them, runs `after` and
  // completes the Future. Safe to call from several threads; the first one does the work.
  void complete() {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> g(run_);
      if (done_) return;
      std::string failure;
      for (Req r : requests) {
        int rc = api_->wait(r);
        // The words of a failed ddl_wait are in this thread's last error (ddl.h).
        if (rc && failure.empty())
          failure = api_->message(rc, nullptr, c10d::opTypeToString(retrieveOpType()).c_str());
        api_->request_free(r);
      }
      requests.clear();
      if (failure.empty() && after) {
        try {
          after();
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (!failure.empty()) error = std::make_exception_ptr(c10::DistBackendError(
                                   {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                   failure));
      keep.clear();
      after = nullptr;
      done_ = true;
    }
    // Outside run_: the Future's callbacks may call back into this Work.
    publish(error);
  }

 private:
  void publish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (completed_) return;
      completed_ = true;
      exception_ = error;
    }
    cv_.notify_all();
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

  std::shared_ptr<const Api> api_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Completer> completer_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex run_;
  std::atomic<bool> done_{false};
  std::atomic<bool> queued_{false};
  friend class Completer;
};

// A thread that completes, in order, the Works whose Future someone took (DDP's comm hooks
// take the Future and wait on it, never on the Work). Collectives on a communicator finish in
// the order they were issued, so waiting in that order loses nothing.
class Completer {
 public:
  ~Completer() { stop(); }

  // False once stopped: the caller completes the Work itself.
  bool add(c10::intrusive_ptr<DdlWork> w) {
    std::lock_guard<std::mutex> g(mu_);
    if (stopped_) return false;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(std::move(w));
    cv_.notify_one();
    return true;
  }

  // Completes what is queued, then ends the thread.
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id())
        thread_.detach();
      else
        thread_.join();
    }
  }

 private:
  void loop() {
    for (;;) {
      c10::intrusive_ptr<DdlWork> w;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return stopped_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopped and drained
        w = std::move(queue_.front());
        queue_.pop_front();
      }
      w->complete();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<DdlWork>> queue_;
  bool stopped_ = false;
  std::thread thread_;
};

c10::intrusive_ptr<c10::ivalue::Future> DdlWork::getFuture() {
  if (!done_ && completer_ && !queued_.exchange(true)) {
    if (!completer_->add(c10::intrusive_ptr<DdlWork>::reclaim_copy(this))) complete();
  }
  return future_;
}

// A contiguous tensor ddl can use for t: t itself, or a contiguous copy (then `back` copies
// the result into t when the collective has ended).
at::Tensor contiguous_for(const at::Tensor& t, std::vector<std::function<void()>>& back,
                          bool output) {
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (output) back.push_back([t, c]() mutable { t.copy_(c); });
  return c;
}

std::function<void()> all_of(std::vector<std::function<void()>> steps) {
  if (steps.empty()) return nullptr;
  return [steps = std::move(steps)] {
    for (auto& s : steps) s();
  };
}

class DdlBackend : public c10d::Backend {
 public:
  DdlBackend(int rank, int size, uintptr_t comm, const std::string& library, py::object owner)
      : c10d::Backend(rank, size),
        comm_(reinterpret_cast<Comm>(comm)),
        api_(std::make_shared<const Api>(Api::load(library))),
        async_(api_->nonblocking()),
        completer_(std::make_shared<Completer>()),
        owner_(std::move(owner)) {}

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

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (tensors.size() != 1) {
      c10d::AllreduceCoalescedOptions copts;
      copts.reduceOp = opts.reduceOp;
      copts.asyncOp = opts.asyncOp;
      return allreduce_coalesced(tensors, copts);
    }
    at::Tensor& t = tensors[0];
    check_cpu(t, "allreduce's tensor");
    std::vector<std::function<void()>> back;
    at::Tensor buf = contiguous_for(t, back, true);
    premultiplied(opts.reduceOp, buf, true);
    int type = ddl_type(buf), op = ddl_op(opts.reduceOp, buf);
    void* p = buf.data_ptr();
    size_t n = buf.numel();
    return run(
        c10d::OpType::ALLREDUCE, opts.asyncOp, tensors, {buf}, all_of(std::move(back)),
        [&] { return api_->allreduce(p, p, n, type, op, comm_); },
        [&](Req* r) { return api_->iallreduce(p, p, n, type, op, comm_, r); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    // One ddl group: ddl fuses the small allreduces into one buffer (DDL_FUSION_BYTES).
    std::vector<std::function<void()>> back;
    std::vector<at::Tensor> keep;
    std::vector<std::function<int(Req*)>> calls;
    for (auto& t : tensors) {
      check_cpu(t, "allreduce_coalesced's tensor");
      at::Tensor buf = contiguous_for(t, back, true);
      premultiplied(opts.reduceOp, buf, true);
      int type = ddl_type(buf), op = ddl_op(opts.reduceOp, buf);
      void* p = buf.data_ptr();
      size_t n = buf.numel();
      keep.push_back(buf);
      calls.push_back([=](Req* r) { return api_->iallreduce(p, p, n, type, op, comm_, r); });
    }
    return run_group(c10d::OpType::ALLREDUCE_COALESCED, opts.asyncOp, tensors, keep,
                     all_of(std::move(back)), calls);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0,
                "ddl backend: broadcast takes one tensor per process");
    at::Tensor& t = tensors[0];
    check_cpu(t, "broadcast's tensor");
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
        [&](Req* r) { return api_->ibroadcast(p, n, type, root, comm_, r); });
  }

  // The list form: every rank's tensor into its own output tensor, through one flat buffer.
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "ddl backend: allgather takes one tensor per process");
    at::Tensor in = inputs[0];
    check_cpu(in, "allgather's input");
    auto& outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "ddl backend: allgather needs ", size_,
                " output tensors, got ", outs.size());
    for (auto& o : outs) {
      check_cpu(o, "allgather's output");
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "ddl backend: allgather's outputs must match the input's size and dtype");
    }
    in = in.contiguous();
    int64_t n = in.numel();
    at::Tensor flat = at::empty({n * size_}, in.options());
    auto copy_out = [outs, flat, n]() mutable {
      for (size_t i = 0; i < outs.size(); ++i)
        outs[i].copy_(flat.narrow(0, i * n, n).view(outs[i].sizes()));
    };
    int type = ddl_type(in);
    const void* s = in.data_ptr();
    void* r = flat.data_ptr();
    return run(
        c10d::OpType::ALLGATHER, opts.asyncOp, outs, {in, flat}, copy_out,
        [&] { return api_->allgather(s, r, n, type, comm_); },
        [&](Req* q) { return api_->iallgather(s, r, n, type, comm_, q); });
  }

  // all_gather_into_tensor: output holds size * input.numel() elements, in rank order.
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override {
    std::vector<at::Tensor> outs{output}, ins{input};
    return gather_tensors(outs, ins, opts, c10d::OpType::_ALLGATHER_BASE);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return all_gather_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return gather_tensors(outputs, inputs, opts, c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return all_gather_single_coalesced(outputs, inputs, opts);
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
    for (auto& t : ins) {
      check_cpu(t, "reduce_scatter's input");
      TORCH_CHECK(t.numel() == outputs[0].numel() && t.scalar_type() == outputs[0].scalar_type(),
                  "ddl backend: reduce_scatter's inputs must match the output's size and dtype");
      flat_parts.push_back(t.reshape({-1}));
    }
    at::Tensor flat = at::cat(flat_parts);  // a fresh tensor: PREMUL_SUM may scale it in place
    std::vector<at::Tensor> outs{outputs[0]}, flats{flat};
    return scatter_tensors(outs, flats, opts, c10d::OpType::REDUCE_SCATTER, true);
  }

  // reduce_scatter_tensor: input holds size * output.numel() elements.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    std::vector<at::Tensor> outs{output}, ins{input};
    return scatter_tensors(outs, ins, opts, c10d::OpType::_REDUCE_SCATTER_BASE, false);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return scatter_tensors(outputs, inputs, opts,
                           c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, false);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return run(
        c10d::OpType::BARRIER, opts.asyncOp, {}, {}, nullptr, [&] { return api_->barrier(comm_); },
        [&](Req* r) { return api_->ibarrier(comm_, r); });
  }

 private:
  // Runs one collective: blocking when the caller waits at once (opts.asyncOp false, as
  // dist.all_reduce(t) sets it), else nonblocking with a Work that owns the request.
  template <class Blocking, class Nonblocking>
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, bool async, std::vector<at::Tensor> outputs,
                                     std::vector<at::Tensor> keep, std::function<void()> after,
                                     Blocking blocking, Nonblocking nonblocking) {
    if (!async || !async_) {
      int rc = blocking();
      if (rc) throw_failure(rc, type);
      if (after) after();
      // torch's Python API treats a null Work of a call made with asyncOp false as "already
      // synchronised" and skips work.wait(): one Python-to-C++ call less per collective.
      if (!async) return {};
      return DdlWork::finished(rank_, type, std::move(outputs));
    }
    Req req = nullptr;
    int rc = nonblocking(&req);
    if (rc) throw_failure(rc, type);
    auto w = c10::make_intrusive<DdlWork>(rank_, type, api_, std::move(outputs), completer_);
    w->requests.push_back(req);
    w->keep = std::move(keep);
    w->after = std::move(after);
    return w;
  }

  // Several collectives issued together in one ddl group; one Work for all of them.
  c10::intrusive_ptr<c10d::Work> run_group(c10d::OpType type, bool async,
                                           std::vector<at::Tensor> outputs,
                                           std::vector<at::Tensor> keep,
                                           std::function<void()> after,
                                           const std::vector<std::function<int(Req*)>>& calls) {
    TORCH_CHECK(async_, "ddl backend: coalesced collectives need a libddl with nonblocking "
                        "collectives and groups (ddl_group_start); rebuild ddl");
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
    if (!async) {
      w->wait(std::chrono::milliseconds(0));
      return {};
    }
    return w;
  }

  c10::intrusive_ptr<c10d::Work> gather_tensors(std::vector<at::Tensor>& outputs,
                                                std::vector<at::Tensor>& inputs,
                                                const c10d::AllgatherOptions& opts,
                                                c10d::OpType type) {
    TORCH_CHECK(outputs.size() == inputs.size(), "ddl backend: all_gather_into_tensor needs "
                                                 "as many outputs as inputs");
    std::vector<std::function<void()>> back;
    std::vector<at::Tensor> keep;
    std::vector<std::function<int(Req*)>> calls;
    std::function<int()> single;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_cpu(inputs[i], "all_gather_into_tensor's input");
      check_cpu(outputs[i], "all_gather_into_tensor's output");
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
      calls.push_back([=](Req* q) { return api_->iallgather(s, r, n, dt, comm_, q); });
      single = [=] { return api_->allgather(s, r, n, dt, comm_); };
    }
    if (calls.size() == 1)
      return run(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), single, calls[0]);
    return run_group(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), calls);
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
    std::function<int()> single;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_cpu(inputs[i], "reduce_scatter_tensor's input");
      check_cpu(outputs[i], "reduce_scatter_tensor's output");
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
      calls.push_back([=](Req* q) { return api_->ireduce_scatter(s, r, n, dt, op, comm_, q); });
      single = [=] { return api_->reduce_scatter(s, r, n, dt, op, comm_); };
    }
    if (calls.size() == 1)
      return run(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), single, calls[0]);
    return run_group(type, opts.asyncOp, outputs, keep, all_of(std::move(back)), calls);
  }

  [[noreturn]] void throw_failure(int rc, c10d::OpType type) {
    C10_THROW_ERROR(DistBackendError,
                    api_->message(rc, comm_, c10d::opTypeToString(type).c_str()));
  }

  Comm comm_;
  std::shared_ptr<const Api> api_;
  bool async_;
  std::shared_ptr<Completer> completer_;
  py::object owner_;
};

}  // namespace ddl_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ddl's torch.distributed backend (see ddl/torch/__init__.py)";
  // c10d::Backend is registered by torch._C; import it so pybind11 knows the base class.
  py::module_::import("torch.distributed");
  py::class_<ddl_torch::DdlBackend, c10d::Backend, c10::intrusive_ptr<ddl_torch::DdlBackend>>(m, "DdlBackend")
      .def(py::init<int, int, uintptr_t, const std::string&, py::object>(), py::arg("rank"),
           py::arg("size"), py::arg("comm"), py::arg("library"), py::arg("owner"))
      .def_property_readonly("nonblocking", &ddl_torch::DdlBackend::nonblocking,
                             "whether libddl has nonblocking collectives (else every call blocks)");
}

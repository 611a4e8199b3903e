// The Work of the "ddl" torch backend: one call (or a coalesced batch) in flight, and the
// thread that completes the Works whose Future someone took. Included by backend.cpp only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

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
  // A receive from any source: where ddl writes the sender's rank when it is done.
  std::shared_ptr<int> source;
  int sourceRank() const override {
    TORCH_CHECK(source && *source >= 0, "ddl backend: sourceRank() of a Work that is not a ",
                "finished receive from any source");
    return *source;
  }
  std::vector<at::Tensor> keep;       // buffers ddl reads or writes until then
  std::function<void()> after;        // copies out of temporaries, on success
  // The Works of a coalesced batch (startCoalescing .. endCoalescing): this one is done when
  // all of them are.
  std::vector<c10::intrusive_ptr<DdlWork>> parts;

  bool isCompleted() override {
    if (done_) return true;
    std::unique_lock<std::mutex> g(run_, std::try_to_lock);
    if (!g.owns_lock()) return false;  // another thread is completing it
    if (!done_) {
      for (Req r : requests) {
        int flag = 0;
        if (api_->test(r, &flag) == 0 && !flag) return false;
      }
      for (auto& part : parts)
        if (!part->isCompleted()) return false;
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
  void note_failure(int rc);  // tells the backend (Completer::note_failure)

  std::vector<at::Tensor> result() override { return outputs_; }
  // The caller's tensors, when the call ran on copies of them (device_path.h's Staging).
  void set_outputs(std::vector<at::Tensor> outputs) { outputs_ = std::move(outputs); }
  bool finished() const { return done_; }

  // Waits for every request (in this thread, without the GIL), frees them, runs `after` and
  // completes the Future. Safe to call from several threads; the first one does the work.
  void complete() {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> g(run_);
      if (done_) return;
      std::string failure;
      for (auto& part : parts) {
        part->complete();
        std::exception_ptr e = part->exception();
        if (e && !error) error = e;
      }
      parts.clear();
      for (Req r : requests) {
        int rc = api_->wait(r);
        // The words of a failed ddl_wait are in this thread's last error (ddl.h).
        if (rc && failure.empty())
          failure = api_->message(rc, nullptr, c10d::opTypeToString(retrieveOpType()).c_str());
        if (rc) note_failure(rc);
        api_->request_free(r);
      }
      requests.clear();
      if (failure.empty() && !error && after) {
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

  // The first failure that leaves the communicator unusable (a dead or silent peer, a
  // deadline, the system), from a blocking call or a Work: what Backend::getError reports.
  // Refused arguments change nothing and are not recorded.
  void note_failure(int rc) {
    if (rc == kRemote || rc == kTimeout || rc == kSystem || rc == kInternal) {
      int none = 0;
      failure_.compare_exchange_strong(none, rc);
    }
  }
  c10d::ErrorType error() const {
    switch (failure_.load()) {
      case 0: return c10d::ErrorType::SUCCESS;
      case kTimeout: return c10d::ErrorType::TIMEOUT;
      case kRemote: return c10d::ErrorType::REMOTE_ERROR;
      default: return c10d::ErrorType::COMM_ERROR;
    }
  }

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

  // ddl.h's result codes (never renumbered).
  static constexpr int kSystem = 3, kInternal = 4, kRemote = 5, kTimeout = 6;
  std::atomic<int> failure_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<DdlWork>> queue_;
  bool stopped_ = false;
  std::thread thread_;
};

inline void DdlWork::note_failure(int rc) {
  if (completer_) completer_->note_failure(rc);
}

inline c10::intrusive_ptr<c10::ivalue::Future> DdlWork::getFuture() {
  if (!done_ && completer_ && !queued_.exchange(true)) {
    if (!completer_->add(c10::intrusive_ptr<DdlWork>::reclaim_copy(this))) complete();
  }
  return future_;
}

}  // namespace ddl_torch

#include "lib/core/progress.h"

#include <cstring>
#include <utility>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/core/point_to_point.h"

namespace ddl {
namespace {

// Beyond its own deadline, how long a job may take to return from the executor (cancelling
// transfers, sending notices) before a waiter calls the progress thread stuck.
constexpr std::chrono::seconds kStuckGrace{10};

thread_local bool t_progress_thread = false;

}  // namespace

void RequestState::finish(const Status &status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void RequestState::set_latest(std::chrono::steady_clock::time_point latest) {
  latest_ns_.store(latest.time_since_epoch().count(), std::memory_order_release);
}

Status RequestState::wait() {
  using Clock = std::chrono::steady_clock;
  if (done()) return status_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done()) {
    // Re-read each round: a request of a group is queued (and bounded) at the group's end.
    const int64_t latest_ns = latest_ns_.load(std::memory_order_acquire);
    const Clock::time_point now = Clock::now();
    if (latest_ns != 0 && now >= Clock::time_point(Clock::duration(latest_ns)))
      return timeout_error(
          "rank %d: %s (count %zu): the progress thread did not finish this collective (or "
          "those queued before it) within their deadlines; it is stuck, please report it",
          rank_, collective_, count_);
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  return status_;
}

ProgressQueue::ProgressQueue(ddl_comm *comm) : comm_(comm) {
  thread_ = std::thread([this] { loop(); });
}

ProgressQueue::~ProgressQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ProgressQueue::submit(Job job) {
  // Each job ahead may take its whole deadline (it starts counting when the job starts).
  const size_t ahead = outstanding_.fetch_add(1, std::memory_order_acq_rel);
  const auto per_job = std::chrono::milliseconds(comm_->config.timeout_ms) + kStuckGrace;
  const auto latest = std::chrono::steady_clock::now() + per_job * static_cast<int64_t>(ahead + 1);
  for (const auto &request : job.requests) request->set_latest(latest);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = job.requests.back();
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

Status ProgressQueue::drain() {
  std::shared_ptr<RequestState> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = last_;
  }
  if (!last) return Status::Ok();
  // Jobs run in order: when the last one is done, all are. Its status is its caller's news.
  const Status s = last->wait();
  if (s.code() == DDL_ERR_TIMEOUT && !last->done()) return s;
  // The progress thread decrements outstanding_ just after finishing the requests: wait for
  // it, so that the caller then owns the communicator alone.
  while (!idle()) std::this_thread::yield();
  return Status::Ok();
}

bool on_progress_thread() {
  return t_progress_thread;
}

void ProgressQueue::loop() {
  LogRank log_rank(comm_->rank);
  t_progress_thread = true;
  for (;;) {
    Job job;
    size_t merged = 1;  // jobs of the queue this one stands for
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and everything queued has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      // Sends and receives queued back to back run as one batch: an exchange's isend and
      // irecv must be in flight together, or each rank's send could wait for the other's
      // receive (point_to_point.h).
      while (is_point_to_point_job(job) && !jobs_.empty() && is_point_to_point_job(jobs_.front())) {
        Job &next = jobs_.front();
        job.calls.insert(job.calls.end(), next.calls.begin(), next.calls.end());
        job.requests.insert(job.requests.end(), next.requests.begin(), next.requests.end());
        ++merged;
        jobs_.pop_front();
      }
    }
    const Status s = run_job(comm_, job, &fusion_buffer_);
    // Logged here, once: ddl_test and ddl_wait only hand the words to their caller.
    if (!s.ok()) DDL_LOG(LogLevel::kError, "%s", s.message().c_str());
    for (const auto &request : job.requests) request->finish(s);
    outstanding_.fetch_sub(merged, std::memory_order_acq_rel);
  }
}

bool is_point_to_point_job(const Job &job) {
  return !job.calls.empty() && is_point_to_point(job.calls[0].collective);
}

Status run_job(ddl_comm *comm, Job &job, std::vector<unsigned char> *fusion_buffer) {
  if (job.calls.size() == 1) return run_collective(comm, job.calls[0]);
  if (is_point_to_point_job(job)) return run_point_to_point(comm, job.calls);
  // Fused allreduces (same datatype and op, checked by the group): one call over the
  // concatenation of their inputs, then each output gets its part back.
  const CollectiveCall &first = job.calls[0];
  const size_t elem = datatype_size(first.dtype);
  size_t total = 0;
  for (const CollectiveCall &call : job.calls) total += call.count;
  if (fusion_buffer->size() < total * elem) fusion_buffer->resize(total * elem);
  unsigned char *buffer = fusion_buffer->data();
  size_t offset = 0;
  for (const CollectiveCall &call : job.calls) {
    std::memcpy(buffer + offset, call.sendbuf, call.count * elem);
    offset += call.count * elem;
  }
  CollectiveCall fused = first;
  fused.sendbuf = buffer;
  fused.recvbuf = buffer;
  fused.count = total;
  Status s = run_collective(comm, fused);
  if (!s.ok())
    return s.prefix(strprintf("fused allreduce of %zu grouped calls: ", job.calls.size()));
  offset = 0;
  for (const CollectiveCall &call : job.calls) {
    std::memcpy(call.recvbuf, buffer + offset, call.count * elem);
    offset += call.count * elem;
  }
  return s;
}

}  // namespace ddl

#include "lib/core/progress.h"

#include <cstring>
#include <utility>

#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/core/dispatch.h"
#include "lib/core/group.h"
#include "lib/core/point_to_point.h"
#include "lib/device/staging.h"
#include "lib/exec/executor.h"

namespace ddl {
Job job_of(const CollectiveCall &call, std::shared_ptr<RequestState> request,
           std::unique_ptr<PointToPointBatch> posted) {
  Job job;
  job.calls.push_back(call);
  job.requests.push_back(std::move(request));
  job.posted = std::move(posted);
  return job;
}

namespace {

// Beyond its own deadline, how long a job may take to return from the executor (cancelling
// transfers, sending notices) before a waiter calls the progress thread stuck.
constexpr std::chrono::seconds kStuckGrace{10};

}  // namespace

thread_local bool t_on_progress_thread = false;

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
  // A parked one: polled here, pausing as the communicator's waiting calls do.
  for (int idle = 0; parked.load(std::memory_order_acquire) && !done(); ++idle) {
    {
      std::lock_guard<std::mutex> lock(parked_in->mu);
      if (parked.load(std::memory_order_acquire)) parked_in->poll_locked();
    }
    if (!done()) idle_pause(idle, parked_in->pacing);
  }
  return wait_queued();
}

void RequestState::poll_if_parked() {
  if (!parked.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(parked_in->mu, std::try_to_lock);
  if (lock.owns_lock() && parked.load(std::memory_order_acquire)) parked_in->poll_locked();
}

Status RequestState::wait_queued() {
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
  adopt_parked();
  enqueue(std::move(job));
}

void ProgressQueue::adopt_parked() {
  if (!comm_->parked || !comm_->parked->any.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(comm_->parked->mu);
  adopt_parked_locked(*comm_->parked);
}

void ProgressQueue::adopt_parked_locked(ParkedTransfers &parked) {
  for (ParkedTransfers::Entry &entry : parked.entries) {
    entry.request->parked.store(false, std::memory_order_release);
    enqueue(job_of(entry.call, entry.request, std::move(entry.batch)));
  }
  parked.entries.clear();
  parked.any.store(false, std::memory_order_release);
}

void ProgressQueue::enqueue(Job job) {
  // What the job's device calls need and this queue's thread may not make (lib/device/
  // device_state.h) is made here, on the caller's thread; stream-ordered calls made theirs
  // before their wait was queued. A failure shows again, with its cause, when the call runs.
  for (const CollectiveCall &call : job.calls) {
    if (call.stream) continue;
    const Status s = device::prepare_queued_call(comm_, call);
    if (!s.ok())
      DDL_WARN("rank %d: %s of device buffers: preparing before it is queued: %s", comm_->rank,
               collective_name(call.collective), s.message().c_str());
  }
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
  // Jobs start in order: when the last one is done, all collectives are (batches of sends
  // and receives may still be in flight, each within its deadline). Its status is its
  // caller's news.
  const Status s = last->wait();
  if (s.code() == DDL_ERR_TIMEOUT && !last->done()) return s;
  // The progress thread is idle before it finishes the last requests (finish); a stuck
  // thread's last request timed out above. So this ends at once.
  while (!idle()) std::this_thread::yield();
  return Status::Ok();
}

// A batch of sends and receives the progress thread has posted and polls between jobs.
struct ProgressQueue::InFlight {
  std::unique_ptr<PointToPointBatch> batch;
  std::vector<std::shared_ptr<RequestState>> requests;
};

void ProgressQueue::loop() {
  LogRank log_rank(comm_->rank);
  t_on_progress_thread = true;
  std::vector<InFlight> in_flight;
  ExecArgs pacing;  // how the thread waits while only batches are in flight
  pacing.spins_before_yield = std::min(comm_->spins_before_yield, kProgressThreadSpins);
  pacing.yields_before_sleep = comm_->yields_before_sleep;
  for (int idle = 1;; ++idle) {
    Job job;
    bool have_job = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (in_flight.empty()) wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty() && in_flight.empty()) return;  // stopping, and everything has run
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
        // One job, one batch, even for sends and receives queued back to back: a batch is
        // done when all of its transfers are, and a receive queued after another must not
        // wait for it (with tags or other peers, the later one may be the one to come first,
        // and its caller's next step what the earlier one waits for).
        have_job = true;
      }
    }
    if (have_job && is_point_to_point_job(job)) {
      // Posted now (unless the caller's thread did) and polled below: later jobs run while
      // it is in flight.
      InFlight posted;
      posted.batch = job.posted ? std::move(job.posted)
                                : std::make_unique<PointToPointBatch>(comm_, job.calls);
      posted.requests = std::move(job.requests);
      in_flight.push_back(std::move(posted));
      idle = 0;
    } else if (have_job) {
      finish(run_job(comm_, job, &fusion_buffer_), job.requests);
      idle = 0;
    }
    for (size_t i = 0; i < in_flight.size();) {
      if (!in_flight[i].batch->poll()) {
        ++i;
        continue;
      }
      finish(in_flight[i].batch->status(), in_flight[i].requests);
      in_flight.erase(in_flight.begin() + static_cast<long>(i));
      idle = 0;
    }
    if (!have_job) idle_pause(idle, pacing);
  }
}

void ProgressQueue::finish(const Status &s,
                           const std::vector<std::shared_ptr<RequestState>> &requests) {
  // Logged here, once: ddl_test and ddl_wait only hand the words to their caller.
  if (!s.ok()) DDL_LOG(LogLevel::kError, "%s", s.message().c_str());
  // Idle before the requests say so: this thread touches no transport from here on (a
  // finished batch is over, the job has run), and a caller woken by its request then finds
  // the communicator its own for its next call (start_point_to_point, run_blocking). Decremented
  // after them, a woken caller found the queue busy in nearly every call of a ping-pong.
  outstanding_.fetch_sub(1, std::memory_order_acq_rel);
  for (const auto &request : requests) request->finish(s);
}

bool is_point_to_point_job(const Job &job) {
  return !job.calls.empty() && is_point_to_point(job.calls[0].collective);
}

void ParkedTransfers::poll_locked() {
  for (size_t i = 0; i < entries.size();) {
    Entry &entry = entries[i];
    if (!entry.batch->poll()) {
      ++i;
      continue;
    }
    entry.request->parked.store(false, std::memory_order_release);
    entry.request->finish(entry.batch->status());
    entries.erase(entries.begin() + static_cast<long>(i));
  }
  any.store(!entries.empty(), std::memory_order_release);
}

void hand_over_parked(ddl_comm *comm) {
  if (comm->parked && comm->parked->any.load(std::memory_order_acquire))
    progress_of(comm).adopt_parked();
}

Status run_blocking(ddl_comm *comm, const CollectiveCall &call) {
  hand_over_parked(comm);  // this thread may be about to use the transport
  if (comm->progress && !comm->progress->idle()) {
    Status s = check_collective(comm, call);
    if (!s.ok()) return s;
    std::shared_ptr<RequestState> request = new_request(comm, call);
    comm->progress->submit(job_of(call, request));
    return request->wait();
  }
  return run_collective(comm, call);
}

namespace {

// The largest receive that may wait parked.
constexpr size_t kParkedBytes = 64 << 10;

// Whether a receive that is not over at once may wait parked, polled by its waiter alone:
// only where its sender needs nothing of this rank meanwhile, so that a rank that does
// something else before it waits (computes, or waits for its peer elsewhere) holds nobody
// up. A peer on this host through ddl's shared memory writes a message that fits its
// channel's ring without the receiver, and one parked receive at a time keeps the ring free
// for it. Any other transfer goes on on the progress thread, which moves it while the caller
// does something else: a send not over at once, a receive from another host (a large one
// needs the receiver's part of UCX's rendezvous), from any rank of a job across hosts, or
// larger.
bool may_park(const ddl_comm *comm, const CollectiveCall &call, const ParkedTransfers &parked) {
  if (call.collective != Collective::kRecv || !comm->shm || !parked.entries.empty()) return false;
  const size_t bytes = call_bytes(call);
  if (bytes > kParkedBytes || 2 * bytes > comm->shm->ring_bytes()) return false;
  // From any rank: every rank is then on this host (shared memory serves the whole host).
  if (call.peer == DDL_ANY_SOURCE)
    return comm->host_ranks.size() == static_cast<size_t>(comm->nranks);
  return comm->carriers.by_peer[static_cast<size_t>(call.peer)] == comm->shm.get();
}

}  // namespace

void start_point_to_point(ddl_comm *comm, const CollectiveCall &call,
                          std::shared_ptr<RequestState> request) {
  // Device buffers keep to the thread, whose queued calls get their device state made on
  // the caller's thread first (submit).
  if (comm->device_buffers || (comm->progress && !comm->progress->idle())) {
    progress_of(comm).submit(job_of(call, std::move(request)));
    return;
  }
  if (!comm->parked) {
    comm->parked = std::make_shared<ParkedTransfers>();
    comm->parked->pacing.spins_before_yield = comm->spins_before_yield;
    comm->parked->pacing.yields_before_sleep = comm->yields_before_sleep;
  }
  ParkedTransfers &parked = *comm->parked;
  // Waiters on other threads poll the parked transfers, and with them the transport.
  std::lock_guard<std::mutex> lock(parked.mu);
  auto batch = std::make_unique<PointToPointBatch>(comm, std::vector<CollectiveCall>{call});
  if (batch->poll()) {
    request->finish(batch->status());
    return;
  }
  if (!may_park(comm, call, parked)) {
    // The parked one (if any) goes first: the thread polls the transport from now on.
    ProgressQueue &queue = progress_of(comm);
    queue.adopt_parked_locked(parked);
    queue.enqueue(job_of(call, std::move(request), std::move(batch)));
    return;
  }
  request->parked_in = comm->parked;
  request->parked.store(true, std::memory_order_release);
  parked.entries.push_back({call, std::move(batch), std::move(request)});
  parked.any.store(true, std::memory_order_release);
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

// Nonblocking collectives: requests, and the progress thread that runs a communicator's
// queued collectives one after another, in call order, while the caller computes.
//
// Why one thread per communicator, running whole collectives: the executor already overlaps
// every step of one collective, and ranks must match collectives in call order anyway, so a
// FIFO of collectives is what MPI's and NCCL's ordering rules give users. The progress
// thread is started by the first nonblocking call; a communicator that never makes one has
// none and its blocking calls run as before, on the caller's thread, with no locking.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/common/status.h"
#include "lib/core/collectives.h"

namespace ddl {

// What a ddl_request_t stands for. Shared by the caller's handle and the queue, so that a
// request freed early still runs to its end and one kept after its communicator still says
// how it ended.
class RequestState {
 public:
  // Names the call in the stuck-thread error ("rank 1: allreduce (count 8)"); words are only
  // made then, as groups make a request per call.
  RequestState(int rank, const char *collective, size_t count)
      : rank_(rank), collective_(collective), count_(count) {}
  // Set when queued: when a waiter stops trusting the progress thread and calls it stuck.
  void set_latest(std::chrono::steady_clock::time_point latest);
  void finish(const Status &status);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Meaningful once done().
  const Status &status() const { return status_; }
  // Blocks until done (returns its status) or until `latest` has passed (a timeout error).
  // Before it is queued (a group still open on another thread) it waits without a bound.
  Status wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status status_;
  std::atomic<int64_t> latest_ns_{0};  // steady_clock, 0 until queued
  const int rank_;
  const char *const collective_;  // static text
  const size_t count_;
};

// One unit of the queue: a collective, several allreduces fused into one buffer (a group, see
// group.h), or a batch of sends and receives, and the requests that finish with it (one per
// call).
struct Job {
  std::vector<CollectiveCall> calls;
  std::vector<std::shared_ptr<RequestState>> requests;
};

class ProgressQueue {
 public:
  explicit ProgressQueue(ddl_comm *comm);
  // Lets every queued job run to its end (each has its deadline), then stops the thread.
  ~ProgressQueue();
  ProgressQueue(const ProgressQueue &) = delete;
  ProgressQueue &operator=(const ProgressQueue &) = delete;

  // Queues a job; its requests finish when it has run. Sets their `latest`.
  void submit(Job job);
  // Nothing queued or running: the caller may run a collective on its own thread.
  bool idle() const { return outstanding_.load(std::memory_order_acquire) == 0; }
  // Waits until every job submitted so far has finished. Error only if one is stuck past
  // its deadline; the jobs' own failures are their requests' (and the communicator's).
  Status drain();

 private:
  struct InFlight;
  void loop();
  // Finishes the requests of `jobs` queued jobs with s.
  void finish(const Status &s, const std::vector<std::shared_ptr<RequestState>> &requests);

  ddl_comm *comm_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::shared_ptr<RequestState> last_;  // the request of the last job submitted
  bool stop_ = false;
  std::atomic<size_t> outstanding_{0};  // submitted and not yet finished
  std::vector<unsigned char> fusion_buffer_;
  std::thread thread_;
};

// Idle polls before the progress thread yields its core (ExecArgs::spins_before_yield).
constexpr int kProgressThreadSpins = 20;
// Set on a communicator's progress thread, for its whole life (progress.cc).
extern thread_local bool t_on_progress_thread;
// Whether the calling thread is a communicator's progress thread. Inline: every call asks.
inline bool on_progress_thread() {
  return t_on_progress_thread;
}

// Whether a job is sends and receives (a batch of them, or one).
bool is_point_to_point_job(const Job &job);

// Runs one job on comm (on the progress thread, or inline): a single collective as it is, a
// batch of sends and receives all at once, a fused one packed into one buffer, allreduced,
// and unpacked.
Status run_job(ddl_comm *comm, Job &job, std::vector<unsigned char> *fusion_buffer);

}  // namespace ddl

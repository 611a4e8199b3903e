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
#include "lib/core/point_to_point.h"
#include "lib/exec/executor.h"

namespace ddl {

struct ParkedTransfers;

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
  // A parked send or receive (ParkedTransfers) is polled here until it is over or handed to
  // the progress thread.
  Status wait();
  // Polls it once if it is parked and no other thread is polling the parked transfers.
  void poll_if_parked();

  // Where it is parked, set before its handle is returned (start_point_to_point); `parked`
  // says whether it still is (false once over or handed to the progress thread).
  std::shared_ptr<ParkedTransfers> parked_in;
  std::atomic<bool> parked{false};

 private:
  // Blocks until done, or the deadline set when queued.
  Status wait_queued();

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
  // Sends and receives the caller's thread has posted already (start_point_to_point): the
  // thread polls them on.
  std::unique_ptr<PointToPointBatch> posted;
};

// The job of one call and its request (a send or receive may come already posted).
Job job_of(const CollectiveCall &call, std::shared_ptr<RequestState> request,
           std::unique_ptr<PointToPointBatch> posted = nullptr);

class ProgressQueue {
 public:
  explicit ProgressQueue(ddl_comm *comm);
  // Lets every queued job run to its end (each has its deadline), then stops the thread.
  ~ProgressQueue();
  ProgressQueue(const ProgressQueue &) = delete;
  ProgressQueue &operator=(const ProgressQueue &) = delete;

  // Queues a job; its requests finish when it has run. Sets their `latest`. The parked
  // sends and receives go first (hand_over_parked).
  void submit(Job job);
  // Takes the communicator's parked sends and receives into the queue; the second with the
  // parked transfers' mutex held by the caller.
  void adopt_parked();
  void adopt_parked_locked(ParkedTransfers &parked);
  // Queues a job as submit does, leaving the parked transfers alone (the caller holds their
  // mutex and has handed them over).
  void enqueue(Job job);
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

// Sends and receives of nonblocking calls that the caller's thread posted and that were not
// over at once (start_point_to_point). Whoever waits for one polls them all (ddl_wait,
// ddl_test: the caller's thread in the usual "start, then wait" of torch's send and recv, or
// any other, one at a time under `mu`), so that a receive waited at once ends without the
// progress thread. They stay here until the communicator's progress thread or its transport
// is next wanted by another call (hand_over_parked): they then go on on the progress thread,
// which polls the transport alone from then on.
struct ParkedTransfers {
  struct Entry {
    CollectiveCall call;
    std::unique_ptr<PointToPointBatch> batch;
    std::shared_ptr<RequestState> request;
  };
  std::mutex mu;
  std::vector<Entry> entries;    // under mu
  std::atomic<bool> any{false};  // entries is not empty
  ExecArgs pacing;               // how their waiters pause: as the communicator's waiting calls do
  // Polls every entry once and finishes those that are over. Under mu.
  void poll_locked();
};

// Before the caller's thread uses the communicator's transport or queues a call: its parked
// sends and receives go to the progress thread (nothing is done when there are none).
void hand_over_parked(ddl_comm *comm);

// Runs a blocking call on the caller's thread, in call order with the nonblocking and queued
// calls: behind any still queued or in flight it runs on the progress thread, and this thread
// waits for it (beside the sends and receives in flight: an ddl_irecv posted before a blocking
// ddl_send must be able to complete while it runs).
Status run_blocking(ddl_comm *comm, const CollectiveCall &call);

// Starts a nonblocking send or receive (a checked call, outside any group) whose `request`
// finishes when it is over. While the progress thread has nothing to do (nothing queued,
// nothing in flight: it then touches no transport, and the caller's thread owns the
// communicator as in a blocking call), the call is posted on the caller's thread and polled
// once: one that is over at once (a send copied out, a receive whose message had arrived)
// never involves the thread, whose hand-over and wake-up cost more than a small transfer
// (torch's send and recv are nonblocking calls waited at once); any other is parked
// (ParkedTransfers). Otherwise it is queued behind what is there, as every nonblocking call.
void start_point_to_point(ddl_comm *comm, const CollectiveCall &call,
                          std::shared_ptr<RequestState> request);

// Runs one job on comm (on the progress thread, or inline): a single collective as it is, a
// batch of sends and receives all at once, a fused one packed into one buffer, allreduced,
// and unpacked.
Status run_job(ddl_comm *comm, Job &job, std::vector<unsigned char> *fusion_buffer);

}  // namespace ddl

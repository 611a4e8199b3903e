#include "lib/core/group.h"

#include <utility>
#include <vector>

#include "lib/device/staging.h"

namespace ddl {

thread_local int t_group_depth = 0;

namespace {

struct Recorded {
  ddl_comm *comm;
  CollectiveCall call;
  std::shared_ptr<RequestState> request;
  bool blocking;  // the group's end waits for it
};

thread_local std::vector<Recorded> t_group_calls;
thread_local std::vector<unsigned char> t_fusion_buffer;  // fused groups run on this thread

// Device buffers are not fused: the fusion buffer is packed with host copies.
bool on_host(const CollectiveCall &call) {
  device::PointerInfo where;
  return device::classify_call(call, &where).ok() && where.kind == device::MemoryKind::kHost;
}

bool fusible(const Recorded &r) {
  return r.call.collective == Collective::kAllreduce && r.call.count > 0 &&
         call_bytes(r.call) <= r.comm->config.fusion_bytes && on_host(r.call);
}

// Whether b can join a fused job that a started: same communicator, datatype and op.
bool fuses_with(const Recorded &a, const Recorded &b) {
  return fusible(a) && fusible(b) && a.comm == b.comm && a.call.dtype == b.call.dtype &&
         a.call.op == b.call.op;
}

}  // namespace

void group_start() {
  ++t_group_depth;
}

void group_record(ddl_comm *comm, const CollectiveCall &call,
                  std::shared_ptr<RequestState> request) {
  // A blocking call gets its request only if the group goes through a progress thread: run
  // on this thread (group_end), it needs none.
  const bool blocking = !request;
  t_group_calls.push_back(Recorded{comm, call, std::move(request), blocking});
}

Status group_end() {
  if (t_group_depth == 0) return invalid_usage("ddl_group_end: no ddl_group_start before it");
  if (--t_group_depth > 0) return Status::Ok();
  std::vector<Recorded> calls;
  calls.swap(t_group_calls);
  // Each communicator's calls keep their order; a job is a call, or a run of consecutive
  // fusible allreduces of one communicator of at most DDL_FUSION_BYTES in all: packing,
  // reducing and unpacking a buffer that stays in cache is faster (1,000 x 4 KB on 2 ranks:
  // 1.8 ms in 64 KB buffers against 3.7 ms in one 4 MB buffer, bench/one-host.md).
  // Consecutive among that communicator's calls: a call on another communicator between two
  // allreduces does not stop their fusion, as the communicators' queues are independent.
  // A group of blocking calls on one communicator (the usual "fuse these small allreduces")
  // runs on this thread, as blocking calls do, after what was queued before it: no handoff to
  // the progress thread. Groups with nonblocking calls, or over several communicators (whose
  // collectives may need to run at once), go through the communicators' progress threads.
  // Not while the communicator's progress thread has work: sends and receives in flight there
  // must go on while the group runs.
  // Sends and receives parked on a communicator go to its progress thread first: the group
  // uses its transport or queues calls there.
  for (const Recorded &r : calls)
    if (comm_is_live(r.comm)) hand_over_parked(r.comm);
  bool run_inline = !calls.empty() && comm_is_live(calls[0].comm) &&
                    (!calls[0].comm->progress || calls[0].comm->progress->idle());
  for (const Recorded &r : calls) run_inline = run_inline && r.blocking && r.comm == calls[0].comm;
  ddl_comm *const owned = run_inline ? calls[0].comm : nullptr;
  if (owned && owned->busy.exchange(true))
    return invalid_usage(
        "rank %d: ddl_group_end: another thread is inside a call on this communicator; calls on "
        "one communicator must not overlap",
        owned->rank);
  // Released whatever happens below.
  std::unique_ptr<ddl_comm, void (*)(ddl_comm *)> release(
      owned, [](ddl_comm *c) { c->busy.store(false); });
  if (owned && owned->progress && !owned->progress->idle()) {
    const Status drained = owned->progress->drain();
    if (!drained.ok()) return drained;
  }
  if (!run_inline)  // the progress threads finish requests, which the blocking calls wait on
    for (Recorded &r : calls)
      if (!r.request) r.request = new_request(r.comm, r.call);
  // Inline, the one communicator was just found live, and this thread holds it (busy).
  auto live = [run_inline](ddl_comm *comm) { return run_inline || comm_is_live(comm); };
  std::vector<bool> issued(calls.size(), false);
  Status first;  // inline: the first failure of a blocking call
  auto issue = [&](ddl_comm *comm, Job job) {
    if (!run_inline) {
      progress_of(comm).submit(std::move(job));
      return;
    }
    const Status s = run_job(comm, job, &t_fusion_buffer);
    if (first.ok()) first = s;  // every call here is blocking
  };
  // Each communicator's sends and receives go first, as one batch: all posted at once, so
  // that they never wait for each other, and in the same place on every rank whatever order
  // the ranks recorded them in among their collectives (NCCL's grouped send/recv).
  for (size_t i = 0; i < calls.size(); ++i) {
    if (issued[i] || !is_point_to_point(calls[i].call.collective) || !live(calls[i].comm)) continue;
    Job batch;
    for (size_t j = i; j < calls.size(); ++j) {
      if (calls[j].comm != calls[i].comm || !is_point_to_point(calls[j].call.collective)) continue;
      batch.calls.push_back(calls[j].call);
      batch.requests.push_back(calls[j].request);
      issued[j] = true;
    }
    issue(calls[i].comm, std::move(batch));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (issued[i]) continue;
    Job job;
    size_t job_bytes = 0;
    for (size_t j = i; j < calls.size(); ++j) {
      if (issued[j] || calls[j].comm != calls[i].comm) continue;
      if (!live(calls[j].comm)) break;  // destroyed inside the group: failed below
      if (j != i && !fuses_with(calls[i], calls[j])) break;
      job_bytes += call_bytes(calls[j].call);
      if (j != i && job_bytes > calls[i].comm->config.fusion_bytes) break;
      job.calls.push_back(calls[j].call);
      job.requests.push_back(calls[j].request);
      issued[j] = true;
      if (!fusible(calls[i])) break;
    }
    if (job.calls.empty()) {
      const Status gone = invalid_usage(
          "ddl_group_end: a collective of the group was called on communicator %p, which was "
          "destroyed before the group ended",
          static_cast<void *>(calls[i].comm));
      if (calls[i].request)
        calls[i].request->finish(gone);
      else if (first.ok())
        first = gone;
      issued[i] = true;
      continue;
    }
    issue(calls[i].comm, std::move(job));
  }
  for (const Recorded &r : calls) {
    if (run_inline || !r.blocking) continue;
    const Status s = r.request->wait();
    if (first.ok() && !s.ok()) first = s;
  }
  t_group_calls.swap(calls);  // keeps the capacity for the next group
  t_group_calls.clear();
  return first;
}

ProgressQueue &progress_of(ddl_comm *comm) {
  if (!comm->progress) comm->progress.reset(new ProgressQueue(comm));
  return *comm->progress;
}

std::shared_ptr<RequestState> new_request(ddl_comm *comm, const CollectiveCall &call) {
  return std::make_shared<RequestState>(comm->rank, collective_name(call.collective), call.count);
}

}  // namespace ddl

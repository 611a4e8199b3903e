// The C ABI of calls: the collectives in every form (blocking, nonblocking, stream-ordered),
// send and receive, requests and groups. Each entry point checks its handle and arguments,
// runs, and leaves the words of any failure in ddl_comm_last_error. Communicators and the
// library's own entry points: api_comm.cc; fault tolerance: api_elastic.cc.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "ddl/ddl.h"
#include "lib/common/datatype.h"
#include "lib/core/comm.h"
#include "lib/core/comm_call.h"
#include "lib/core/count_arrays.h"
#include "lib/core/dispatch.h"
#include "lib/core/group.h"
#include "lib/core/progress.h"
#include "lib/device/staging.h"

using ddl::CommCall;
using ddl::CountArrays;
using ddl::fail_without_comm;
using ddl::Status;

namespace {

ddl_result_t run(ddl_comm_t comm, ddl::CollectiveCall call, const CountArrays *arrays = nullptr) {
  CommCall guard(comm, ddl::collective_name(call.collective));
  if (!guard.ok()) return guard.fail();
  if (arrays) {
    Status s = ddl::read_counts(comm, *arrays, &call);
    if (!s.ok()) return guard.finish(s.prefix(ddl::call_words(comm, call)));
  }
  if (ddl::in_group()) {
    Status s = ddl::check_collective(comm, call);
    if (s.ok()) ddl::group_record(comm, call, nullptr);
    return guard.finish(s);
  }
  return guard.finish(ddl::run_blocking(comm, call));
}

}  // namespace

// The handle behind ddl_request_t: the caller's share of the request.
struct ddl_request {
  std::shared_ptr<ddl::RequestState> state;
};

namespace {

// Live request handles: a freed or foreign one is an error, not a crash.
std::mutex g_requests_mu;
std::unordered_set<ddl_request *> g_requests;

std::shared_ptr<ddl::RequestState> live_request(ddl_request *request) {
  std::lock_guard<std::mutex> lock(g_requests_mu);
  return g_requests.count(request) ? request->state : nullptr;
}

// Checks the call, then queues it (or records it in the open group) and returns its request.
ddl_result_t start(ddl_comm_t comm, ddl::CollectiveCall call, ddl_request_t *request,
                   const char *what, const CountArrays *arrays = nullptr) {
  if (!request) return fail_without_comm(ddl::invalid_argument("%s: request is NULL", what));
  *request = nullptr;
  CommCall guard(comm, what);
  if (!guard.ok()) return guard.fail();
  Status s = arrays ? read_counts(comm, *arrays, &call) : Status::Ok();
  if (!s.ok()) return guard.finish(s.prefix(ddl::strprintf("rank %d: %s: ", comm->rank, what)));
  s = ddl::check_collective(comm, call);
  if (!s.ok()) return guard.finish(s);
  std::shared_ptr<ddl::RequestState> state = ddl::new_request(comm, call);
  if (ddl::in_group()) {
    ddl::group_record(comm, call, state);
  } else if (ddl::is_point_to_point(call.collective)) {
    ddl::start_point_to_point(comm, call, state);
  } else {
    ddl::progress_of(comm).submit(ddl::job_of(call, state));
  }
  auto *handle = new ddl_request{std::move(state)};
  {
    std::lock_guard<std::mutex> lock(g_requests_mu);
    g_requests.insert(handle);
  }
  *request = handle;
  return DDL_SUCCESS;
}

// A stream-ordered call: host-synchronous, or queued (on the stream, and to the progress thread
// unless it runs on the device alone): lib/device/stream_calls.cc says when and how.
ddl_result_t start_on_stream(ddl_comm_t comm, ddl::CollectiveCall call, void *stream,
                             const char *what, const CountArrays *arrays = nullptr) {
  CommCall guard(comm, what);
  if (!guard.ok()) return guard.fail();
  if (ddl::in_group())
    return guard.finish(ddl::invalid_usage(
        "rank %d: %s: stream-ordered calls cannot be grouped; call it after ddl_group_end",
        comm->rank, what));
  if (arrays) {
    Status s = ddl::read_counts(comm, *arrays, &call);
    if (!s.ok()) return guard.finish(s.prefix(ddl::strprintf("rank %d: %s: ", comm->rank, what)));
  }
  // The others (alltoall(v), reduce, gather, scatter) wait for the stream in every mode.
  const bool queued_form = ddl::device::queues_on_stream(call.collective);
  bool alone = false;
  Status queued_alone =
      queued_form ? ddl::device::queue_alone(comm, call, stream, &alone) : Status::Ok();
  if (!queued_alone.ok() || alone) return guard.finish(queued_alone);
  if (!queued_form || !ddl::device::stream_calls_async(comm)) {
    Status s = ddl::device::wait_for_stream(comm, call, stream);
    return guard.finish(s.ok() ? ddl::run_blocking(comm, call) : s);
  }
  ddl::CollectiveCall queued = call;
  bool on_device_only = false;
  Status s = ddl::device::start_stream_call(comm, &queued, stream, &on_device_only);
  if (!s.ok() || on_device_only) return guard.finish(s);
  // Nobody waits on its request but drain().
  ddl::progress_of(comm).submit(ddl::job_of(queued, ddl::new_request(comm, call)));
  return DDL_SUCCESS;
}

// A finished request's result; its words go to the calling thread's last error.
ddl_result_t request_result(const Status &s) {
  if (s.ok()) return DDL_SUCCESS;
  ddl::thread_last_error() = s.message();
  return s.code();
}

// The call each entry point stands for; blocking, nonblocking and stream-ordered forms share
// them. Enum arguments from C are read as raw integers (ddl::raw_enum_value) and checked as
// such: C lets a caller pass any int, and loading an out-of-range value as a C++ enum is
// undefined.
// The call of an entry point: its fields by name, the rest as default.
ddl::CollectiveCall data_call(ddl::Collective collective, const void *sendbuf, void *recvbuf,
                              size_t count, ddl_datatype_t dtype, int root = 0) {
  ddl::CollectiveCall call;
  call.collective = collective;
  call.sendbuf = sendbuf;
  call.recvbuf = recvbuf;
  call.count = count;
  call.dtype = ddl::raw_enum_value(dtype);
  call.root = root;
  return call;
}
// A reduction of `count` elements with no root: allreduce, scan, exscan.
ddl::CollectiveCall reducing_call(ddl::Collective collective, const void *sendbuf, void *recvbuf,
                                  size_t count, ddl_datatype_t dtype, ddl_op_t op) {
  ddl::CollectiveCall call = data_call(collective, sendbuf, recvbuf, count, dtype);
  call.op = ddl::raw_enum_value(op);
  return call;
}
ddl::CollectiveCall allreduce_call(const void *sendbuf, void *recvbuf, size_t count,
                                   ddl_datatype_t dtype, ddl_op_t op) {
  return reducing_call(ddl::Collective::kAllreduce, sendbuf, recvbuf, count, dtype, op);
}
ddl::CollectiveCall broadcast_call(void *buf, size_t count, ddl_datatype_t dtype, int root) {
  return data_call(ddl::Collective::kBroadcast, buf, buf, count, dtype, root);
}
ddl::CollectiveCall allgather_call(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   ddl_datatype_t dtype) {
  return data_call(ddl::Collective::kAllgather, sendbuf, recvbuf, sendcount, dtype);
}
ddl::CollectiveCall reduce_scatter_call(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ddl_datatype_t dtype, ddl_op_t op) {
  ddl::CollectiveCall call =
      data_call(ddl::Collective::kReduceScatter, sendbuf, recvbuf, recvcount, dtype);
  call.op = ddl::raw_enum_value(op);
  return call;
}
ddl::CollectiveCall barrier_call() {
  return data_call(ddl::Collective::kBarrier, nullptr, nullptr, 0, DDL_UINT8);
}
ddl::CollectiveCall reduce_call(const void *sendbuf, void *recvbuf, size_t count,
                                ddl_datatype_t dtype, ddl_op_t op, int root) {
  ddl::CollectiveCall call =
      data_call(ddl::Collective::kReduce, sendbuf, recvbuf, count, dtype, root);
  call.op = ddl::raw_enum_value(op);
  return call;
}
ddl::CollectiveCall p2p_call(ddl::Collective collective, const void *sendbuf, void *recvbuf,
                             size_t count, ddl_datatype_t dtype, int peer, int tag = 0,
                             int *source = nullptr) {
  ddl::CollectiveCall call = data_call(collective, sendbuf, recvbuf, count, dtype);
  call.peer = peer;
  call.tag = tag;
  call.source = source;
  return call;
}
CountArrays alltoallv_arrays(const size_t *sendcounts, const size_t *sdispls,
                             const size_t *recvcounts, const size_t *rdispls) {
  return {sendcounts, sdispls, recvcounts, rdispls};
}
CountArrays gatherv_arrays(const size_t *recvcounts, const size_t *displs) {
  return {nullptr, nullptr, recvcounts, displs};
}
CountArrays scatterv_arrays(const size_t *sendcounts, const size_t *displs) {
  return {sendcounts, displs, nullptr, nullptr};
}

}  // namespace

extern "C" {

ddl_result_t ddl_allreduce(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                           ddl_op_t op, ddl_comm_t comm) {
  return run(comm, allreduce_call(sendbuf, recvbuf, count, dtype, op));
}

ddl_result_t ddl_broadcast(void *buf, size_t count, ddl_datatype_t dtype, int root,
                           ddl_comm_t comm) {
  return run(comm, broadcast_call(buf, count, dtype, root));
}

ddl_result_t ddl_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                           ddl_datatype_t dtype, ddl_comm_t comm) {
  return run(comm, allgather_call(sendbuf, recvbuf, sendcount, dtype));
}

ddl_result_t ddl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm) {
  return run(comm, reduce_scatter_call(sendbuf, recvbuf, recvcount, dtype, op));
}

ddl_result_t ddl_barrier(ddl_comm_t comm) {
  return run(comm, barrier_call());
}

ddl_result_t ddl_iallreduce(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                            ddl_op_t op, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, allreduce_call(sendbuf, recvbuf, count, dtype, op), request, "ddl_iallreduce");
}

ddl_result_t ddl_ibroadcast(void *buf, size_t count, ddl_datatype_t dtype, int root,
                            ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, broadcast_call(buf, count, dtype, root), request, "ddl_ibroadcast");
}

ddl_result_t ddl_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            ddl_datatype_t dtype, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, allgather_call(sendbuf, recvbuf, sendcount, dtype), request, "ddl_iallgather");
}

ddl_result_t ddl_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                 ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                 ddl_request_t *request) {
  return start(comm, reduce_scatter_call(sendbuf, recvbuf, recvcount, dtype, op), request,
               "ddl_ireduce_scatter");
}

ddl_result_t ddl_ibarrier(ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, barrier_call(), request, "ddl_ibarrier");
}

ddl_result_t ddl_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                  ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                  void *cuda_stream) {
  return start_on_stream(comm, allreduce_call(sendbuf, recvbuf, count, dtype, op), cuda_stream,
                         "ddl_allreduce_stream");
}

ddl_result_t ddl_broadcast_stream(void *buf, size_t count, ddl_datatype_t dtype, int root,
                                  ddl_comm_t comm, void *cuda_stream) {
  return start_on_stream(comm, broadcast_call(buf, count, dtype, root), cuda_stream,
                         "ddl_broadcast_stream");
}

ddl_result_t ddl_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  ddl_datatype_t dtype, ddl_comm_t comm, void *cuda_stream) {
  return start_on_stream(comm, allgather_call(sendbuf, recvbuf, sendcount, dtype), cuda_stream,
                         "ddl_allgather_stream");
}

ddl_result_t ddl_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                       void *cuda_stream) {
  return start_on_stream(comm, reduce_scatter_call(sendbuf, recvbuf, recvcount, dtype, op),
                         cuda_stream, "ddl_reduce_scatter_stream");
}

ddl_result_t ddl_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                 ddl_datatype_t dtype, ddl_comm_t comm, void *cuda_stream) {
  return start_on_stream(comm,
                         data_call(ddl::Collective::kAlltoall, sendbuf, recvbuf, count, dtype),
                         cuda_stream, "ddl_alltoall_stream");
}

ddl_result_t ddl_alltoallv_stream(const void *sendbuf, const size_t *sendcounts,
                                  const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                  const size_t *rdispls, ddl_datatype_t dtype, ddl_comm_t comm,
                                  void *cuda_stream) {
  const CountArrays arrays = alltoallv_arrays(sendcounts, sdispls, recvcounts, rdispls);
  return start_on_stream(comm, data_call(ddl::Collective::kAlltoallv, sendbuf, recvbuf, 0, dtype),
                         cuda_stream, "ddl_alltoallv_stream", &arrays);
}

ddl_result_t ddl_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                               ddl_datatype_t dtype, ddl_op_t op, int root, ddl_comm_t comm,
                               void *cuda_stream) {
  return start_on_stream(comm, reduce_call(sendbuf, recvbuf, count, dtype, op, root), cuda_stream,
                         "ddl_reduce_stream");
}

ddl_result_t ddl_gather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                               ddl_datatype_t dtype, int root, ddl_comm_t comm, void *cuda_stream) {
  return start_on_stream(
      comm, data_call(ddl::Collective::kGather, sendbuf, recvbuf, sendcount, dtype, root),
      cuda_stream, "ddl_gather_stream");
}

ddl_result_t ddl_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                void *cuda_stream) {
  return start_on_stream(
      comm, data_call(ddl::Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, root),
      cuda_stream, "ddl_scatter_stream");
}

ddl_result_t ddl_alltoall(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                          ddl_comm_t comm) {
  return run(comm, data_call(ddl::Collective::kAlltoall, sendbuf, recvbuf, count, dtype));
}

ddl_result_t ddl_alltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                           void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                           ddl_datatype_t dtype, ddl_comm_t comm) {
  const CountArrays arrays = alltoallv_arrays(sendcounts, sdispls, recvcounts, rdispls);
  return run(comm, data_call(ddl::Collective::kAlltoallv, sendbuf, recvbuf, 0, dtype), &arrays);
}

ddl_result_t ddl_reduce(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                        ddl_op_t op, int root, ddl_comm_t comm) {
  return run(comm, reduce_call(sendbuf, recvbuf, count, dtype, op, root));
}

ddl_result_t ddl_gather(const void *sendbuf, void *recvbuf, size_t sendcount, ddl_datatype_t dtype,
                        int root, ddl_comm_t comm) {
  return run(comm, data_call(ddl::Collective::kGather, sendbuf, recvbuf, sendcount, dtype, root));
}

ddl_result_t ddl_gatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                         const size_t *recvcounts, const size_t *displs, ddl_datatype_t dtype,
                         int root, ddl_comm_t comm) {
  const CountArrays arrays = gatherv_arrays(recvcounts, displs);
  return run(comm, data_call(ddl::Collective::kGatherv, sendbuf, recvbuf, sendcount, dtype, root),
             &arrays);
}

ddl_result_t ddl_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                            const size_t *recvcounts, const size_t *displs, ddl_datatype_t dtype,
                            ddl_comm_t comm) {
  const CountArrays arrays = gatherv_arrays(recvcounts, displs);
  return run(comm, data_call(ddl::Collective::kAllgatherv, sendbuf, recvbuf, sendcount, dtype),
             &arrays);
}

ddl_result_t ddl_reduce_scatterv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                 ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm) {
  const CountArrays arrays = gatherv_arrays(recvcounts, nullptr);
  ddl::CollectiveCall call =
      data_call(ddl::Collective::kReduceScatterv, sendbuf, recvbuf, 0, dtype);
  call.op = ddl::raw_enum_value(op);
  return run(comm, call, &arrays);
}

ddl_result_t ddl_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, ddl_datatype_t dtype,
                         int root, ddl_comm_t comm) {
  return run(comm, data_call(ddl::Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, root));
}

ddl_result_t ddl_scatterv(const void *sendbuf, const size_t *sendcounts, const size_t *displs,
                          void *recvbuf, size_t recvcount, ddl_datatype_t dtype, int root,
                          ddl_comm_t comm) {
  const CountArrays arrays = scatterv_arrays(sendcounts, displs);
  return run(comm, data_call(ddl::Collective::kScatterv, sendbuf, recvbuf, recvcount, dtype, root),
             &arrays);
}

ddl_result_t ddl_send(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                      ddl_comm_t comm) {
  return run(comm, p2p_call(ddl::Collective::kSend, buf, nullptr, count, dtype, peer));
}

ddl_result_t ddl_recv(void *buf, size_t count, ddl_datatype_t dtype, int peer, ddl_comm_t comm) {
  return run(comm, p2p_call(ddl::Collective::kRecv, nullptr, buf, count, dtype, peer));
}

ddl_result_t ddl_send_tag(const void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                          ddl_comm_t comm) {
  return run(comm, p2p_call(ddl::Collective::kSend, buf, nullptr, count, dtype, peer, tag));
}

ddl_result_t ddl_recv_tag(void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                          ddl_comm_t comm, int *source) {
  return run(comm, p2p_call(ddl::Collective::kRecv, nullptr, buf, count, dtype, peer, tag, source));
}

ddl_result_t ddl_ialltoall(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                           ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, data_call(ddl::Collective::kAlltoall, sendbuf, recvbuf, count, dtype), request,
               "ddl_ialltoall");
}

ddl_result_t ddl_ialltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                            void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                            ddl_datatype_t dtype, ddl_comm_t comm, ddl_request_t *request) {
  const CountArrays arrays = alltoallv_arrays(sendcounts, sdispls, recvcounts, rdispls);
  return start(comm, data_call(ddl::Collective::kAlltoallv, sendbuf, recvbuf, 0, dtype), request,
               "ddl_ialltoallv", &arrays);
}

ddl_result_t ddl_ireduce(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                         ddl_op_t op, int root, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, reduce_call(sendbuf, recvbuf, count, dtype, op, root), request, "ddl_ireduce");
}

ddl_result_t ddl_igather(const void *sendbuf, void *recvbuf, size_t sendcount, ddl_datatype_t dtype,
                         int root, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, data_call(ddl::Collective::kGather, sendbuf, recvbuf, sendcount, dtype, root),
               request, "ddl_igather");
}

ddl_result_t ddl_igatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                          const size_t *recvcounts, const size_t *displs, ddl_datatype_t dtype,
                          int root, ddl_comm_t comm, ddl_request_t *request) {
  const CountArrays arrays = gatherv_arrays(recvcounts, displs);
  return start(comm, data_call(ddl::Collective::kGatherv, sendbuf, recvbuf, sendcount, dtype, root),
               request, "ddl_igatherv", &arrays);
}

ddl_result_t ddl_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                             const size_t *recvcounts, const size_t *displs, ddl_datatype_t dtype,
                             ddl_comm_t comm, ddl_request_t *request) {
  const CountArrays arrays = gatherv_arrays(recvcounts, displs);
  return start(comm, data_call(ddl::Collective::kAllgatherv, sendbuf, recvbuf, sendcount, dtype),
               request, "ddl_iallgatherv", &arrays);
}

ddl_result_t ddl_ireduce_scatterv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                  ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                  ddl_request_t *request) {
  const CountArrays arrays = gatherv_arrays(recvcounts, nullptr);
  ddl::CollectiveCall call =
      data_call(ddl::Collective::kReduceScatterv, sendbuf, recvbuf, 0, dtype);
  call.op = ddl::raw_enum_value(op);
  return start(comm, call, request, "ddl_ireduce_scatterv", &arrays);
}

ddl_result_t ddl_scan(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                      ddl_op_t op, ddl_comm_t comm) {
  return run(comm, reducing_call(ddl::Collective::kScan, sendbuf, recvbuf, count, dtype, op));
}

ddl_result_t ddl_exscan(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                        ddl_op_t op, ddl_comm_t comm) {
  return run(comm, reducing_call(ddl::Collective::kExscan, sendbuf, recvbuf, count, dtype, op));
}

ddl_result_t ddl_iscan(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                       ddl_op_t op, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, reducing_call(ddl::Collective::kScan, sendbuf, recvbuf, count, dtype, op),
               request, "ddl_iscan");
}

ddl_result_t ddl_iexscan(const void *sendbuf, void *recvbuf, size_t count, ddl_datatype_t dtype,
                         ddl_op_t op, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, reducing_call(ddl::Collective::kExscan, sendbuf, recvbuf, count, dtype, op),
               request, "ddl_iexscan");
}

ddl_result_t ddl_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                          ddl_datatype_t dtype, int root, ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, data_call(ddl::Collective::kScatter, sendbuf, recvbuf, recvcount, dtype, root),
               request, "ddl_iscatter");
}

ddl_result_t ddl_iscatterv(const void *sendbuf, const size_t *sendcounts, const size_t *displs,
                           void *recvbuf, size_t recvcount, ddl_datatype_t dtype, int root,
                           ddl_comm_t comm, ddl_request_t *request) {
  const CountArrays arrays = scatterv_arrays(sendcounts, displs);
  return start(comm,
               data_call(ddl::Collective::kScatterv, sendbuf, recvbuf, recvcount, dtype, root),
               request, "ddl_iscatterv", &arrays);
}

ddl_result_t ddl_isend(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                       ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, p2p_call(ddl::Collective::kSend, buf, nullptr, count, dtype, peer), request,
               "ddl_isend");
}

ddl_result_t ddl_irecv(void *buf, size_t count, ddl_datatype_t dtype, int peer, ddl_comm_t comm,
                       ddl_request_t *request) {
  return start(comm, p2p_call(ddl::Collective::kRecv, nullptr, buf, count, dtype, peer), request,
               "ddl_irecv");
}

ddl_result_t ddl_isend_tag(const void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                           ddl_comm_t comm, ddl_request_t *request) {
  return start(comm, p2p_call(ddl::Collective::kSend, buf, nullptr, count, dtype, peer, tag),
               request, "ddl_isend_tag");
}

ddl_result_t ddl_irecv_tag(void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                           ddl_comm_t comm, int *source, ddl_request_t *request) {
  return start(comm,
               p2p_call(ddl::Collective::kRecv, nullptr, buf, count, dtype, peer, tag, source),
               request, "ddl_irecv_tag");
}

ddl_result_t ddl_test(ddl_request_t request, int *done) {
  if (!done) return fail_without_comm(ddl::invalid_argument("ddl_test: done is NULL"));
  *done = 0;
  std::shared_ptr<ddl::RequestState> state = live_request(request);
  if (!state)
    return fail_without_comm(ddl::invalid_usage(
        "ddl_test: %p is not a live request (freed, or never returned by a ddl_i* call)",
        static_cast<void *>(request)));
  state->poll_if_parked();
  if (!state->done()) return DDL_SUCCESS;
  *done = 1;
  return request_result(state->status());
}

ddl_result_t ddl_wait(ddl_request_t request) {
  std::shared_ptr<ddl::RequestState> state = live_request(request);
  if (!state)
    return fail_without_comm(ddl::invalid_usage(
        "ddl_wait: %p is not a live request (freed, or never returned by a ddl_i* call)",
        static_cast<void *>(request)));
  return request_result(state->wait());
}

ddl_result_t ddl_request_free(ddl_request_t request) {
  if (!request) return DDL_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(g_requests_mu);
    if (!g_requests.erase(request))
      return fail_without_comm(
          ddl::invalid_usage("ddl_request_free: %p is not a live request (freed twice?)",
                             static_cast<void *>(request)));
  }
  delete request;  // the queue keeps its share until the collective has run
  return DDL_SUCCESS;
}

ddl_result_t ddl_group_start(void) {
  ddl::group_start();
  return DDL_SUCCESS;
}

ddl_result_t ddl_group_end(void) {
  Status s = ddl::group_end();
  if (!s.ok()) return fail_without_comm(s);
  return DDL_SUCCESS;
}

}  // extern "C"

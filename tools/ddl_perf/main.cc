// ddl_perf: nccl-tests-style performance and correctness test of ddl's collectives.
// Runs under ddlrun (ddlrun -n 2 ddl_perf ...) or any launcher ddl_comm_init_from_env knows.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddl/ddl.h"
#include "lib/common/datatype.h"
#include "perf_device.h"
#include "perf_driver.h"

namespace {

// Errors are printed once (issue 28), not once by ddl and again here: ddl logs every failed
// call at level error, which no DDL_LOG_LEVEL hides ("ddl[1] error: <the words
// ddl_comm_last_error returns>", before the call returns). So the tool adds only what it was
// doing and the result code, and points at that line instead of repeating it. `rank` < 0:
// before there is a communicator.
void report_failure(int rank, const std::string &what, ddl_result_t result) {
  const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
  std::fprintf(stderr, "ddl_perf: %s%s failed (%s); the cause is in ddl's error line above\n",
               who.c_str(), what.c_str(), ddl_result_string(result));
}

class DdlBackend : public ddl_perf::CollectiveBackend {
 public:
  // stream_ordered (-S): the collectives with *_stream forms through them, on the default
  // stream.
  DdlBackend(ddl_comm_t comm, bool stream_ordered) : comm_(comm), stream_(stream_ordered) {
    check(ddl_comm_rank(comm_, &rank_), "ddl_comm_rank");
    check(ddl_comm_size(comm_, &nranks_), "ddl_comm_size");
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  std::string library() const override {
    int major = 0, minor = 0, patch = 0;
    ddl_get_version(&major, &minor, &patch);
    return "ddl " + std::to_string(major) + "." + std::to_string(minor) + "." +
           std::to_string(patch);
  }

  std::vector<std::string> notes(ddl_perf::Collective) const override {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    return {"rank 0: pid " + std::to_string(getpid()) + " on " + host};
  }

  std::string unsupported(ddl_perf::Collective collective, ddl_datatype_t,
                          ddl_op_t op) const override {
    const bool scan =
        collective == ddl_perf::Collective::kScan || collective == ddl_perf::Collective::kExscan;
    if (scan && op == DDL_AVG) return "DDL_AVG is not an op of the scans";
    return "";  // else ddl answers for itself: DDL_ERR_UNSUPPORTED shows up as N/A
  }

  bool run(ddl_perf::Collective collective, const void *send, void *recv, size_t count,
           ddl_datatype_t dtype, ddl_op_t op, int root) override {
    ddl_result_t result = DDL_SUCCESS;
    const char *call = "";
    switch (collective) {
      case ddl_perf::Collective::kAllreduce:
        call = stream_ ? "ddl_allreduce_stream" : "ddl_allreduce";
        result = stream_ ? ddl_allreduce_stream(send, recv, count, dtype, op, comm_, nullptr)
                         : ddl_allreduce(send, recv, count, dtype, op, comm_);
        break;
      case ddl_perf::Collective::kBroadcast:
        call = stream_ ? "ddl_broadcast_stream" : "ddl_broadcast";
        result = stream_ ? ddl_broadcast_stream(recv, count, dtype, root, comm_, nullptr)
                         : ddl_broadcast(recv, count, dtype, root, comm_);
        break;
      case ddl_perf::Collective::kAllgather:
        call = stream_ ? "ddl_allgather_stream" : "ddl_allgather";
        result = stream_ ? ddl_allgather_stream(send, recv, count, dtype, comm_, nullptr)
                         : ddl_allgather(send, recv, count, dtype, comm_);
        break;
      case ddl_perf::Collective::kReduceScatter:
        call = stream_ ? "ddl_reduce_scatter_stream" : "ddl_reduce_scatter";
        result = stream_ ? ddl_reduce_scatter_stream(send, recv, count, dtype, op, comm_, nullptr)
                         : ddl_reduce_scatter(send, recv, count, dtype, op, comm_);
        break;
      case ddl_perf::Collective::kBarrier:
        call = "ddl_barrier";
        result = ddl_barrier(comm_);
        break;
      case ddl_perf::Collective::kAlltoall:
        call = stream_ ? "ddl_alltoall_stream" : "ddl_alltoall";
        result = stream_ ? ddl_alltoall_stream(send, recv, count, dtype, comm_, nullptr)
                         : ddl_alltoall(send, recv, count, dtype, comm_);
        break;
      case ddl_perf::Collective::kReduce:
        call = stream_ ? "ddl_reduce_stream" : "ddl_reduce";
        result = stream_ ? ddl_reduce_stream(send, recv, count, dtype, op, root, comm_, nullptr)
                         : ddl_reduce(send, recv, count, dtype, op, root, comm_);
        break;
      case ddl_perf::Collective::kGather:
        call = stream_ ? "ddl_gather_stream" : "ddl_gather";
        result = stream_ ? ddl_gather_stream(send, recv, count, dtype, root, comm_, nullptr)
                         : ddl_gather(send, recv, count, dtype, root, comm_);
        break;
      case ddl_perf::Collective::kScatter:
        call = stream_ ? "ddl_scatter_stream" : "ddl_scatter";
        result = stream_ ? ddl_scatter_stream(send, recv, count, dtype, root, comm_, nullptr)
                         : ddl_scatter(send, recv, count, dtype, root, comm_);
        break;
      case ddl_perf::Collective::kScan:
        call = "ddl_scan";
        result = ddl_scan(send, recv, count, dtype, op, comm_);
        break;
      case ddl_perf::Collective::kExscan:
        call = "ddl_exscan";
        result = ddl_exscan(send, recv, count, dtype, op, comm_);
        break;
      case ddl_perf::Collective::kSendRecv:
        call = "ddl_send/ddl_recv (grouped)";
        result = send_recv(send, recv, count, dtype);
        break;
    }
    if (result == DDL_ERR_UNSUPPORTED) return false;
    if (result == DDL_SUCCESS) return true;  // the message below is built only on failure
    check(result, std::string(call) + describe(collective, send, recv, count, dtype, op, root));
    return true;
  }

  // "(count 524288, float32, root 1, in place)": the arguments that matter to `collective`.
  std::string describe(ddl_perf::Collective collective, const void *send, const void *recv,
                       size_t count, ddl_datatype_t dtype, ddl_op_t op, int root) const {
    using ddl_perf::Collective;
    std::string text = "(count " + std::to_string(count) + ", " + ddl::datatype_name(dtype);
    if (ddl_perf::collective_reduces(collective)) text += std::string(", ") + ddl::op_name(op);
    if (ddl_perf::collective_rooted(collective)) text += ", root " + std::to_string(root);
    // In place as ddl_perf lays it out (perf_driver.cc): the rank's block of the whole buffer.
    const size_t block = count * ddl_datatype_size(dtype) * static_cast<size_t>(rank_);
    const auto *s = static_cast<const unsigned char *>(send);
    const auto *r = static_cast<const unsigned char *>(recv);
    const bool gathers = collective == Collective::kAllgather || collective == Collective::kGather;
    const bool scatters =
        collective == Collective::kReduceScatter || collective == Collective::kScatter;
    const bool in_place = gathers ? s == r + block : scatters ? r == s + block : s == r;
    if (in_place && collective != Collective::kBroadcast && collective != Collective::kBarrier) {
      text += ", in place";
    }
    return text + ")";
  }

  // nccl-tests' sendrecv: to the next rank, from the previous, in one group.
  ddl_result_t send_recv(const void *send, void *recv, size_t count, ddl_datatype_t dtype) {
    // nccl-tests sends to itself; ddl has no send to oneself, and a one-rank alltoall is the
    // same copy (of device memory too, with -G).
    if (nranks_ == 1) return ddl_alltoall(send, recv, count, dtype, comm_);
    const int to = (rank_ + 1) % nranks_, from = (rank_ + nranks_ - 1) % nranks_;
    ddl_group_start();
    ddl_result_t r = ddl_send(send, count, dtype, to, comm_);
    if (r == DDL_SUCCESS) r = ddl_recv(recv, count, dtype, from, comm_);
    const ddl_result_t end = ddl_group_end();
    return r != DDL_SUCCESS ? r : end;
  }

  void *library_alloc(size_t bytes) override {
    void *buffer = nullptr;
    return ddl_mem_alloc(&buffer, bytes) == DDL_SUCCESS ? buffer : nullptr;
  }
  void library_free(void *buffer) override { ddl_mem_free(buffer); }
  void barrier() override { check(ddl_barrier(comm_), "ddl_barrier"); }

  double max_across_ranks(double value) override {
    double result = 0;
    check(ddl_allreduce(&value, &result, 1, DDL_FLOAT64, DDL_MAX, comm_),
          "ddl_allreduce(max of the times)");
    return result;
  }

  uint64_t sum_across_ranks(uint64_t value) override {
    uint64_t result = 0;
    check(ddl_allreduce(&value, &result, 1, DDL_UINT64, DDL_SUM, comm_),
          "ddl_allreduce(sum of the wrong counts)");
    return result;
  }

 private:
  // Any error is the end of the run: say which call failed on which rank.
  void check(ddl_result_t result, const std::string &what) {
    if (result == DDL_SUCCESS) return;
    report_failure(rank_, what, result);
    ddl_comm_abort(comm_);
    ddl_comm_destroy(comm_);
    std::exit(1);
  }

  ddl_comm_t comm_;
  bool stream_;
  int rank_ = -1;
  int nranks_ = 0;
};

// -G: every rank has opened its GPU (before its communicator, as NCCL and PyTorch expect,
// so that ddl knows which GPU the rank uses); all of them learn whether every rank could, so
// that one rank's failure ends the run everywhere with words rather than hangs the others.
bool every_rank_opened(ddl_comm_t comm, bool opened, const std::string &error) {
  int rank = 0;
  ddl_comm_rank(comm, &rank);
  if (!opened) std::fprintf(stderr, "ddl_perf: rank %d: -G: %s\n", rank, error.c_str());
  int32_t mine = opened ? 1 : 0, all = 0;
  const ddl_result_t r = ddl_allreduce(&mine, &all, 1, DDL_INT32, DDL_MIN, comm);
  if (r != DDL_SUCCESS) {
    report_failure(rank, "ddl_allreduce (did every rank open its GPU?)", r);
    return false;
  }
  if (opened && !all)
    std::fprintf(stderr, "ddl_perf: rank %d: -G: another rank could not open its GPU\n", rank);
  return all == 1;
}

}  // namespace

int main(int argc, char **argv) {
  ddl_perf::PerfOptions options;
  std::string error;
  switch (ddl_perf::parse_perf_options(argc, argv, &options, &error)) {
    case ddl_perf::ParseOutcome::kHelp:
      std::fputs(ddl_perf::perf_usage("ddl_perf").c_str(), stdout);
      return 0;
    case ddl_perf::ParseOutcome::kError:
      std::fprintf(stderr, "ddl_perf: %s\nTry 'ddl_perf --help'.\n", error.c_str());
      return 2;
    case ddl_perf::ParseOutcome::kRun:
      break;
  }

  // The library reads DDL_ALGO when the communicator is created.
  if (!options.algorithm.empty()) setenv("DDL_ALGO", options.algorithm.c_str(), 1);
  ddl_perf::DeviceMemory device;
  const bool opened = !options.device_memory ||
                      device.open(options.device, ddl_perf::local_rank_from_env(), &error);
  ddl_comm_t comm = nullptr;
  ddl_result_t result = ddl_comm_init_from_env(&comm);
  if (result != DDL_SUCCESS) {
    report_failure(-1, "ddl_comm_init_from_env", result);
    return 1;
  }
  int status = 0;
  if (options.device_memory && !every_rank_opened(comm, opened, error)) status = 1;
  if (status == 0) {
    DdlBackend backend(comm, options.stream);
    status = ddl_perf::run_perf(options, backend, "ddl_perf", &device);
  }
  result = ddl_comm_destroy(comm);
  if (result != DDL_SUCCESS) {
    report_failure(-1, "ddl_comm_destroy", result);
    if (status == 0) status = 1;
  }
  return status;
}

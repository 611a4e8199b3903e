// mpi_allreduce: MPI_Allreduce (and friends) measured with ddl_perf's driver, so that the
// flags, sizes, timing method and table are the same as ddl_perf's and the two compare
// directly. Built against the system's MPI (Debian's Open MPI here).
#define OMPI_SKIP_MPICXX 1  // the C API is enough; the C++ bindings are deprecated
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "lib/common/datatype.h"
#include "perf_driver.h"

namespace {

using ddl_perf::Collective;

MPI_Datatype mpi_datatype(ddl_datatype_t dtype) {
  switch (dtype) {
    case DDL_INT8:
      return MPI_INT8_T;
    case DDL_UINT8:
      return MPI_UINT8_T;
    case DDL_INT32:
      return MPI_INT32_T;
    case DDL_UINT32:
      return MPI_UINT32_T;
    case DDL_INT64:
      return MPI_INT64_T;
    case DDL_UINT64:
      return MPI_UINT64_T;
    case DDL_FLOAT32:
      return MPI_FLOAT;
    case DDL_FLOAT64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;  // float16, bfloat16: no standard MPI type
  }
}

MPI_Op mpi_op(ddl_op_t op) {
  switch (op) {
    case DDL_SUM:
      return MPI_SUM;
    case DDL_PROD:
      return MPI_PROD;
    case DDL_MIN:
      return MPI_MIN;
    case DDL_MAX:
      return MPI_MAX;
    default:
      return MPI_OP_NULL;  // avg: MPI has none
  }
}

class MpiBackend : public ddl_perf::CollectiveBackend {
 public:
  MpiBackend() {
    // Errors come back to us, so that the message names the call and the rank.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  std::string library() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version);
    size_t end = text.find_first_of(",\n");  // "Open MPI v4.1.4, package: ..." -> first part
    return end == std::string::npos ? text : text.substr(0, end);
  }

  std::vector<std::string> notes(Collective collective) const override {
    if (collective != Collective::kReduceScatter) return {};
    return {"in-place reduce_scatter is N/A: MPI's in-place form uses another layout"};
  }

  std::string unsupported(Collective collective, ddl_datatype_t dtype, ddl_op_t op) const override {
    if (mpi_datatype(dtype) == MPI_DATATYPE_NULL) {
      return std::string("MPI has no ") + ddl::datatype_name(dtype) + " datatype";
    }
    if (ddl_perf::collective_reduces(collective) && mpi_op(op) == MPI_OP_NULL) {
      return std::string("MPI has no ") + ddl::op_name(op) + " operation";
    }
    return "";
  }

  bool run(Collective collective, const void *send, void *recv, size_t count, ddl_datatype_t dtype,
           ddl_op_t op, int root) override {
    MPI_Datatype type = mpi_datatype(dtype);
    int n = static_cast<int>(count);  // MPI counts are int; the sizes measured here fit
    size_t block = count * ddl::datatype_size(dtype);
    auto *recv_bytes = static_cast<unsigned char *>(recv);
    int rc = MPI_SUCCESS;
    switch (collective) {
      case Collective::kAllreduce:
        rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op(op),
                           MPI_COMM_WORLD);
        break;
      case Collective::kBroadcast:
        rc = MPI_Bcast(recv, n, type, root, MPI_COMM_WORLD);
        break;
      case Collective::kAllgather:
        if (send == recv_bytes + static_cast<size_t>(rank_) * block) {
          rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, type, MPI_COMM_WORLD);
        } else {
          rc = MPI_Allgather(send, n, type, recv, n, type, MPI_COMM_WORLD);
        }
        break;
      case Collective::kReduceScatter:
        if (recv_bytes == static_cast<const unsigned char *>(send) + rank_ * block) return false;
        rc = MPI_Reduce_scatter_block(send, recv, n, type, mpi_op(op), MPI_COMM_WORLD);
        break;
      case Collective::kBarrier:
        rc = MPI_Barrier(MPI_COMM_WORLD);
        break;
      case Collective::kAlltoall:
        rc = MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, n, type, recv, n, type,
                          MPI_COMM_WORLD);
        break;
      case Collective::kReduce:
        rc = MPI_Reduce(send == recv && rank_ == root ? MPI_IN_PLACE : send, recv, n, type,
                        mpi_op(op), root, MPI_COMM_WORLD);
        break;
      case Collective::kGather: {
        const bool in_place = send == recv_bytes + static_cast<size_t>(rank_) * block;
        rc = MPI_Gather(in_place && rank_ == root ? MPI_IN_PLACE : send, n, type, recv, n, type,
                        root, MPI_COMM_WORLD);
        break;
      }
      case Collective::kScatter: {
        const bool in_place =
            recv_bytes == static_cast<const unsigned char *>(send) + rank_ * block;
        rc = MPI_Scatter(send, n, type, in_place && rank_ == root ? MPI_IN_PLACE : recv, n, type,
                         root, MPI_COMM_WORLD);
        break;
      }
      case Collective::kScan:
        rc =
            MPI_Scan(send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op(op), MPI_COMM_WORLD);
        break;
      case Collective::kExscan:
        rc = MPI_Exscan(send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op(op),
                        MPI_COMM_WORLD);
        break;
      case Collective::kSendRecv:  // as ddl_perf's: to the next rank, from the previous
        rc = MPI_Sendrecv(send, n, type, (rank_ + 1) % nranks_, 0, recv, n, type,
                          (rank_ + nranks_ - 1) % nranks_, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
    check(rc, ddl_perf::collective_name(collective));
    return true;
  }

  void *library_alloc(size_t bytes) override {
    void *buffer = nullptr;
    return MPI_Alloc_mem(static_cast<MPI_Aint>(bytes), MPI_INFO_NULL, &buffer) == MPI_SUCCESS
               ? buffer
               : nullptr;
  }
  void library_free(void *buffer) override { MPI_Free_mem(buffer); }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  double max_across_ranks(double value) override {
    double result = 0;
    check(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce(max of the times)");
    return result;
  }

  uint64_t sum_across_ranks(uint64_t value) override {
    uint64_t result = 0;
    check(MPI_Allreduce(&value, &result, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce(sum of the wrong counts)");
    return result;
  }

 private:
  void check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    MPI_Error_string(rc, text, &length);
    std::fprintf(stderr, "mpi_allreduce: rank %d: %s failed: %s\n", rank_, what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  int rank_ = 0;
  int nranks_ = 1;
};

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ddl_perf::PerfOptions options;
  std::string error;
  int status = 0;
  switch (ddl_perf::parse_perf_options(argc, argv, &options, &error)) {
    case ddl_perf::ParseOutcome::kHelp:
      if (rank == 0) std::fputs(ddl_perf::perf_usage("mpi_allreduce").c_str(), stdout);
      break;
    case ddl_perf::ParseOutcome::kError:
      if (rank == 0) std::fprintf(stderr, "mpi_allreduce: %s\n", error.c_str());
      status = 2;
      break;
    case ddl_perf::ParseOutcome::kRun: {
      MpiBackend backend;
      status = ddl_perf::run_perf(options, backend, "mpi_allreduce");
      break;
    }
  }
  MPI_Finalize();
  return status;
}

#include "lib/core/count_arrays.h"

#include <memory>

#include "lib/algorithms/schedule.h"
#include "lib/core/comm.h"

namespace ddl {

Status read_counts(const ddl_comm *comm, const CountArrays &arrays, CollectiveCall *call) {
  const Collective c = call->collective;
  const bool root = comm->rank == call->root;
  const bool sends = c == Collective::kAlltoallv || (c == Collective::kScatterv && root);
  const bool receives = c == Collective::kAlltoallv || c == Collective::kAllgatherv ||
                        (c == Collective::kGatherv && root);
  if (c == Collective::kReduceScatterv) {
    // MPI_Reduce_scatter's one array: block j of every input (recvcounts[j] elements, packed
    // in rank order) reduced into rank j's output, this rank's count its own entry.
    auto layout = std::make_shared<BlockLayout>();
    if (!arrays.recv_counts) return invalid_argument("recvcounts is NULL");
    layout->send_counts.assign(arrays.recv_counts, arrays.recv_counts + comm->nranks);
    size_t at = 0;
    for (size_t count : layout->send_counts) {
      layout->send_displs.push_back(at);
      at += count;
    }
    call->count = layout->send_counts[static_cast<size_t>(comm->rank)];
    call->layout = std::move(layout);
    return Status::Ok();
  }
  const bool in_place = c == Collective::kAlltoallv && call->sendbuf == call->recvbuf;
  auto copy = [&](const size_t *from, const char *name, std::vector<size_t> *into) -> Status {
    if (!from) return invalid_argument("%s is NULL", name);
    into->assign(from, from + comm->nranks);
    return Status::Ok();
  };
  auto layout = std::make_shared<BlockLayout>();
  const bool send_side = sends && !(in_place && !arrays.send_counts && !arrays.send_displs);
  const char *send_displs = c == Collective::kAlltoallv ? "sdispls" : "displs";
  const char *recv_displs = c == Collective::kAlltoallv ? "rdispls" : "displs";
  if (send_side) {
    DDL_RETURN_IF_ERROR(copy(arrays.send_counts, "sendcounts", &layout->send_counts));
    DDL_RETURN_IF_ERROR(copy(arrays.send_displs, send_displs, &layout->send_displs));
  }
  if (receives) {
    DDL_RETURN_IF_ERROR(copy(arrays.recv_counts, "recvcounts", &layout->recv_counts));
    DDL_RETURN_IF_ERROR(copy(arrays.recv_displs, recv_displs, &layout->recv_displs));
  }
  call->layout = std::move(layout);
  return Status::Ok();
}

}  // namespace ddl

#include "lib/core/call_checks.h"

#include <cstdint>

#include "lib/common/datatype.h"

namespace ddl {
namespace {

bool overlaps(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

// The elements that counts/displs reach, or an error when one of them overflows.
Status checked_extent(const std::vector<size_t> &counts, const std::vector<size_t> &displs,
                      size_t elem, const char *what, size_t *extent) {
  for (size_t j = 0; j < counts.size(); ++j)
    if (displs[j] > SIZE_MAX / elem - counts[j])
      return invalid_argument(
          "%s of rank %zu (count %zu at displacement %zu) overflows the "
          "address space",
          what, j, counts[j], displs[j]);
  *extent = BlockLayout::extent(counts, displs);
  return Status::Ok();
}

// Whether this rank uses its send and its receive buffer in this call.
bool uses_send(const ddl_comm *comm, const CollectiveCall &call) {
  switch (call.collective) {
    case Collective::kBroadcast:
    case Collective::kBarrier:
    case Collective::kRecv:
      return false;
    case Collective::kScatter:
    case Collective::kScatterv:
      return comm->rank == call.root;
    default:
      return true;
  }
}
bool uses_recv(const ddl_comm *comm, const CollectiveCall &call) {
  switch (call.collective) {
    case Collective::kBarrier:
    case Collective::kSend:
      return false;
    case Collective::kReduce:
    case Collective::kGather:
    case Collective::kGatherv:
      return comm->rank == call.root;
    default:
      return true;
  }
}

// The layout's checks: an array per rank, the own block's sizes agreeing.
Status check_layout(const ddl_comm *comm, const CollectiveCall &call) {
  const size_t n = static_cast<size_t>(comm->nranks);
  const BlockLayout *layout = call.layout.get();
  if (!layout) return internal_error("%s without its counts", collective_name(call.collective));
  const size_t me = static_cast<size_t>(comm->rank);
  switch (call.collective) {
    case Collective::kAlltoallv:
      if (layout->send_counts.size() == n && layout->send_counts[me] != layout->recv_counts[me])
        return invalid_argument(
            "sendcounts[%zu] = %zu but recvcounts[%zu] = %zu: this rank's block to itself must "
            "have one size",
            me, layout->send_counts[me], me, layout->recv_counts[me]);
      return Status::Ok();
    case Collective::kGatherv:
      if (comm->rank == call.root && layout->recv_counts[me] != call.count)
        return invalid_argument(
            "recvcounts[%zu] = %zu but the root's own sendcount is %zu: they must be equal", me,
            layout->recv_counts[me], call.count);
      return Status::Ok();
    case Collective::kAllgatherv:
      if (layout->recv_counts[me] != call.count)
        return invalid_argument(
            "recvcounts[%zu] = %zu but this rank's sendcount is %zu: they must be equal", me,
            layout->recv_counts[me], call.count);
      return Status::Ok();
    case Collective::kScatterv:
      if (comm->rank == call.root && layout->send_counts[me] != call.count)
        return invalid_argument(
            "sendcounts[%zu] = %zu but the root's own recvcount is %zu: they must be equal", me,
            layout->send_counts[me], call.count);
      return Status::Ok();
    default:
      return Status::Ok();
  }
}

}  // namespace

CallExtents call_extents(const ddl_comm *comm, const CollectiveCall &call, bool in_place) {
  const size_t elem = datatype_size(call.dtype);
  const size_t n = static_cast<size_t>(comm->nranks);
  const size_t bytes = call.count * elem;
  const BlockLayout *layout = call.layout.get();
  CallExtents e;
  switch (call.collective) {
    case Collective::kAllgather:
      e = {bytes, bytes * n};
      break;
    case Collective::kReduceScatter:
      e = {bytes * n, bytes};
      break;
    case Collective::kAlltoall:
      e = {bytes * n, bytes * n};
      break;
    case Collective::kAlltoallv:
      e.recv = BlockLayout::extent(layout->recv_counts, layout->recv_displs) * elem;
      e.send =
          in_place ? e.recv : BlockLayout::extent(layout->send_counts, layout->send_displs) * elem;
      break;
    case Collective::kGather:
      e = {bytes, bytes * n};
      break;
    case Collective::kGatherv:
      e = {bytes, comm->rank == call.root
                      ? BlockLayout::extent(layout->recv_counts, layout->recv_displs) * elem
                      : 0};
      break;
    case Collective::kScatter:
      e = {bytes * n, bytes};
      break;
    case Collective::kAllgatherv:
      e = {bytes, BlockLayout::extent(layout->recv_counts, layout->recv_displs) * elem};
      break;
    case Collective::kReduceScatterv:
      e = {BlockLayout::extent(layout->send_counts, layout->send_displs) * elem, bytes};
      break;
    case Collective::kScatterv:
      e = {comm->rank == call.root
               ? BlockLayout::extent(layout->send_counts, layout->send_displs) * elem
               : 0,
           bytes};
      break;
    default:  // allreduce, broadcast, reduce, scan, exscan, send, recv
      e = {bytes, bytes};
      break;
  }
  if (!uses_send(comm, call)) e.send = 0;
  if (!uses_recv(comm, call)) e.recv = 0;
  return e;
}

BlockAt gathered_block(const CollectiveCall &call, int j) {
  const size_t elem = datatype_size(call.dtype);
  if (call.collective == Collective::kAllgatherv) {
    const BlockLayout &l = *call.layout;
    return {BlockLayout::at(l.recv_counts, l.recv_displs, j) * elem, l.recv_counts[j] * elem};
  }
  return {call.count * elem * static_cast<size_t>(j), call.count * elem};
}

size_t gathered_read_bytes(const ddl_comm *comm, const CollectiveCall &call) {
  size_t all = 0;
  for (int j = 0; j < comm->nranks; ++j) all += gathered_block(call, j).bytes;
  return all - all / static_cast<size_t>(comm->nranks);
}

bool call_in_place(const ddl_comm *comm, const CollectiveCall &call) {
  const Collective c = call.collective;
  if (c == Collective::kBroadcast || c == Collective::kBarrier) return true;
  const size_t elem = datatype_size(call.dtype);
  const char *send = static_cast<const char *>(call.sendbuf);
  const char *recv = static_cast<const char *>(call.recvbuf);
  const bool root = comm->rank == call.root;
  const BlockLayout *l = call.layout.get();
  const size_t block = call.count * elem;
  const size_t mine = block * static_cast<size_t>(comm->rank);
  switch (c) {
    case Collective::kAllgather:
      return send && send == recv + mine;
    case Collective::kReduceScatter:
      return recv && recv == send + mine;
    case Collective::kGather:
      return root && send && send == recv + block * static_cast<size_t>(call.root);
    case Collective::kGatherv:
      return root && send && send == recv + l->recv_displs[comm->rank] * elem;
    case Collective::kAllgatherv:
      return send && send == recv + l->recv_displs[comm->rank] * elem;
    case Collective::kReduceScatterv:
      return recv && recv == send + l->send_displs[comm->rank] * elem;
    case Collective::kScatter:
      return root && recv && recv == send + block * static_cast<size_t>(call.root);
    case Collective::kScatterv:
      return root && recv && recv == send + l->send_displs[comm->rank] * elem;
    case Collective::kReduce:
      return root && send && send == recv;
    case Collective::kSend:
    case Collective::kRecv:
      return false;
    default:  // allreduce, alltoall(v)
      return send && send == recv;
  }
}

Status check_call(const ddl_comm *comm, const CollectiveCall &call, bool *in_place) {
  const Collective c = call.collective;
  *in_place = false;
  if (!valid_datatype(call.dtype))
    return invalid_argument("datatype %d is not a ddl_datatype_t (0..%d)", call.dtype,
                            DDL_DATATYPE_COUNT - 1);
  if (reduces(c) && !valid_op(call.op))
    return invalid_argument("op %d is not a ddl_op_t (0..%d)", call.op, DDL_OP_COUNT - 1);
  if (is_scan(c) && call.op == DDL_AVG)
    return invalid_argument(
        "DDL_AVG is not an op of %s: each rank's result covers a different "
        "number of ranks (divide by rank%s yourself)",
        collective_name(c), c == Collective::kScan ? " + 1" : "");
  if (has_root(c) && (call.root < 0 || call.root >= comm->nranks))
    return invalid_argument("root %d is not a rank of this communicator (0..%d)", call.root,
                            comm->nranks - 1);
  if (is_point_to_point(c)) {
    if (call.tag < 0 || call.tag > DDL_TAG_UB)
      return invalid_argument("tag %d is not a message tag (0..%d)", call.tag, DDL_TAG_UB);
    const bool any_source = c == Collective::kRecv && call.peer == DDL_ANY_SOURCE;
    if (any_source && comm->nranks < 2)
      return invalid_argument(
          "a receive from any source needs another rank; this "
          "communicator has one");
    if (!any_source && (call.peer < 0 || call.peer >= comm->nranks))
      return invalid_argument("peer %d is not a rank of this communicator (0..%d%s)", call.peer,
                              comm->nranks - 1,
                              c == Collective::kRecv ? ", or DDL_ANY_SOURCE" : "");
    if (call.peer == comm->rank)
      return invalid_argument("peer %d is this rank: a rank cannot %s itself", call.peer,
                              c == Collective::kSend ? "send to" : "receive from");
  }
  const size_t elem = datatype_size(call.dtype);
  const size_t n = static_cast<size_t>(comm->nranks);
  const bool per_rank = c == Collective::kAllgather || c == Collective::kReduceScatter ||
                        c == Collective::kAlltoall || c == Collective::kGather ||
                        c == Collective::kScatter;
  if (call.count > SIZE_MAX / elem / (per_rank ? n : 1))
    return invalid_argument("count %zu of %s overflows the address space", call.count,
                            datatype_name(call.dtype));
  if (per_peer_counts(c)) {
    DDL_RETURN_IF_ERROR(check_layout(comm, call));
    size_t extent = 0;
    const BlockLayout &l = *call.layout;
    DDL_RETURN_IF_ERROR(checked_extent(l.send_counts, l.send_displs, elem, "sendcounts", &extent));
    DDL_RETURN_IF_ERROR(checked_extent(l.recv_counts, l.recv_displs, elem, "recvcounts", &extent));
  }
  if (c == Collective::kBarrier) return Status::Ok();
  if (c == Collective::kBroadcast) {
    *in_place = true;
    return call.count > 0 && !call.recvbuf
               ? invalid_argument("buffer is NULL with count %zu", call.count)
               : Status::Ok();
  }
  const char *send = static_cast<const char *>(call.sendbuf);
  const char *recv = static_cast<const char *>(call.recvbuf);
  const BlockLayout *l = call.layout.get();
  *in_place = call_in_place(comm, call);
  if (c == Collective::kAlltoallv && !*in_place &&
      (l->send_counts.size() != n || l->send_displs.size() != n))
    return invalid_argument(
        "sendcounts and sdispls are NULL but sendbuf is not recvbuf (in place)");
  const CallExtents extent = call_extents(comm, call, *in_place);
  if (extent.send > 0 && !send)
    return invalid_argument("sendbuf is NULL with %zu B to send", extent.send);
  if (extent.recv > 0 && !recv)
    return invalid_argument("recvbuf is NULL with %zu B to receive", extent.recv);
  if (!*in_place && overlaps(send, extent.send, recv, extent.recv))
    return invalid_argument(
        "sendbuf and recvbuf overlap without being the in-place layout (sendbuf %p, %zu B; "
        "recvbuf %p, %zu B)",
        call.sendbuf, extent.send, call.recvbuf, extent.recv);
  return Status::Ok();
}

}  // namespace ddl

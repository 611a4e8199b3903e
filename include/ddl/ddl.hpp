// ddl.hpp — a header-only C++17 wrapper over the C ABI in ddl.h: an owning Communicator,
// collectives typed by their element type, and ddl::Error exceptions that carry the result
// code and ddl_comm_last_error's words. It adds no symbols to link against.
//
//   ddl::Communicator comm = ddl::Communicator::from_env();
//   std::vector<float> grad(n);
//   comm.allreduce(grad.data(), grad.size());          // in place, sum
//   comm.allreduce(in.data(), out.data(), n, DDL_MAX); // out of place
//   ddl::SharedBuffer<float> fast(n);                  // ddl_mem_alloc: faster on one host
//   comm.allreduce(fast.data(), n);
//   ddl::Request r = comm.iallreduce(grad.data(), n);  // nonblocking; r.wait() later
#ifndef DDL_DDL_HPP
#define DDL_DDL_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddl/ddl.h"

namespace ddl {

// A failed call: what() is "DDL_ERR_...: <the library's message>".
class Error : public std::runtime_error {
 public:
  Error(ddl_result_t code, const std::string &message)
      : std::runtime_error(std::string(ddl_result_string(code)) + ": " + message), code_(code) {}
  ddl_result_t code() const noexcept { return code_; }

 private:
  ddl_result_t code_;
};

// The ddl datatype of a C++ element type (float16/bfloat16: use the raw-datatype overloads).
template <typename T>
struct datatype_of;
template <>
struct datatype_of<int8_t> {
  static constexpr ddl_datatype_t value = DDL_INT8;
};
template <>
struct datatype_of<uint8_t> {
  static constexpr ddl_datatype_t value = DDL_UINT8;
};
template <>
struct datatype_of<int32_t> {
  static constexpr ddl_datatype_t value = DDL_INT32;
};
template <>
struct datatype_of<uint32_t> {
  static constexpr ddl_datatype_t value = DDL_UINT32;
};
template <>
struct datatype_of<int64_t> {
  static constexpr ddl_datatype_t value = DDL_INT64;
};
template <>
struct datatype_of<uint64_t> {
  static constexpr ddl_datatype_t value = DDL_UINT64;
};
template <>
struct datatype_of<float> {
  static constexpr ddl_datatype_t value = DDL_FLOAT32;
};
template <>
struct datatype_of<double> {
  static constexpr ddl_datatype_t value = DDL_FLOAT64;
};

// An owning array of `size` T in ddl_mem_alloc memory (zero-filled; T must be trivially
// copyable): buffers the ranks of one host map from each other, so that a single-host
// allreduce reads and writes its peers' data with plain loads and stores.
template <typename T>
class SharedBuffer {
 public:
  explicit SharedBuffer(size_t size) : size_(size) {
    void *p = nullptr;
    const ddl_result_t r = ddl_mem_alloc(&p, size * sizeof(T));
    if (r != DDL_SUCCESS) throw Error(r, ddl_comm_last_error(nullptr));
    data_ = static_cast<T *>(p);
  }
  SharedBuffer(SharedBuffer &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  SharedBuffer &operator=(SharedBuffer &&other) noexcept {
    if (this != &other) {
      ddl_mem_free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  SharedBuffer(const SharedBuffer &) = delete;
  SharedBuffer &operator=(const SharedBuffer &) = delete;
  ~SharedBuffer() { ddl_mem_free(data_); }

  T *data() noexcept { return data_; }
  const T *data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  T &operator[](size_t i) noexcept { return data_[i]; }
  const T &operator[](size_t i) const noexcept { return data_[i]; }

 private:
  T *data_ = nullptr;
  size_t size_ = 0;
};

// An owning nonblocking request (ddl_i*): wait() throws on failure; the destructor frees it
// (a request not waited for still runs to its end, its buffers in use until then).
class Request {
 public:
  Request() = default;
  explicit Request(ddl_request_t request) noexcept : request_(request) {}
  Request(Request &&other) noexcept : request_(std::exchange(other.request_, nullptr)) {}
  Request &operator=(Request &&other) noexcept {
    if (this != &other) {
      ddl_request_free(request_);
      request_ = std::exchange(other.request_, nullptr);
    }
    return *this;
  }
  Request(const Request &) = delete;
  Request &operator=(const Request &) = delete;
  ~Request() { ddl_request_free(request_); }

  void wait() const { check(ddl_wait(request_)); }
  // True once finished (and successful; a failure throws).
  bool test() const {
    int done = 0;
    check(ddl_test(request_, &done));
    return done != 0;
  }
  ddl_request_t handle() const noexcept { return request_; }

 private:
  static void check(ddl_result_t r) {
    if (r != DDL_SUCCESS) throw Error(r, ddl_comm_last_error(nullptr));
  }
  ddl_request_t request_ = nullptr;
};

// ddl_group_start() for the scope; the end issues the group (NCCL's semantics, fusing small
// allreduces). end() throws on failure; the destructor ends a group left by an exception.
class Group {
 public:
  Group() { ddl_group_start(); }
  Group(const Group &) = delete;
  Group &operator=(const Group &) = delete;
  ~Group() {
    if (open_) ddl_group_end();
  }
  void end() {
    open_ = false;
    const ddl_result_t r = ddl_group_end();
    if (r != DDL_SUCCESS) throw Error(r, ddl_comm_last_error(nullptr));
  }

 private:
  bool open_ = true;
};

class Communicator {
 public:
  // ddl_comm_init_from_env: DDL_*, mpirun, srun or torchrun variables.
  static Communicator from_env() {
    ddl_comm_t comm = nullptr;
    check_init(ddl_comm_init_from_env(&comm));
    return Communicator(comm);
  }
  // ddl_comm_init; root_addr may be empty for a single rank.
  static Communicator create(int nranks, int rank, const std::string &root_addr,
                             const ddl_config_t *config = nullptr) {
    ddl_comm_t comm = nullptr;
    check_init(ddl_comm_init(&comm, nranks, rank, root_addr.empty() ? nullptr : root_addr.c_str(),
                             config));
    return Communicator(comm);
  }

  Communicator(Communicator &&other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Communicator &operator=(Communicator &&other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;
  ~Communicator() { reset(); }

  int rank() const {
    int r = -1;
    check(ddl_comm_rank(comm_, &r));
    return r;
  }
  int size() const {
    int n = -1;
    check(ddl_comm_size(comm_, &n));
    return n;
  }
  ddl_comm_t handle() const noexcept { return comm_; }
  // Unblocks every waiter; the communicator can then only be destroyed.
  void abort() noexcept { ddl_comm_abort(comm_); }
  // ddl_comm_split: the ranks passing the same color form a new communicator, ranked by key.
  // Collective. A rank passing DDL_SPLIT_NOCOLOR gets an empty one (handle() == nullptr).
  Communicator split(int color, int key = 0) const {
    ddl_comm_t sub = nullptr;
    check(ddl_comm_split(comm_, color, key, &sub));
    return Communicator(sub);
  }

  template <typename T>
  void allreduce(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    check(ddl_allreduce(send, recv, count, datatype_of<T>::value, op, comm_));
  }
  template <typename T>
  void allreduce(T *data, size_t count, ddl_op_t op = DDL_SUM) const {
    allreduce(data, data, count, op);
  }
  // Untyped form, e.g. for DDL_FLOAT16 / DDL_BFLOAT16 buffers.
  void allreduce(const void *send, void *recv, size_t count, ddl_datatype_t dtype,
                 ddl_op_t op) const {
    check(ddl_allreduce(send, recv, count, dtype, op, comm_));
  }
  template <typename T>
  void broadcast(T *data, size_t count, int root) const {
    check(ddl_broadcast(data, count, datatype_of<T>::value, root, comm_));
  }
  template <typename T>
  void allgather(const T *send, T *recv, size_t sendcount) const {
    check(ddl_allgather(send, recv, sendcount, datatype_of<T>::value, comm_));
  }
  template <typename T>
  void reduce_scatter(const T *send, T *recv, size_t recvcount, ddl_op_t op = DDL_SUM) const {
    check(ddl_reduce_scatter(send, recv, recvcount, datatype_of<T>::value, op, comm_));
  }
  void barrier() const { check(ddl_barrier(comm_)); }
  // Block j of send (count elements) to rank j; block j of recv from rank j.
  template <typename T>
  void alltoall(const T *send, T *recv, size_t count) const {
    check(ddl_alltoall(send, recv, count, datatype_of<T>::value, comm_));
  }
  // A count and displacement per peer (elements; one entry per rank in each vector).
  template <typename T>
  void alltoallv(const T *send, const std::vector<size_t> &sendcounts,
                 const std::vector<size_t> &sdispls, T *recv, const std::vector<size_t> &recvcounts,
                 const std::vector<size_t> &rdispls) const {
    check_sizes({&sendcounts, &sdispls, &recvcounts, &rdispls}, "ddl::alltoallv");
    check(ddl_alltoallv(send, sendcounts.data(), sdispls.data(), recv, recvcounts.data(),
                        rdispls.data(), datatype_of<T>::value, comm_));
  }
  // The reduction lands at root only (recv may be nullptr elsewhere).
  template <typename T>
  void reduce(const T *send, T *recv, size_t count, int root, ddl_op_t op = DDL_SUM) const {
    check(ddl_reduce(send, recv, count, datatype_of<T>::value, op, root, comm_));
  }
  template <typename T>
  void gather(const T *send, T *recv, size_t sendcount, int root) const {
    check(ddl_gather(send, recv, sendcount, datatype_of<T>::value, root, comm_));
  }
  // recvcounts and displs are read on the root only (empty vectors elsewhere).
  template <typename T>
  void gatherv(const T *send, size_t sendcount, T *recv, const std::vector<size_t> &recvcounts,
               const std::vector<size_t> &displs, int root) const {
    if (rank() == root) check_sizes({&recvcounts, &displs}, "ddl::gatherv");
    check(ddl_gatherv(send, sendcount, recv, recvcounts.empty() ? nullptr : recvcounts.data(),
                      displs.empty() ? nullptr : displs.data(), datatype_of<T>::value, root,
                      comm_));
  }
  // recvcounts and displs: one per rank, on every rank.
  template <typename T>
  void allgatherv(const T *send, size_t sendcount, T *recv, const std::vector<size_t> &recvcounts,
                  const std::vector<size_t> &displs) const {
    check_sizes({&recvcounts, &displs}, "ddl::allgatherv");
    check(ddl_allgatherv(send, sendcount, recv, recvcounts.data(), displs.data(),
                         datatype_of<T>::value, comm_));
  }
  // recvcounts: one per rank, on every rank; send holds their sum.
  template <typename T>
  void reduce_scatterv(const T *send, T *recv, const std::vector<size_t> &recvcounts,
                       ddl_op_t op = DDL_SUM) const {
    check_sizes({&recvcounts}, "ddl::reduce_scatterv");
    check(ddl_reduce_scatterv(send, recv, recvcounts.data(), datatype_of<T>::value, op, comm_));
  }
  // Rank r gets the reduction of ranks 0..r (scan) or 0..r-1 (exscan; rank 0's recv is left
  // as it was). In place when send == recv.
  template <typename T>
  void scan(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    check(ddl_scan(send, recv, count, datatype_of<T>::value, op, comm_));
  }
  template <typename T>
  void exscan(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    check(ddl_exscan(send, recv, count, datatype_of<T>::value, op, comm_));
  }
  template <typename T>
  void scatter(const T *send, T *recv, size_t recvcount, int root) const {
    check(ddl_scatter(send, recv, recvcount, datatype_of<T>::value, root, comm_));
  }
  // sendcounts and displs are read on the root only (empty vectors elsewhere).
  template <typename T>
  void scatterv(const T *send, const std::vector<size_t> &sendcounts,
                const std::vector<size_t> &displs, T *recv, size_t recvcount, int root) const {
    if (rank() == root) check_sizes({&sendcounts, &displs}, "ddl::scatterv");
    check(ddl_scatterv(send, sendcounts.empty() ? nullptr : sendcounts.data(),
                       displs.empty() ? nullptr : displs.data(), recv, recvcount,
                       datatype_of<T>::value, root, comm_));
  }
  // Point to point, matched per pair in order; group exchanges (ddl::Group) or use isend/irecv.
  template <typename T>
  void send(const T *data, size_t count, int peer) const {
    check(ddl_send(data, count, datatype_of<T>::value, peer, comm_));
  }
  template <typename T>
  void recv(T *data, size_t count, int peer) const {
    check(ddl_recv(data, count, datatype_of<T>::value, peer, comm_));
  }

  // Nonblocking forms (ddl_i*): the buffers belong to ddl until the request has finished.
  template <typename T>
  Request iallreduce(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    ddl_request_t r = nullptr;
    check(ddl_iallreduce(send, recv, count, datatype_of<T>::value, op, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request iallreduce(T *data, size_t count, ddl_op_t op = DDL_SUM) const {
    return iallreduce(data, data, count, op);
  }
  template <typename T>
  Request ibroadcast(T *data, size_t count, int root) const {
    ddl_request_t r = nullptr;
    check(ddl_ibroadcast(data, count, datatype_of<T>::value, root, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request iallgather(const T *send, T *recv, size_t sendcount) const {
    ddl_request_t r = nullptr;
    check(ddl_iallgather(send, recv, sendcount, datatype_of<T>::value, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request ireduce_scatter(const T *send, T *recv, size_t recvcount, ddl_op_t op = DDL_SUM) const {
    ddl_request_t r = nullptr;
    check(ddl_ireduce_scatter(send, recv, recvcount, datatype_of<T>::value, op, comm_, &r));
    return Request(r);
  }
  Request ibarrier() const {
    ddl_request_t r = nullptr;
    check(ddl_ibarrier(comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request ialltoall(const T *send, T *recv, size_t count) const {
    ddl_request_t r = nullptr;
    check(ddl_ialltoall(send, recv, count, datatype_of<T>::value, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request ireduce(const T *send, T *recv, size_t count, int root, ddl_op_t op = DDL_SUM) const {
    ddl_request_t r = nullptr;
    check(ddl_ireduce(send, recv, count, datatype_of<T>::value, op, root, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request iscan(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    ddl_request_t r = nullptr;
    check(ddl_iscan(send, recv, count, datatype_of<T>::value, op, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request iexscan(const T *send, T *recv, size_t count, ddl_op_t op = DDL_SUM) const {
    ddl_request_t r = nullptr;
    check(ddl_iexscan(send, recv, count, datatype_of<T>::value, op, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request isend(const T *data, size_t count, int peer) const {
    ddl_request_t r = nullptr;
    check(ddl_isend(data, count, datatype_of<T>::value, peer, comm_, &r));
    return Request(r);
  }
  template <typename T>
  Request irecv(T *data, size_t count, int peer) const {
    ddl_request_t r = nullptr;
    check(ddl_irecv(data, count, datatype_of<T>::value, peer, comm_, &r));
    return Request(r);
  }

 private:
  explicit Communicator(ddl_comm_t comm) : comm_(comm) {}
  void reset() noexcept {
    if (comm_) ddl_comm_destroy(comm_);
    comm_ = nullptr;
  }
  void check(ddl_result_t r) const {
    if (r != DDL_SUCCESS) throw Error(r, ddl_comm_last_error(comm_));
  }
  // Each array of a v form has one entry per rank: a shorter vector would be read past its end.
  void check_sizes(std::initializer_list<const std::vector<size_t> *> arrays,
                   const char *what) const {
    const size_t n = static_cast<size_t>(size());
    for (const std::vector<size_t> *a : arrays)
      if (a->size() != n)
        throw Error(DDL_ERR_INVALID_ARGUMENT, std::string(what) +
                                                  ": a count or displacement "
                                                  "vector has " +
                                                  std::to_string(a->size()) +
                                                  " entries, not one per rank (" +
                                                  std::to_string(n) + ")");
  }
  static void check_init(ddl_result_t r) {
    if (r != DDL_SUCCESS) throw Error(r, ddl_comm_last_error(nullptr));
  }

  ddl_comm_t comm_ = nullptr;
};

}  // namespace ddl

#endif  // DDL_DDL_HPP

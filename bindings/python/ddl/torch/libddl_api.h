// libddl as the torch backend sees it: the C ABI's enum values and functions (resolved with
// dlsym from the libddl the ddl package loaded, so nothing here links to it), and how torch's
// tensors, dtypes and reduce ops map onto them (with the small tensor helpers the calls share:
// contiguous copies, flattening, copying back). Included by backend.cpp only.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/extension.h>

namespace ddl_torch {

// ddl.h's enum values. Its ABI rules say values are never renumbered, so they can be restated
// here (the header is not installed with the Python package).
enum DdlType { I8 = 0, U8 = 1, I32 = 2, U32 = 3, I64 = 4, U64 = 5, F16 = 6, BF16 = 7, F32 = 8, F64 = 9 };
enum DdlOp { OP_SUM = 0, OP_PROD = 1, OP_MIN = 2, OP_MAX = 3, OP_AVG = 4 };
constexpr int kAnySource = -1;           // DDL_ANY_SOURCE
constexpr int kLargestTag = (1 << 22) - 1;  // DDL_TAG_UB

using Req = void*;  // ddl_request_t
using Comm = void*; // ddl_comm_t

// The libddl functions this backend calls. The nonblocking ones may be missing in an older
// libddl: then every collective runs blocking and returns a finished Work.
struct Api {
  int (*allreduce)(const void*, void*, size_t, int, int, Comm) = nullptr;
  int (*broadcast)(void*, size_t, int, int, Comm) = nullptr;
  int (*allgather)(const void*, void*, size_t, int, Comm) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, Comm) = nullptr;
  int (*barrier)(Comm) = nullptr;
  int (*comm_abort)(Comm) = nullptr;
  const char* (*result_string)(int) = nullptr;
  const char* (*last_error)(Comm) = nullptr;
  int (*iallreduce)(const void*, void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*ibroadcast)(void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*iallgather)(const void*, void*, size_t, int, Comm, Req*) = nullptr;
  int (*ireduce_scatter)(const void*, void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*ibarrier)(Comm, Req*) = nullptr;
  int (*test)(Req, int*) = nullptr;
  int (*wait)(Req) = nullptr;
  int (*request_free)(Req) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  // Alltoall, reduce, gather, scatter, send and receive; missing in a libddl older than them.
  // The blocking forms serve calls whose caller waits at once (asyncOp false), as allreduce's.
  int (*alltoall)(const void*, void*, size_t, int, Comm) = nullptr;
  int (*alltoallv)(const void*, const size_t*, const size_t*, void*, const size_t*,
                   const size_t*, int, Comm) = nullptr;
  int (*reduce)(const void*, void*, size_t, int, int, int, Comm) = nullptr;
  int (*gather)(const void*, void*, size_t, int, int, Comm) = nullptr;
  int (*scatter)(const void*, void*, size_t, int, int, Comm) = nullptr;
  int (*ialltoall)(const void*, void*, size_t, int, Comm, Req*) = nullptr;
  int (*ialltoallv)(const void*, const size_t*, const size_t*, void*, const size_t*,
                    const size_t*, int, Comm, Req*) = nullptr;
  int (*ireduce)(const void*, void*, size_t, int, int, int, Comm, Req*) = nullptr;
  int (*igather)(const void*, void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*iscatter)(const void*, void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*isend)(const void*, size_t, int, int, Comm, Req*) = nullptr;
  int (*irecv)(void*, size_t, int, int, Comm, Req*) = nullptr;
  // ddl's host-shareable memory (DDP's buckets, allocateTensor); always in libddl.so.0.
  int (*mem_alloc)(void**, size_t) = nullptr;
  int (*mem_free)(void*) = nullptr;
  // Tagged messages and receives from any source; missing in a libddl older than them.
  int (*isend_tag)(const void*, size_t, int, int, int, Comm, Req*) = nullptr;
  // Allgather and reduce-scatter with a count per rank (tensors of different sizes).
  int (*allgatherv)(const void*, size_t, void*, const size_t*, const size_t*, int, Comm) = nullptr;
  int (*iallgatherv)(const void*, size_t, void*, const size_t*, const size_t*, int, Comm,
                     Req*) = nullptr;
  int (*reduce_scatterv)(const void*, void*, const size_t*, int, int, Comm) = nullptr;
  int (*ireduce_scatterv)(const void*, void*, const size_t*, int, int, Comm, Req*) = nullptr;
  int (*irecv_tag)(void*, size_t, int, int, int, Comm, int*, Req*) = nullptr;
  // Stream-ordered calls (CUDA tensors; device_path.h); the last argument is a cudaStream_t.
  int (*allreduce_stream)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  int (*broadcast_stream)(void*, size_t, int, int, Comm, void*) = nullptr;
  int (*allgather_stream)(const void*, void*, size_t, int, Comm, void*) = nullptr;
  int (*reduce_scatter_stream)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  // Host-synchronous in every mode (ddl.h): alltoall(v), reduce, gather, scatter.
  int (*alltoall_stream)(const void*, void*, size_t, int, Comm, void*) = nullptr;
  int (*alltoallv_stream)(const void*, const size_t*, const size_t*, void*, const size_t*,
                          const size_t*, int, Comm, void*) = nullptr;
  int (*reduce_stream)(const void*, void*, size_t, int, int, int, Comm, void*) = nullptr;
  int (*gather_stream)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  int (*scatter_stream)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;

  bool stream_calls() const {
    return allreduce_stream && broadcast_stream && allgather_stream && reduce_scatter_stream;
  }

  bool nonblocking() const {
    return iallreduce && ibroadcast && iallgather && ireduce_scatter && ibarrier && test && wait &&
           request_free && group_start && group_end;
  }

  static Api load(const std::string& path) {
    // RTLD_NOLOAD first: the package has loaded it already; fall back to loading it.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen(path.c_str(), RTLD_NOW);
    TORCH_CHECK(h, "ddl backend: cannot load ", path, ": ", dlerror());
    Api a;
    auto need = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      TORCH_CHECK(fn, "ddl backend: ", path, " has no ", name);
    };
    auto maybe = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    };
    need(a.allreduce, "ddl_allreduce");
    need(a.broadcast, "ddl_broadcast");
    need(a.allgather, "ddl_allgather");
    need(a.reduce_scatter, "ddl_reduce_scatter");
    need(a.barrier, "ddl_barrier");
    need(a.comm_abort, "ddl_comm_abort");
    need(a.result_string, "ddl_result_string");
    need(a.last_error, "ddl_comm_last_error");
    maybe(a.iallreduce, "ddl_iallreduce");
    maybe(a.ibroadcast, "ddl_ibroadcast");
    maybe(a.iallgather, "ddl_iallgather");
    maybe(a.ireduce_scatter, "ddl_ireduce_scatter");
    maybe(a.ibarrier, "ddl_ibarrier");
    maybe(a.test, "ddl_test");
    maybe(a.wait, "ddl_wait");
    maybe(a.request_free, "ddl_request_free");
    maybe(a.group_start, "ddl_group_start");
    maybe(a.group_end, "ddl_group_end");
    maybe(a.alltoall, "ddl_alltoall");
    maybe(a.alltoallv, "ddl_alltoallv");
    maybe(a.reduce, "ddl_reduce");
    maybe(a.gather, "ddl_gather");
    maybe(a.scatter, "ddl_scatter");
    maybe(a.ialltoall, "ddl_ialltoall");
    maybe(a.ialltoallv, "ddl_ialltoallv");
    maybe(a.ireduce, "ddl_ireduce");
    maybe(a.igather, "ddl_igather");
    maybe(a.iscatter, "ddl_iscatter");
    maybe(a.isend, "ddl_isend");
    maybe(a.irecv, "ddl_irecv");
    maybe(a.mem_alloc, "ddl_mem_alloc");
    maybe(a.mem_free, "ddl_mem_free");
    maybe(a.isend_tag, "ddl_isend_tag");
    maybe(a.allgatherv, "ddl_allgatherv");
    maybe(a.iallgatherv, "ddl_iallgatherv");
    maybe(a.reduce_scatterv, "ddl_reduce_scatterv");
    maybe(a.ireduce_scatterv, "ddl_ireduce_scatterv");
    maybe(a.irecv_tag, "ddl_irecv_tag");
    maybe(a.allreduce_stream, "ddl_allreduce_stream");
    maybe(a.broadcast_stream, "ddl_broadcast_stream");
    maybe(a.allgather_stream, "ddl_allgather_stream");
    maybe(a.reduce_scatter_stream, "ddl_reduce_scatter_stream");
    maybe(a.alltoall_stream, "ddl_alltoall_stream");
    maybe(a.alltoallv_stream, "ddl_alltoallv_stream");
    maybe(a.reduce_stream, "ddl_reduce_stream");
    maybe(a.gather_stream, "ddl_gather_stream");
    maybe(a.scatter_stream, "ddl_scatter_stream");
    return a;
  }

  // "DDL_ERR_TIMEOUT: ...: <ddl's words>", for an exception.
  std::string message(int rc, Comm words_of, const char* what) const {
    std::string text = std::string("ddl ") + what + " failed: " + result_string(rc);
    const char* detail = last_error(words_of);
    if (detail && *detail) text += std::string(": ") + detail;
    return text;
  }
};

inline int ddl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return I8;
    case at::kByte: return U8;
    case at::kBool: return U8;  // one byte per element; SUM/PROD become MAX/MIN (see ddl_op)
    case at::kInt: return I32;
    case at::kUInt32: return U32;
    case at::kLong: return I64;
    case at::kUInt64: return U64;
    case at::kHalf: return F16;
    case at::kBFloat16: return BF16;
    case at::kFloat: return F32;
    case at::kDouble: return F64;
    default:
      TORCH_CHECK(false, "ddl backend: tensors of dtype ", t.scalar_type(), " are not supported");
  }
}

// torch's op for dtype of t, as ddl's op. PREMUL_SUM arrives here as SUM (the caller scaled).
inline int ddl_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  bool boolean = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return boolean ? OP_MAX : OP_SUM;  // logical or
    case c10d::ReduceOp::PRODUCT: return boolean ? OP_MIN : OP_PROD;  // logical and
    case c10d::ReduceOp::MIN: return OP_MIN;
    case c10d::ReduceOp::MAX: return OP_MAX;
    case c10d::ReduceOp::AVG: return OP_AVG;
    case c10d::ReduceOp::PREMUL_SUM: return OP_SUM;
    default:
      TORCH_CHECK(false, "ddl backend: reduce op ", static_cast<int>(op.op_),
                  " (BAND/BOR/BXOR) is not supported; use SUM, PRODUCT, MIN, MAX, AVG or "
                  "PREMUL_SUM");
  }
}

// PREMUL_SUM's factor applied to a copy of input (or to input itself when in_place).
inline at::Tensor premultiplied(const c10d::ReduceOp& op, const at::Tensor& input, bool in_place) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return input;
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s, "ddl backend: PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) {
    auto f = s->tensor_factor.to(input.device(), input.scalar_type());
    return in_place ? input.mul_(f) : input.mul(f);
  }
  return in_place ? input.mul_(s->double_factor) : input.mul(s->double_factor);
}

// CPU and CUDA tensors are taken (CUDA ones as device_path.h says); dense ones only.
inline void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "ddl backend: ", what, " is on ",
              t.device(), "; the ddl backend takes CPU and CUDA tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "ddl backend: ", what, " must be a dense tensor");
}

// A contiguous tensor ddl can use for t: t itself, or a contiguous copy (then `back` copies
// the result into t when the collective has ended).
inline at::Tensor contiguous_for(const at::Tensor& t, std::vector<std::function<void()>>& back,
                                bool output) {
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (output) back.push_back([t, c]() mutable { t.copy_(c); });
  return c;
}

inline std::function<void()> all_of(std::vector<std::function<void()>> steps) {
  steps.erase(std::remove_if(steps.begin(), steps.end(), [](const auto& s) { return !s; }),
              steps.end());
  if (steps.empty()) return nullptr;
  return [steps = std::move(steps)] {
    for (auto& s : steps) s();
  };
}

// A call's stream-ordered form for run(), where this libddl has it (`present`); else none,
// and CUDA tensors are refused with the rebuild command (run_on_stream).
template <class Fn, class Call>
std::function<int(void*)> stream_call(Fn* present, Call call) {
  if (!present) return nullptr;
  return call;
}

// One flat tensor of `parts` laid end to end (a copy), for the list forms.
inline at::Tensor flat_copy(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : parts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}
// Copies the pieces of `flat` back into `outs`, in order, after the call.
inline std::function<void()> scatter_back(std::vector<at::Tensor> outs, at::Tensor flat) {
  return [outs, flat]() mutable {
    int64_t at = 0;
    for (auto& o : outs) {
      o.copy_(flat.narrow(0, at, o.numel()).view(o.sizes()));
      at += o.numel();
    }
  };
}

}  // namespace ddl_torch

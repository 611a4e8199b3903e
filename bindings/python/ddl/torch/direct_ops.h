// torch.ops.ddl.all_reduce_: an in-place allreduce of a CPU tensor straight into libddl's
// blocking call, for latency-bound code (tensor-parallel inference makes one small allreduce
// per layer per token). No c10d dispatch, no Work, no Python in between when called as an op;
// torch.compile sees it as an operator that mutates its tensor (a Meta kernel for tracing).
// The communicator is named by its ddl_comm_t handle: libddl checks every handle against its
// live communicators, so a destroyed one is an error, not a use-after-free. Included by
// backend.cpp only.
#pragma once

#include <memory>
#include <mutex>

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "libddl_api.h"

namespace ddl_torch {

// libddl's functions for the op: the same library every backend of this process loaded, kept
// for the process's life (an op may run after the last backend went).
inline std::shared_ptr<const Api>& direct_api() {
  static std::shared_ptr<const Api> api;
  return api;
}

inline void enable_direct_ops(const std::shared_ptr<const Api>& api) {
  static std::once_flag once;
  std::call_once(once, [&] { direct_api() = api; });
}

inline void all_reduce_direct(at::Tensor& tensor, int64_t comm, int64_t op) {
  const std::shared_ptr<const Api>& api = direct_api();
  TORCH_CHECK(api, "ddl.all_reduce_: no ddl process group in this process yet ",
              "(dist.init_process_group(\"ddl\") makes one)");
  TORCH_CHECK(tensor.is_contiguous(), "ddl.all_reduce_: the tensor must be contiguous");
  TORCH_CHECK(op >= OP_SUM && op <= OP_AVG, "ddl.all_reduce_: op ", op,
              " is not one of ddl's (0 sum, 1 prod, 2 min, 3 max, 4 avg)");
  void* p = tensor.data_ptr();
  const int rc = api->allreduce(p, p, static_cast<size_t>(tensor.numel()), ddl_type(tensor),
                                static_cast<int>(op), reinterpret_cast<Comm>(comm));
  TORCH_CHECK(rc == 0, "ddl.all_reduce_: ", api->last_error(reinterpret_cast<Comm>(comm)));
}

}  // namespace ddl_torch

TORCH_LIBRARY(ddl, m) {
  m.def("all_reduce_(Tensor(a!) tensor, int comm, int op) -> ()");
}

TORCH_LIBRARY_IMPL(ddl, CPU, m) {
  m.impl("all_reduce_", ddl_torch::all_reduce_direct);
}

// Tracing (torch.compile's fake tensors): the op changes values, never shapes.
TORCH_LIBRARY_IMPL(ddl, Meta, m) {
  m.impl("all_reduce_", [](at::Tensor&, int64_t, int64_t) {});
}

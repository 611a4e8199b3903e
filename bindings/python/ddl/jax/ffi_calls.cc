// ddl's collectives as XLA FFI handlers, for JAX on CPU (ddl.jax). XLA hands a handler its
// operand and its result in host memory; the handler makes libddl.so.0's blocking C call on
// them, with the communicator and the reduce op as the call's attributes. Nothing is copied
// beyond what the call needs (broadcast, in place in ddl, copies the operand into the
// result first). libddl's functions are resolved with dlsym from the library the ddl package
// loaded (ddl_jax_load, called once from Python), so this library links to nothing but
// libdl, and any libddl.so.0 with these calls serves.
//
// Every handler takes a second operand it never reads: the result of the previous ddl call
// of the same jitted function (ddl/jax/__init__.py), so that XLA, which may run independent
// operations in any order or at once, runs the collectives in program order on every rank.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// ddl.h's enum values (never renumbered, by its ABI rules).
enum DdlType {
  I8 = 0,
  U8 = 1,
  I32 = 2,
  U32 = 3,
  I64 = 4,
  U64 = 5,
  F16 = 6,
  BF16 = 7,
  F32 = 8,
  F64 = 9
};
using Comm = void *;

struct Api {
  int (*allreduce)(const void *, void *, size_t, int, int, Comm) = nullptr;
  int (*broadcast)(void *, size_t, int, int, Comm) = nullptr;
  int (*allgather)(const void *, void *, size_t, int, Comm) = nullptr;
  int (*reduce_scatter)(const void *, void *, size_t, int, int, Comm) = nullptr;
  int (*alltoall)(const void *, void *, size_t, int, Comm) = nullptr;
  int (*comm_size)(Comm, int *) = nullptr;
  int (*comm_rank)(Comm, int *) = nullptr;
  const char *(*result_string)(int) = nullptr;
  const char *(*last_error)(Comm) = nullptr;
};
Api api;

// The communicators jitted functions name: a compiled function keeps the number it was traced
// with, never a pointer, so that one whose communicator was destroyed fails with an error
// instead of touching freed memory (ddl_jax_attach, ddl_jax_detach).
std::mutex comms_lock;
struct Attached {
  Comm comm;
  int rank;  // for the errors: a destroyed communicator cannot say it
};
std::map<int64_t, Attached> comms;
int64_t next_comm_id = 1;

Attached comm_of(int64_t id) {
  std::lock_guard<std::mutex> hold(comms_lock);
  const auto it = comms.find(id);
  return it == comms.end() ? Attached{nullptr, -1} : it->second;
}

// The ddl type of an XLA element type, or -1 (ddl has no complex, boolean or 8-bit float).
int ddl_type(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::S8:
      return I8;
    case ffi::DataType::U8:
      return U8;
    case ffi::DataType::S32:
      return I32;
    case ffi::DataType::U32:
      return U32;
    case ffi::DataType::S64:
      return I64;
    case ffi::DataType::U64:
      return U64;
    case ffi::DataType::F16:
      return F16;
    case ffi::DataType::BF16:
      return BF16;
    case ffi::DataType::F32:
      return F32;
    case ffi::DataType::F64:
      return F64;
    default:
      return -1;
  }
}

// One call's context for its errors: "ddl.jax allreduce on rank 1: <why>".
struct Call {
  const char *collective;
  Attached at;
  int type = 0;

  ffi::Error fail(const std::string &why) const {
    const std::string where = at.rank >= 0 ? " on rank " + std::to_string(at.rank) : "";
    return ffi::Error(ffi::ErrorCode::kInternal,
                      std::string("ddl.jax ") + collective + where + ": " + why);
  }

  // ddl's error for rc, in ddl's words: "DDL_ERR_...: <what the communicator last said>".
  ffi::Error failed(int rc) const {
    const char *words = api.last_error(at.comm);
    return fail(std::string(api.result_string(rc)) +
                (words && *words ? std::string(": ") + words : std::string()));
  }

  // allgather, reduce_scatter and alltoall split a vector of `elements` into one block per
  // rank; the Python side shaped the result, this checks the split against the communicator.
  ffi::Error blocks(size_t elements, size_t *block) const {
    int size = 0;
    if (const int rc = api.comm_size(at.comm, &size)) return failed(rc);
    if (size <= 0 || elements % static_cast<size_t>(size) != 0)
      return fail(std::to_string(elements) + " elements do not split into " + std::to_string(size) +
                  " equal blocks");
    *block = elements / static_cast<size_t>(size);
    return ffi::Error::Success();
  }
};

// What every call checks before it calls ddl: the library, the communicator (`id`, its
// number), the array's type.
ffi::Error start(const char *collective, const ffi::AnyBuffer &x, int64_t id, Call *call) {
  call->collective = collective;
  call->at = comm_of(id);
  if (!api.allreduce) return call->fail("libddl is not loaded (import ddl.jax first)");
  if (!call->at.comm)
    return call->fail("communicator " + std::to_string(id) +
                      " was destroyed; a jitted function keeps the communicator it was traced "
                      "with: trace it again after ddl.jax.init()");
  call->type = ddl_type(x.element_type());
  if (call->type < 0)
    return call->fail(
        "ddl has no type for this array's dtype (ddl takes int8, uint8, int32, "
        "uint32, int64, uint64, float16, bfloat16, float32, float64)");
  return ffi::Error::Success();
}

ffi::Error allreduce(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id,
                     int32_t op) {
  Call c;
  if (ffi::Error e = start("allreduce", x, id, &c); e.failure()) return e;
  const int rc =
      api.allreduce(x.untyped_data(), y->untyped_data(), x.element_count(), c.type, op, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error broadcast(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id,
                     int32_t root) {
  Call c;
  if (ffi::Error e = start("broadcast", x, id, &c); e.failure()) return e;
  if (y->untyped_data() != x.untyped_data())
    std::memcpy(y->untyped_data(), x.untyped_data(), x.size_bytes());
  const int rc = api.broadcast(y->untyped_data(), x.element_count(), c.type, root, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error allgather(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id) {
  Call c;
  size_t block = 0;
  if (ffi::Error e = start("allgather", x, id, &c); e.failure()) return e;
  if (ffi::Error e = c.blocks(y->element_count(), &block); e.failure()) return e;
  if (block != x.element_count()) return c.fail("the result is not the ranks' operands in turn");
  const int rc = api.allgather(x.untyped_data(), y->untyped_data(), block, c.type, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error reduce_scatter(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y,
                          int64_t id, int32_t op) {
  Call c;
  size_t block = 0;
  if (ffi::Error e = start("reduce_scatter", x, id, &c); e.failure()) return e;
  if (ffi::Error e = c.blocks(x.element_count(), &block); e.failure()) return e;
  if (block != y->element_count()) return c.fail("the result is not one block of the operand");
  const int rc =
      api.reduce_scatter(x.untyped_data(), y->untyped_data(), block, c.type, op, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error alltoall(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id) {
  Call c;
  size_t block = 0;
  if (ffi::Error e = start("alltoall", x, id, &c); e.failure()) return e;
  if (!api.alltoall) return c.fail("this libddl has no ddl_alltoall");
  if (ffi::Error e = c.blocks(x.element_count(), &block); e.failure()) return e;
  const int rc = api.alltoall(x.untyped_data(), y->untyped_data(), block, c.type, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

}  // namespace

// Resolves libddl's functions from `path` (already loaded by the ddl package). Returns 0, or
// -1 with the reason in `why` (`why_len` bytes).
extern "C" int ddl_jax_load(const char *path, char *why, size_t why_len) {
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW);
  Api a;
  const char *missing = nullptr;
  auto need = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(h ? dlsym(h, name) : nullptr);
    if (!fn && !missing) missing = name;
  };
  need(a.allreduce, "ddl_allreduce");
  need(a.broadcast, "ddl_broadcast");
  need(a.allgather, "ddl_allgather");
  need(a.reduce_scatter, "ddl_reduce_scatter");
  need(a.comm_size, "ddl_comm_size");
  need(a.comm_rank, "ddl_comm_rank");
  need(a.result_string, "ddl_result_string");
  need(a.last_error, "ddl_comm_last_error");
  a.alltoall = h ? reinterpret_cast<decltype(a.alltoall)>(dlsym(h, "ddl_alltoall")) : nullptr;
  if (!h || missing) {
    std::snprintf(why, why_len, "%s: %s", path, h ? missing : dlerror());
    return -1;
  }
  api = a;
  return 0;
}

// Numbers a communicator for the handlers (its `comm` attribute); ddl_jax_detach forgets it.
extern "C" int64_t ddl_jax_attach(void *comm) {
  int rank = -1;
  if (api.comm_rank) api.comm_rank(comm, &rank);
  std::lock_guard<std::mutex> hold(comms_lock);
  comms[next_comm_id] = Attached{comm, rank};
  return next_comm_id++;
}

extern "C" void ddl_jax_detach(int64_t id) {
  std::lock_guard<std::mutex> hold(comms_lock);
  const auto it = comms.find(id);
  if (it != comms.end()) it->second.comm = nullptr;  // its rank stays, for the error
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(ddl_jax_allreduce, allreduce,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("comm")
                                  .Attr<int32_t>("op"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ddl_jax_broadcast, broadcast,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("comm")
                                  .Attr<int32_t>("root"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ddl_jax_allgather, allgather,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("comm"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ddl_jax_reduce_scatter, reduce_scatter,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("comm")
                                  .Attr<int32_t>("op"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ddl_jax_alltoall, alltoall,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("comm"));

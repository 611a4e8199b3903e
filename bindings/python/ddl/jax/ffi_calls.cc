// ddl's collectives as XLA FFI handlers, for JAX on CPU (ddl.jax). XLA hands a handler its
// operand and its result in host memory; the handler makes libddl.so.0's blocking C call on
// them, with the communicator and the reduce op as the call's attributes. Nothing is copied
// beyond what the call needs: allreduce and broadcast ask XLA for their result in their
// operand's buffer (ddl/jax/__init__.py) and then run in place; broadcast, in place in ddl,
// copies the operand into the result first where XLA gave it another buffer. libddl's calls,
// and the numbers by which a jitted function names its communicator: ../framework_abi.h.
//
// Every handler takes a second operand it never reads: the result of the previous ddl call
// of the same jitted function (ddl/jax/__init__.py), so that XLA, which may run independent
// operations in any order or at once, runs the collectives in program order on every rank.
#include <cstring>
#include <string>

#include "framework_abi.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using namespace ddl_framework;  // api(), Attached, Comm, the DdlType values

namespace {

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

  // ddl's error for rc, in ddl's words.
  ffi::Error failed(int rc) const { return fail(api().failure(rc, at.comm)); }

  // allgather, reduce_scatter and alltoall split a vector of `elements` into one block per
  // rank; the Python side shaped the result, this checks the split against the communicator.
  ffi::Error blocks(size_t elements, size_t *block) const {
    const size_t size = static_cast<size_t>(at.size);
    if (size == 0 || elements % size != 0)
      return fail(std::to_string(elements) + " elements do not split into " + std::to_string(size) +
                  " equal blocks");
    *block = elements / size;
    return ffi::Error::Success();
  }
};

// What every call checks before it calls ddl: the library, the communicator (`id`, its
// number), the array's type.
ffi::Error start(const char *collective, const ffi::AnyBuffer &x, int64_t id, Call *call) {
  call->collective = collective;
  call->at = Communicators::get().find(id);
  if (!api().loaded()) return call->fail("libddl is not loaded (import ddl.jax first)");
  if (!call->at.comm) return call->fail(destroyed(id));
  call->type = ddl_type(x.element_type());
  if (call->type < 0)
    return call->fail(std::string("ddl has no type for this array's dtype (") + kDdlTypes + ")");
  return ffi::Error::Success();
}

ffi::Error allreduce(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id,
                     int32_t op) {
  Call c;
  if (ffi::Error e = start("allreduce", x, id, &c); e.failure()) return e;
  const int rc = api().allreduce(x.untyped_data(), y->untyped_data(), x.element_count(), c.type, op,
                                 c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error broadcast(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id,
                     int32_t root) {
  Call c;
  if (ffi::Error e = start("broadcast", x, id, &c); e.failure()) return e;
  if (y->untyped_data() != x.untyped_data())
    std::memcpy(y->untyped_data(), x.untyped_data(), x.size_bytes());
  const int rc = api().broadcast(y->untyped_data(), x.element_count(), c.type, root, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error allgather(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id) {
  Call c;
  size_t block = 0;
  if (ffi::Error e = start("allgather", x, id, &c); e.failure()) return e;
  if (ffi::Error e = c.blocks(y->element_count(), &block); e.failure()) return e;
  if (block != x.element_count()) return c.fail("the result is not the ranks' operands in turn");
  const int rc = api().allgather(x.untyped_data(), y->untyped_data(), block, c.type, c.at.comm);
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
      api().reduce_scatter(x.untyped_data(), y->untyped_data(), block, c.type, op, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

ffi::Error alltoall(ffi::AnyBuffer x, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer> y, int64_t id) {
  Call c;
  size_t block = 0;
  if (ffi::Error e = start("alltoall", x, id, &c); e.failure()) return e;
  if (!api().alltoall) return c.fail("this libddl has no ddl_alltoall");
  if (ffi::Error e = c.blocks(x.element_count(), &block); e.failure()) return e;
  const int rc = api().alltoall(x.untyped_data(), y->untyped_data(), block, c.type, c.at.comm);
  return rc ? c.failed(rc) : ffi::Error::Success();
}

}  // namespace

DDL_FRAMEWORK_EXPORTS(ddl_jax)

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

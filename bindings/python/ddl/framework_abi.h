// libddl's C ABI as the framework bindings see it (ddl/jax/ffi_calls.cc, ddl/tensorflow/ops.cc):
// the enum values, the blocking calls they make (resolved with dlsym from the libddl the ddl
// package loaded, so a binding links to nothing but libdl), and the numbers by which a
// compiled program names its communicator. Each binding's library has its own copy.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

namespace ddl_framework {

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
  int (*alltoall)(const void *, void *, size_t, int, Comm) = nullptr;  // may be missing
  int (*comm_size)(Comm, int *) = nullptr;
  int (*comm_rank)(Comm, int *) = nullptr;
  const char *(*result_string)(int) = nullptr;
  const char *(*last_error)(Comm) = nullptr;

  bool loaded() const { return allreduce != nullptr; }

  // "DDL_ERR_...: <what the communicator last said>".
  std::string failure(int rc, Comm comm) const {
    const char *words = last_error(comm);
    return std::string(result_string(rc)) +
           (words && *words ? std::string(": ") + words : std::string());
  }
};

inline Api &api() {
  static Api the_api;
  return the_api;
}

// Resolves libddl's functions from `path` (already loaded by the ddl package). Returns 0, or
// -1 with the reason in `why` (`why_len` bytes).
inline int load_api(const char *path, char *why, size_t why_len) {
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
  api() = a;
  return 0;
}

// The communicators compiled programs name: a program keeps the number it was traced with,
// never a pointer, so that one whose communicator was destroyed fails with an error instead
// of touching freed memory.
struct Attached {
  Comm comm = nullptr;  // null once destroyed
  int rank = -1;        // kept after, for the error
  int size = 0;
};

class Communicators {
 public:
  static Communicators &get() {
    static Communicators the_table;
    return the_table;
  }

  int64_t attach(Comm comm) {
    Attached at{comm, -1, 0};
    api().comm_rank(comm, &at.rank);
    api().comm_size(comm, &at.size);
    std::lock_guard<std::mutex> hold(lock_);
    table_[next_] = at;
    return next_++;
  }

  void detach(int64_t number) {
    std::lock_guard<std::mutex> hold(lock_);
    const auto it = table_.find(number);
    if (it != table_.end()) it->second.comm = nullptr;
  }

  Attached find(int64_t number) {
    std::lock_guard<std::mutex> hold(lock_);
    const auto it = table_.find(number);
    return it == table_.end() ? Attached{} : it->second;
  }

 private:
  std::mutex lock_;
  std::map<int64_t, Attached> table_;
  int64_t next_ = 1;
};

// What a call on a destroyed communicator is told.
inline std::string destroyed(int64_t number) {
  return "communicator " + std::to_string(number) +
         " was destroyed; a compiled function keeps the communicator it was traced with: "
         "trace it again after init()";
}

// The dtypes both have, for the errors.
constexpr const char *kDdlTypes =
    "ddl takes int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64";

}  // namespace ddl_framework

// Every binding exports these three for its Python side (ctypes).
#define DDL_FRAMEWORK_EXPORTS(prefix)                                         \
  extern "C" int prefix##_load(const char *path, char *why, size_t why_len) { \
    return ddl_framework::load_api(path, why, why_len);                       \
  }                                                                           \
  extern "C" int64_t prefix##_attach(void *comm) {                            \
    return ddl_framework::Communicators::get().attach(comm);                  \
  }                                                                           \
  extern "C" void prefix##_detach(int64_t number) {                           \
    ddl_framework::Communicators::get().detach(number);                       \
  }

// The C ABI of communicators and of the library itself: version, init, destroy, split,
// abort, rank and size; ddl's shared memory; error words and names. Calls: api.cc.
#include <string>

#include "ddl/ddl.h"
#include "lib/bootstrap/launch_env.h"
#include "lib/common/datatype.h"
#include "lib/common/log.h"
#include "lib/core/comm.h"
#include "lib/core/comm_call.h"
#include "lib/core/progress.h"
#include "lib/core/split.h"
#include "lib/device/stream_ipc.h"
#include "lib/transports/shm/shared_buffers.h"

using ddl::CommCall;
using ddl::fail_without_comm;
using ddl::Status;
using ddl::wait_for_queued;

namespace {

ddl_result_t init(const ddl::BootstrapOptions &options, const ddl::CommConfig &config,
                  ddl_comm_t *comm) {
  ddl::LogRank log_rank(options.rank);
  Status s = ddl::create_comm(options, config, comm);
  if (!s.ok()) return fail_without_comm(s.prefix(ddl::strprintf("rank %d: init: ", options.rank)));
  return DDL_SUCCESS;
}

}  // namespace

extern "C" {

ddl_result_t ddl_get_version(int *major, int *minor, int *patch) {
  if (!major || !minor || !patch)
    return fail_without_comm(ddl::invalid_argument("ddl_get_version: a NULL pointer"));
  *major = DDL_VERSION_MAJOR;
  *minor = DDL_VERSION_MINOR;
  *patch = DDL_VERSION_PATCH;
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_init(ddl_comm_t *comm, int nranks, int rank, const char *root_addr,
                           const ddl_config_t *config) {
  if (!comm) return fail_without_comm(ddl::invalid_argument("ddl_comm_init: comm is NULL"));
  *comm = nullptr;
  if (nranks < 1 || nranks > (1 << 20))
    return fail_without_comm(
        ddl::invalid_argument("ddl_comm_init: nranks %d is not within 1..1048576", nranks));
  if (rank < 0 || rank >= nranks)
    return fail_without_comm(ddl::invalid_argument(
        "ddl_comm_init: rank %d is not within 0..%d (nranks %d)", rank, nranks - 1, nranks));
  if (nranks > 1 && (!root_addr || !*root_addr))
    return fail_without_comm(ddl::invalid_argument(
        "ddl_comm_init: rank %d: root_addr (host:port of rank 0's rendezvous) is required", rank));
  ddl::CommConfig resolved;
  Status s = ddl::resolve_config(config, &resolved);
  if (!s.ok()) return fail_without_comm(s.prefix("ddl_comm_init: "));
  ddl::BootstrapOptions options;
  options.rank = rank;
  options.nranks = nranks;
  options.root_addr = root_addr ? root_addr : "";
  options.job_token = resolved.job_token;
  options.timeout_ms = resolved.timeout_ms;
  return init(options, resolved, comm);
}

ddl_result_t ddl_comm_init_from_env(ddl_comm_t *comm) {
  if (!comm)
    return fail_without_comm(ddl::invalid_argument("ddl_comm_init_from_env: comm is NULL"));
  *comm = nullptr;
  ddl::LaunchInfo info;
  Status s = ddl::launch_info_from_env(&info);
  if (!s.ok()) return fail_without_comm(s.prefix("ddl_comm_init_from_env: "));
  ddl::CommConfig resolved;
  s = ddl::resolve_config(nullptr, &resolved);
  if (!s.ok()) return fail_without_comm(s.prefix("ddl_comm_init_from_env: "));
  ddl::BootstrapOptions options = ddl::bootstrap_options_from(info, resolved.timeout_ms);
  resolved.job_token = options.job_token;
  {
    ddl::LogRank log_rank(info.rank);
    const std::string where = !info.root_addr.empty()         ? "at " + info.root_addr
                              : info.pmix                     ? "through PMIx"
                              : !info.rendezvous_file.empty() ? "in " + info.rendezvous_file
                                                              : "none (one rank)";
    DDL_INFO("launched by %s: rank %d of %d; rank 0's rendezvous %s%s", info.source.c_str(),
             info.rank, info.nranks, where.c_str(),
             info.job_token.empty() ? "" : ", with a job token");
  }
  return init(options, resolved, comm);
}

ddl_result_t ddl_comm_destroy(ddl_comm_t comm) {
  if (!comm) return fail_without_comm(ddl::invalid_argument("ddl_comm_destroy: comm is NULL"));
  if (!ddl::comm_is_live(comm))
    return fail_without_comm(
        ddl::invalid_usage("ddl_comm_destroy: %p is not a live communicator (destroyed twice?)",
                           static_cast<void *>(comm)));
  if (comm->busy.exchange(true))
    return fail_without_comm(ddl::invalid_usage(
        "rank %d: ddl_comm_destroy: another thread is inside a call on this communicator; "
        "ddl_comm_abort it, wait for that call to return, then destroy",
        comm->rank));
  ddl::LogRank log_rank(comm->rank);
  ddl::unregister_comm(comm);
  ddl::destroy_comm(comm);  // queued collectives run to their end (or deadline) first
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_split(ddl_comm_t comm, int color, int key, ddl_comm_t *newcomm) {
  if (!newcomm) return fail_without_comm(ddl::invalid_argument("ddl_comm_split: newcomm is NULL"));
  *newcomm = nullptr;
  CommCall guard(comm, "ddl_comm_split");
  if (!guard.ok()) return guard.fail();
  Status s = wait_for_queued(comm);
  if (s.ok()) s = ddl::split_comm(comm, color, key, newcomm);
  if (!s.ok()) s.prefix(ddl::strprintf("rank %d: ddl_comm_split: ", comm->rank));
  return guard.finish(s);
}

ddl_result_t ddl_comm_abort(ddl_comm_t comm) {
  // No CommCall: abort must work while another thread is inside a call.
  if (!comm || !ddl::comm_is_live(comm))
    return fail_without_comm(ddl::invalid_usage("ddl_comm_abort: not a live communicator"));
  comm->aborted.store(true);
  ddl::device::abort_stream_ipc(comm);  // the device's waits, too
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_rank(ddl_comm_t comm, int *rank) {
  CommCall guard(comm, "ddl_comm_rank");
  if (!guard.ok()) return guard.fail();
  if (!rank) return guard.finish(ddl::invalid_argument("ddl_comm_rank: rank is NULL"));
  *rank = comm->rank;
  return DDL_SUCCESS;
}

ddl_result_t ddl_comm_size(ddl_comm_t comm, int *size) {
  CommCall guard(comm, "ddl_comm_size");
  if (!guard.ok()) return guard.fail();
  if (!size) return guard.finish(ddl::invalid_argument("ddl_comm_size: size is NULL"));
  *size = comm->nranks;
  return DDL_SUCCESS;
}

const char *ddl_result_string(ddl_result_t result) {
  switch (ddl::raw_enum_value(result)) {
    case DDL_SUCCESS:
      return "DDL_SUCCESS: no error";
    case DDL_ERR_INVALID_ARGUMENT:
      return "DDL_ERR_INVALID_ARGUMENT: invalid argument";
    case DDL_ERR_INVALID_USAGE:
      return "DDL_ERR_INVALID_USAGE: invalid usage";
    case DDL_ERR_SYSTEM:
      return "DDL_ERR_SYSTEM: system or library error";
    case DDL_ERR_INTERNAL:
      return "DDL_ERR_INTERNAL: internal error (a bug in ddl)";
    case DDL_ERR_REMOTE:
      return "DDL_ERR_REMOTE: a remote rank failed or disconnected";
    case DDL_ERR_TIMEOUT:
      return "DDL_ERR_TIMEOUT: a deadline passed";
    case DDL_ERR_UNSUPPORTED:
      return "DDL_ERR_UNSUPPORTED: not supported";
    default:
      return "unknown ddl_result_t value";
  }
}

ddl_result_t ddl_mem_alloc(void **ptr, size_t bytes) {
  if (!ptr) return fail_without_comm(ddl::invalid_argument("ddl_mem_alloc: ptr is NULL"));
  Status s = ddl::shared_buffer_alloc(bytes, ptr);
  if (!s.ok()) return fail_without_comm(s.prefix(ddl::strprintf("ddl_mem_alloc(%zu B): ", bytes)));
  return DDL_SUCCESS;
}

ddl_result_t ddl_mem_free(void *ptr) {
  if (!ptr) return DDL_SUCCESS;  // as free(NULL)
  Status s = ddl::shared_buffer_free(ptr);
  if (!s.ok()) return fail_without_comm(s.prefix("ddl_mem_free: "));
  return DDL_SUCCESS;
}

const char *ddl_comm_last_error(ddl_comm_t comm) {
  if (comm && ddl::comm_is_live(comm)) return comm->last_error.c_str();
  return ddl::thread_last_error().c_str();
}

size_t ddl_datatype_size(ddl_datatype_t dtype) {
  return ddl::datatype_size(ddl::raw_enum_value(dtype));
}
const char *ddl_datatype_name(ddl_datatype_t dtype) {
  return ddl::datatype_name(ddl::raw_enum_value(dtype));
}
const char *ddl_op_name(ddl_op_t op) {
  return ddl::op_name(ddl::raw_enum_value(op));
}

}  // extern "C"

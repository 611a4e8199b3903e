#include "lib/core/comm_call.h"

#include "lib/core/comm.h"
#include "lib/core/progress.h"

namespace ddl {

std::string &thread_last_error() {
  thread_local std::string last;
  return last;
}

ddl_result_t fail_without_comm(const Status &s) {
  thread_last_error() = s.message();
  DDL_LOG(LogLevel::kError, "%s", s.message().c_str());
  return s.code();
}

CommCall::CommCall(ddl_comm *comm, const char *what) : comm_(comm) {
  if (!comm) {
    status_ = invalid_argument("%s: the communicator is NULL", what);
  } else if (!comm_is_live(comm)) {
    status_ = invalid_usage(
        "%s: %p is not a live communicator (destroyed, or never created by ddl_comm_init)", what,
        static_cast<void *>(comm));
  } else if (comm->busy.exchange(true)) {
    status_ = invalid_usage(
        "rank %d: %s: another thread is inside a call on this communicator; calls on one "
        "communicator must not overlap",
        comm->rank, what);
  } else {
    owned_ = true;
    // Log lines of this call name this communicator's rank (the thread may drive others).
    log_rank_.emplace(comm->rank);
  }
}

CommCall::~CommCall() {
  if (owned_) comm_->busy.store(false);
}

ddl_result_t CommCall::finish(const Status &s) {
  if (s.ok()) return DDL_SUCCESS;
  if (owned_) {
    comm_->last_error = s.message();
    DDL_LOG(LogLevel::kError, "%s", s.message().c_str());
    return s.code();
  }
  return fail_without_comm(s);
}

Status wait_for_queued(ddl_comm *comm) {
  hand_over_parked(comm);  // parked sends and receives are waited for too
  if (!comm->progress || comm->progress->idle()) return Status::Ok();
  return comm->progress->drain();
}

}  // namespace ddl

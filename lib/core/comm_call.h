// What every C entry point does around its work: claim the communicator for the call (a
// destroyed, foreign or busy handle is an error, not a crash), and leave the words of a
// failure where ddl_comm_last_error finds them.
#pragma once

#include <optional>
#include <string>

#include "ddl/ddl.h"
#include "lib/common/log.h"
#include "lib/common/status.h"

struct ddl_comm;

namespace ddl {

// The last error of calls that had no (valid) communicator, per thread.
std::string &thread_last_error();

// Records s as this thread's last error, logs it, and returns its code.
ddl_result_t fail_without_comm(const Status &s);

// Marks the communicator in use by this thread for the length of one call.
class CommCall {
 public:
  CommCall(ddl_comm *comm, const char *what);
  ~CommCall();
  CommCall(const CommCall &) = delete;
  CommCall &operator=(const CommCall &) = delete;
  bool ok() const { return status_.ok(); }
  ddl_result_t fail() { return finish(status_); }
  // DDL_SUCCESS, or s's code with its words in the communicator's last error.
  ddl_result_t finish(const Status &s);

 private:
  ddl_comm *comm_;
  Status status_;
  bool owned_ = false;
  std::optional<LogRank> log_rank_;
};

// Before a call runs on the caller's thread: the nonblocking collectives queued before it
// must have run (ranks match calls in order). A communicator that never queued one has no
// progress thread and pays nothing here.
Status wait_for_queued(ddl_comm *comm);

}  // namespace ddl

// Runs a test body in N forked processes that form one communicator, like gloo's
// MultiProcTest. The parent waits with a deadline and kills every child at the end,
// whatever happens; children report through their exit status and stderr.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/loopback.h"

#include "ddl/ddl.h"

namespace ddltest {

// A body returns 0 on success; on failure it prints why (to stderr) and returns non-zero.
using RankBody = std::function<int(ddl_comm_t comm, int rank, int nranks)>;

struct RunOptions {
  int timeout_ms = 120000;      // the whole run; children still alive then are killed
  int comm_timeout_ms = 60000;  // DDL timeout inside the communicator
  // Runs in each child before ddl_comm_init (e.g. to set environment variables).
  std::function<void(int rank)> before_init;
};

// "" when every rank returned 0; else one line per failed rank.
std::string run_ranks(int nranks, const RankBody &body, const RunOptions &options = RunOptions());

// run_ranks at log level info (which names the way each new call shape goes), each rank's
// stderr going to a file of its own; fills logs[r] with rank r's stderr.
std::string run_ranks_logged(int nranks, const RankBody &body, const RunOptions &options,
                             std::vector<std::string> *logs);

}  // namespace ddltest

// For bodies: print and return 1 when cond is false.
#define RANK_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// For bodies: a ddl call that must succeed.
#define RANK_OK(call)                                                          \
  do {                                                                         \
    ddl_result_t rank_ok_result_ = (call);                                     \
    RANK_CHECK(rank_ok_result_ == DDL_SUCCESS, "%s -> %s: %s", #call,          \
               ddl_result_string(rank_ok_result_), ddl_comm_last_error(comm)); \
  } while (0)

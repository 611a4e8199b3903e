// The measurement loop of ddl_perf, written against a small interface so that
// bench/mpi_allreduce measures MPI with exactly the same method, sizes and table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "perf_options.h"

namespace ddl_perf {

// One library's collectives, as ddl_perf uses them. Errors are fatal: the backend prints
// what failed on which rank and exits non-zero, so the driver never sees them.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // "ddl 0.1.0", "Open MPI v4.1.4, ..." for the table's first line.
  virtual std::string library() const = 0;
  // Extra '#' lines for the header (where it runs, how `collective` is called, ...).
  virtual std::vector<std::string> notes(Collective collective) const { return {}; }
  // Empty when the backend runs this combination; else why it cannot.
  virtual std::string unsupported(Collective collective, ddl_datatype_t dtype,
                                  ddl_op_t op) const = 0;
  // One call with NCCL's argument conventions: `count` is the per-rank count for allgather
  // and reduce_scatter; the call is in place when `send` == `recv` (allreduce, broadcast),
  // `send` == recv + rank * count (allgather) or `recv` == send + rank * count
  // (reduce_scatter). Returns false when the library does not support that (in-place) form.
  virtual bool run(Collective collective, const void *send, void *recv, size_t count,
                   ddl_datatype_t dtype, ddl_op_t op, int root) = 0;
  // -R 1: buffers from the library's own allocator (ddl_mem_alloc, MPI_Alloc_mem), which
  // may let it skip copies; null when that fails.
  virtual void *library_alloc(size_t bytes) = 0;
  virtual void library_free(void *buffer) = 0;
  virtual void barrier() = 0;
  virtual double max_across_ranks(double value) = 0;
  virtual uint64_t sum_across_ranks(uint64_t value) = 0;
};

class DeviceMemory;

// Runs every size, datatype and op of `options`; rank 0 prints the table (and writes the
// JSON file). Returns the process's exit status: 0, 1 when results were wrong or the
// JSON file could not be written, 2 for options that cannot run (root out of range ...).
// With -G (options.device_memory) the buffers are `device`'s (opened by the caller; a tool
// that passes none refuses -G): inputs are written into host copies and copied over before
// the checked call, results copied back to be checked; the timed calls touch only GPU memory.
int run_perf(const PerfOptions &options, CollectiveBackend &backend, const char *tool,
             DeviceMemory *device = nullptr);

}  // namespace ddl_perf

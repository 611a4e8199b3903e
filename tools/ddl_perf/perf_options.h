// Command line of ddl_perf (and of bench/mpi_allreduce, which shares it): nccl-tests' flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddl/ddl.h"

namespace ddl_perf {

// kBarrier moves no data: every size is one row of 0 bytes (its latency). kSendRecv is
// nccl-tests' sendrecv: rank r sends to r+1 and receives from r-1, grouped.
enum class Collective {
  kAllreduce,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
  kAlltoall,
  kSendRecv,
  kReduce,
  kGather,
  kScatter,
  kScan,
  kExscan,
};

const char *collective_name(Collective collective);
// Whether the collective reduces (and so has an op and a redop column value).
bool collective_reduces(Collective collective);
// Whether it has a root (-r).
bool collective_rooted(Collective collective);
// Whether the count of one call is per rank (the message is count * nranks elements).
bool count_per_rank(Collective collective);

struct PerfOptions {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 32ull << 20;
  double step_factor = 2;   // sizes grow by this factor ...
  uint64_t step_bytes = 0;  // ... or, when non-zero, by this many bytes (-i)
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  std::vector<ddl_datatype_t> datatypes = {DDL_FLOAT32};
  std::vector<ddl_op_t> ops = {DDL_SUM};
  Collective collective = Collective::kAllreduce;
  int root = 0;  // broadcast, reduce, gather, scatter
  std::string json_path;
  std::string algorithm;        // -a: DDL_ALGO for this run ("" = the library chooses)
  bool library_memory = false;  // -R 1: buffers from the library's allocator
  bool device_memory = false;   // -G: buffers in GPU memory (ddl_perf only)
  int device = -1;              // -D: the GPU of every rank; -1: local rank mod device count
  bool stream = false;          // -S: with -G, the stream-ordered calls on the default stream
};

enum class ParseOutcome { kRun, kHelp, kError };

// Parses argv (with getopt_long, whose global state it resets first). On kError, *error says what
// is wrong.
ParseOutcome parse_perf_options(int argc, char **argv, PerfOptions *options, std::string *error);

// The --help text; `tool` names the program in it.
std::string perf_usage(const char *tool);

// The message sizes to measure, in bytes, from min_bytes to max_bytes.
std::vector<uint64_t> perf_sizes(const PerfOptions &options);

// nccl-tests' name of a datatype ("float", "half", "bfloat16", "double", "int8", ...).
const char *nccl_type_name(ddl_datatype_t dtype);

}  // namespace ddl_perf

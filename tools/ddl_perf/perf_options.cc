#include "perf_options.h"

#include <getopt.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "lib/common/datatype.h"
#include "lib/common/params.h"

namespace ddl_perf {
namespace {

struct CollectiveInfo {
  Collective collective;
  const char *name;
  const char *alias;
};
const CollectiveInfo kCollectives[] = {
    {Collective::kAllreduce, "allreduce", "all_reduce"},
    {Collective::kBroadcast, "broadcast", "bcast"},
    {Collective::kAllgather, "allgather", "all_gather"},
    {Collective::kReduceScatter, "reduce_scatter", "reducescatter"},
    {Collective::kBarrier, "barrier", "barrier"},
    {Collective::kAlltoall, "alltoall", "all_to_all"},
    {Collective::kSendRecv, "sendrecv", "send_recv"},
    {Collective::kReduce, "reduce", "reduce"},
    {Collective::kGather, "gather", "gather"},
    {Collective::kScatter, "scatter", "scatter"},
    {Collective::kScan, "scan", "scan"},
    {Collective::kExscan, "exscan", "exscan"},
};

bool parse_int_option(const char *text, int64_t min, int64_t max, int64_t *value) {
  return ddl::parse_int(text, min, max, value);
}

bool parse_datatypes(const char *text, std::vector<ddl_datatype_t> *out) {
  out->clear();
  if (std::strcmp(text, "all") == 0) {
    for (int i = 0; i < DDL_DATATYPE_COUNT; ++i) out->push_back(static_cast<ddl_datatype_t>(i));
    return true;
  }
  ddl_datatype_t dtype;
  if (!ddl::datatype_from_name(text, &dtype)) return false;
  out->push_back(dtype);
  return true;
}

bool parse_ops(const char *text, std::vector<ddl_op_t> *out) {
  out->clear();
  if (std::strcmp(text, "all") == 0) {
    for (int i = 0; i < DDL_OP_COUNT; ++i) out->push_back(static_cast<ddl_op_t>(i));
    return true;
  }
  ddl_op_t op;
  if (!ddl::op_from_name(text, &op)) return false;
  out->push_back(op);
  return true;
}

std::string quoted(const char *text) {
  return std::string("'") + text + "'";
}

}  // namespace

const char *collective_name(Collective collective) {
  for (const CollectiveInfo &info : kCollectives) {
    if (info.collective == collective) return info.name;
  }
  return "invalid";
}

bool collective_reduces(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kReduceScatter ||
         collective == Collective::kReduce || collective == Collective::kScan ||
         collective == Collective::kExscan;
}

bool collective_rooted(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce ||
         collective == Collective::kGather || collective == Collective::kScatter;
}

bool count_per_rank(Collective collective) {
  return collective == Collective::kAllgather || collective == Collective::kReduceScatter ||
         collective == Collective::kAlltoall || collective == Collective::kGather ||
         collective == Collective::kScatter;
}

const char *nccl_type_name(ddl_datatype_t dtype) {
  switch (dtype) {
    case DDL_FLOAT16:
      return "half";
    case DDL_FLOAT32:
      return "float";
    case DDL_FLOAT64:
      return "double";
    default:
      return ddl::datatype_name(dtype);  // int8, uint8, int32, ..., bfloat16
  }
}

std::string perf_usage(const char *tool) {
  std::string text = std::string("Usage: ") + tool + " [options]\n" +
                     R"(
Measures a collective over a range of message sizes and prints nccl-tests' table.
Run one process per rank (ddlrun -n N, mpirun -np N).

  -b, --minbytes SIZE      smallest message (default 8); K, M, G suffixes (powers of 1024)
  -e, --maxbytes SIZE      largest message (default 32M)
  -f, --stepfactor F       multiply the size by F between steps (default 2)
  -i, --stepbytes SIZE     add SIZE between steps instead (the last of -f/-i wins)
  -n, --iters N            timed iterations per size (default 20)
  -w, --warmup_iters N     untimed iterations before them (default 5)
  -c, --check 0|1          verify every element of the result (default 1)
  -d, --datatype TYPE      float, half, bfloat16, double, int8, uint8, int32, uint32, int64,
                           uint64 (also float16, float32, float64, bf16...), or all
  -o, --op OP              sum, prod, min, max, avg, or all (default sum)
  -C, --collective NAME    allreduce (default), broadcast, allgather, reduce_scatter,
                           barrier (latency: one row of 0 bytes), alltoall, reduce, gather,
                           scatter, sendrecv (rank r sends to r+1, receives from r-1),
                           scan, exscan (prefix reductions, MPI_Scan and MPI_Exscan)
  -r, --root RANK          root of broadcast, reduce, gather, scatter (default 0)
  -J, --json FILE          also write the results as JSON
  -a, --algorithm NAME     force an algorithm (sets DDL_ALGO: ring, rd, ...); default: the
                           library's cost models choose per size
  -R, --library_memory 0|1 allocate the buffers with the library's allocator (default 0):
                           ddl_mem_alloc (shared between the ranks of a host), MPI_Alloc_mem
  -G, --device_memory      run on GPU buffers (ddl_perf): allocated with the CUDA driver
                           (libcuda.so.1, or DDL_CUDA_LIBRARY), filled and checked through
                           copies; one GPU per local rank (local rank mod the GPU count)
  -D, --device N           with -G: every rank on GPU N instead
  -S, --stream             with -G: the stream-ordered calls (ddl_allreduce_stream, ...) on
                           the default stream, timed as nccl-tests times its calls: the -n
                           calls queued, then the stream synchronized (allreduce, broadcast,
                           allgather, reduce_scatter, alltoall, reduce, gather, scatter)
  -h, --help               this text

Columns (nccl-tests'; the header's legend line says them for the collective measured):
size is the whole message in bytes: for allgather, reduce_scatter, gather and scatter the
count per rank times ranks, for alltoall what each rank sends in all, for sendrecv what each
rank sends; time is the mean per iteration in microseconds over -n iterations, the maximum
across ranks, after -w untimed ones at that size (and, before the first size, -w at the
largest and at the smallest size, as nccl-tests warms up); algbw = size / time in GB/s
(10^9 bytes); busbw = algbw * factor, with factor 2(n-1)/n for allreduce, (n-1)/n for
allgather, reduce_scatter, alltoall, gather and scatter, 1 for broadcast, reduce and
sendrecv (nccl-tests' doc/PERFORMANCE.md), and 1 for scan and exscan (nccl-tests has none). #wrong counts wrong elements over all ranks
(N/A without -c 1). The footer gives their sum and the mean busbw of every row in GB/s.
)";
  return text;
}

ParseOutcome parse_perf_options(int argc, char **argv, PerfOptions *options, std::string *error) {
  static const option kLongOptions[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"collective", required_argument, nullptr, 'C'},
      {"root", required_argument, nullptr, 'r'},
      {"json", required_argument, nullptr, 'J'},
      {"algorithm", required_argument, nullptr, 'a'},
      {"library_memory", required_argument, nullptr, 'R'},
      {"device_memory", no_argument, nullptr, 'G'},
      {"device", required_argument, nullptr, 'D'},
      {"stream", no_argument, nullptr, 'S'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  opterr = 0;  // we say it ourselves, in our words
  optind = 0;  // glibc: start afresh, so that tests can parse several command lines
  int64_t value = 0;
  for (;;) {
    int opt = getopt_long(argc, argv, ":b:e:f:i:n:w:c:d:o:C:r:J:a:R:GD:Sh", kLongOptions, nullptr);
    if (opt == -1) break;
    const char *arg = optarg;
    switch (opt) {
      case 'b':
      case 'e': {
        uint64_t bytes = 0;
        if (!ddl::parse_bytes(arg, &bytes) || bytes == 0) {
          *error = std::string("-") + static_cast<char>(opt) +
                   " wants a size in bytes such as 8, 64K, 256M or 1G, not " + quoted(arg);
          return ParseOutcome::kError;
        }
        (opt == 'b' ? options->min_bytes : options->max_bytes) = bytes;
        break;
      }
      case 'f': {
        char *end = nullptr;
        double factor = std::strtod(arg, &end);
        if (*arg == '\0' || *end != '\0' || !(factor > 1) || !std::isfinite(factor)) {
          *error = "-f wants a step factor greater than 1, not " + quoted(arg);
          return ParseOutcome::kError;
        }
        options->step_factor = factor;
        options->step_bytes = 0;
        break;
      }
      case 'i':
        if (!ddl::parse_bytes(arg, &options->step_bytes) || options->step_bytes == 0) {
          *error = "-i wants a step in bytes greater than 0, not " + quoted(arg);
          return ParseOutcome::kError;
        }
        break;
      case 'n':
      case 'w':
        if (!parse_int_option(arg, opt == 'n' ? 1 : 0, 1000000000, &value)) {
          *error = std::string("-") + static_cast<char>(opt) + " wants a number of iterations" +
                   (opt == 'n' ? " (at least 1)" : "") + ", not " + quoted(arg);
          return ParseOutcome::kError;
        }
        (opt == 'n' ? options->iters : options->warmup_iters) = static_cast<int>(value);
        break;
      case 'c':
      case 'R':
        if (!parse_int_option(arg, 0, 1, &value)) {
          *error = std::string("-") + static_cast<char>(opt) + " wants 0 or 1, not " + quoted(arg);
          return ParseOutcome::kError;
        }
        (opt == 'c' ? options->check : options->library_memory) = value == 1;
        break;
      case 'd':
        if (!parse_datatypes(arg, &options->datatypes)) {
          *error = "unknown datatype " + quoted(arg) +
                   "; use float, half, bfloat16, double, int8, uint8, int32, uint32, int64, "
                   "uint64 or all";
          return ParseOutcome::kError;
        }
        break;
      case 'o':
        if (!parse_ops(arg, &options->ops)) {
          *error = "unknown op " + quoted(arg) + "; use sum, prod, min, max, avg or all";
          return ParseOutcome::kError;
        }
        break;
      case 'C': {
        bool found = false;
        for (const CollectiveInfo &info : kCollectives) {
          if (strcasecmp(arg, info.name) == 0 || strcasecmp(arg, info.alias) == 0) {
            options->collective = info.collective;
            found = true;
          }
        }
        if (!found) {
          *error = "unknown collective " + quoted(arg) +
                   "; use allreduce, broadcast, allgather, reduce_scatter, barrier, alltoall, "
                   "reduce, gather, scatter, sendrecv, scan or exscan";
          return ParseOutcome::kError;
        }
        break;
      }
      case 'r':
        if (!parse_int_option(arg, 0, 1 << 30, &value)) {
          *error = "-r wants a rank, not " + quoted(arg);
          return ParseOutcome::kError;
        }
        options->root = static_cast<int>(value);
        break;
      case 'J':
        options->json_path = arg;
        break;
      case 'a':
        options->algorithm = arg;  // checked by the library (DDL_ALGO) at init
        break;
      case 'G':
        options->device_memory = true;
        break;
      case 'D':
        if (!parse_int_option(arg, 0, 1023, &value)) {
          *error = "-D wants a GPU number (0, 1, ...), not " + quoted(arg);
          return ParseOutcome::kError;
        }
        options->device = static_cast<int>(value);
        break;
      case 'S':
        options->stream = true;
        break;
      case 'h':
        return ParseOutcome::kHelp;
      case ':':
        *error = std::string("option ") + argv[optind - 1] + " needs a value";
        return ParseOutcome::kError;
      default:
        *error = std::string("unknown option ") +
                 (optopt ? std::string("-") + static_cast<char>(optopt) : argv[optind - 1]);
        return ParseOutcome::kError;
    }
  }
  if (optind < argc) {
    *error = std::string("unexpected argument ") + quoted(argv[optind]);
    return ParseOutcome::kError;
  }
  if (options->device_memory && options->library_memory) {
    *error = "-G (GPU buffers) and -R 1 (the library's host allocator) exclude each other";
    return ParseOutcome::kError;
  }
  if (options->device >= 0 && !options->device_memory) {
    *error = "-D " + std::to_string(options->device) + " chooses a GPU for -G, which is not given";
    return ParseOutcome::kError;
  }
  if (options->stream && !options->device_memory) {
    *error = "-S (stream-ordered calls) runs on GPU buffers: give -G too";
    return ParseOutcome::kError;
  }
  const Collective c = options->collective;
  if (options->stream && (c == Collective::kBarrier || c == Collective::kScan ||
                          c == Collective::kExscan || c == Collective::kSendRecv)) {
    *error =
        "-S: barrier, scan, exscan and sendrecv have no stream-ordered forms (allreduce, "
        "broadcast, allgather, reduce_scatter, alltoall, reduce, gather and scatter do)";
    return ParseOutcome::kError;
  }
  if (options->min_bytes > options->max_bytes) {
    *error = "-b (" + std::to_string(options->min_bytes) + ") is larger than -e (" +
             std::to_string(options->max_bytes) + ")";
    return ParseOutcome::kError;
  }
  return ParseOutcome::kRun;
}

std::vector<uint64_t> perf_sizes(const PerfOptions &options) {
  std::vector<uint64_t> sizes;
  for (uint64_t size = options.min_bytes; size <= options.max_bytes;) {
    sizes.push_back(size);
    uint64_t next =
        options.step_bytes
            ? size + options.step_bytes
            : static_cast<uint64_t>(std::ceil(static_cast<double>(size) * options.step_factor));
    if (next <= size) break;  // overflow or a factor too close to 1 for this size
    size = next;
  }
  return sizes;
}

}  // namespace ddl_perf

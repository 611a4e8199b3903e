#include "tools/ddl_sim/options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "lib/algorithms/registry.h"
#include "lib/common/datatype.h"
#include "lib/common/params.h"

namespace ddl_sim {
namespace {

const char kUsage[] = R"(Usage: ddl_sim --cluster FILE [options]

Times ddl's own schedules (the library's builders, the cost models' choice) on a modeled
cluster; see tools/ddl_sim/README.md.

  --cluster FILE       the cluster description (tools/ddl_sim/clusters/*.cluster)
  --set KEY=VALUE      overrides one key of it (repeatable): --set nic_rate=200Gbit
  -N, --hosts H        hosts (overrides the file's)
  -g, --ranks_per_host L
  -C, --collective C   allreduce (default), allgather, reduce_scatter, broadcast, alltoall, reduce
  -d, --datatype T     float32 (default), bfloat16, float16, float64, ...
  -b, -e, -f           sizes from -b to -e bytes, times -f (nccl-tests' meaning; 4K, 64M, 2)
  -a, --algorithm A    force an algorithm (default: the cost models' choice, as the library)
  -J, --json FILE      the results as ddl_perf -J writes them (bench/plot.py reads it)
  --check-models       per size: the algorithm the cost models choose against the fastest
                       one in the simulation
  --efficiency         project a DDP training step (see --params, --compute, --bucket) on
                       --scale's host counts
  --params P           gradient elements (default 25.6M, ResNet-50); -d sets their type
  --compute SECONDS    forward + backward per step on one GPU (default 0.1)
  --bucket BYTES       DDP's bucket (default 25M)
  --scale H1,H2,...    host counts for --efficiency (default: the cluster's)
  --goal FILE          write the -b size's per-rank schedules as a GOAL file (LogGOPSim)
  --trace FILE         simulate the -b size and write the first host's ranks' steps as a
                       Chrome trace (chrome://tracing, ui.perfetto.dev): where the time goes
  --describe           print the cluster's every key and exit
)";

bool parse_size(const std::string &text, size_t *bytes) {
  uint64_t parsed = 0;
  if (!ddl::parse_bytes(text, &parsed)) return false;
  *bytes = static_cast<size_t>(parsed);
  return true;
}

bool parse_collective(const std::string &name, ddl::Collective *collective) {
  for (ddl::Collective c :
       {ddl::Collective::kAllreduce, ddl::Collective::kAllgather, ddl::Collective::kReduceScatter,
        ddl::Collective::kBroadcast, ddl::Collective::kAlltoall, ddl::Collective::kReduce}) {
    if (name == ddl::collective_name(c)) {
      *collective = c;
      return true;
    }
  }
  return false;
}

bool parse_positive(const std::string &text, double *value) {
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0)) return false;
  *value = v;
  return true;
}

// "25.6M" elements (powers of 1000 here: parameter counts are decimal).
bool parse_parameters(const std::string &text, double *value) {
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K")
    v *= 1e3;
  else if (unit == "M")
    v *= 1e6;
  else if (unit == "B" || unit == "G")
    v *= 1e9;
  else if (!unit.empty())
    return false;
  if (end == text.c_str() || !(v >= 1)) return false;
  *value = v;
  return true;
}

bool parse_host_list(const std::string &text, std::vector<int> *out) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int64_t h = 0;
    if (!ddl::parse_int(item, 1, 1 << 16, &h)) return false;
    out->push_back(static_cast<int>(h));
  }
  return !out->empty();
}

}  // namespace

size_t count_for_bytes(ddl::Collective collective, size_t bytes, size_t elem_size, int nranks) {
  const size_t elems = bytes / elem_size;
  switch (collective) {
    case ddl::Collective::kAllgather:
    case ddl::Collective::kReduceScatter:
    case ddl::Collective::kAlltoall:
      return elems / static_cast<size_t>(nranks);  // per rank (per peer for alltoall)
    default:
      return elems;
  }
}

double bus_factor(ddl::Collective collective, int nranks) {
  const double n = nranks;
  switch (collective) {
    case ddl::Collective::kAllreduce:
      return 2 * (n - 1) / n;
    case ddl::Collective::kAllgather:
    case ddl::Collective::kReduceScatter:
    case ddl::Collective::kAlltoall:
      return (n - 1) / n;
    default:
      return 1;
  }
}

bool parse_options(int argc, char **argv, Options *options, std::string *error) {
  enum Long {
    kCluster = 256,
    kSet,
    kCheck,
    kEfficiency,
    kParams,
    kCompute,
    kBucket,
    kScale,
    kGoal,
    kTrace,
    kDescribe
  };
  static const option longs[] = {
      {"cluster", required_argument, nullptr, kCluster},
      {"set", required_argument, nullptr, kSet},
      {"hosts", required_argument, nullptr, 'N'},
      {"ranks_per_host", required_argument, nullptr, 'g'},
      {"collective", required_argument, nullptr, 'C'},
      {"datatype", required_argument, nullptr, 'd'},
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"algorithm", required_argument, nullptr, 'a'},
      {"json", required_argument, nullptr, 'J'},
      {"check-models", no_argument, nullptr, kCheck},
      {"efficiency", no_argument, nullptr, kEfficiency},
      {"params", required_argument, nullptr, kParams},
      {"compute", required_argument, nullptr, kCompute},
      {"bucket", required_argument, nullptr, kBucket},
      {"scale", required_argument, nullptr, kScale},
      {"goal", required_argument, nullptr, kGoal},
      {"trace", required_argument, nullptr, kTrace},
      {"describe", no_argument, nullptr, kDescribe},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  // The file first, so that --set, -N and -g override it whatever their order.
  std::string cluster_path;
  std::vector<std::string> sets;
  int hosts = 0, ranks_per_host = 0;
  bool max_given = false;
  opterr = 0;
  optind = 1;
  int opt;
  while ((opt = getopt_long(argc, argv, "N:g:C:d:b:e:f:a:J:h", longs, nullptr)) != -1) {
    const std::string arg = optarg ? optarg : "";
    int64_t number = 0;
    switch (opt) {
      case kCluster:
        cluster_path = arg;
        break;
      case kSet:
        sets.push_back(arg);
        break;
      case 'N':
      case 'g':
        if (!ddl::parse_int(arg, 1, 1 << 16, &number))
          return *error = std::string("-") + static_cast<char>(opt) + " wants a count, not '" +
                          arg + "'",
                 false;
        (opt == 'N' ? hosts : ranks_per_host) = static_cast<int>(number);
        break;
      case 'C':
        if (!parse_collective(arg, &options->collective))
          return *error = "-C: unknown collective '" + arg +
                          "' (allreduce, allgather, reduce_scatter, broadcast, alltoall, reduce)",
                 false;
        break;
      case 'd': {
        ddl_datatype_t dtype;
        if (!ddl::datatype_from_name(arg.c_str(), &dtype))
          return *error = "-d: unknown datatype '" + arg + "'", false;
        options->elem_size = ddl::datatype_size(dtype);
        options->dtype = arg;
        break;
      }
      case 'b':
      case 'e':
        if (!parse_size(arg, opt == 'b' ? &options->min_bytes : &options->max_bytes))
          return *error = std::string("-") + static_cast<char>(opt) +
                          " wants a size like 64M, not '" + arg + "'",
                 false;
        max_given = max_given || opt == 'e';
        break;
      case 'f':
        if (!parse_positive(arg, &options->factor) || options->factor <= 1)
          return *error = "-f wants a factor greater than 1, not '" + arg + "'", false;
        break;
      case 'a':
        options->algorithm = arg;
        break;
      case 'J':
        options->json_path = arg;
        break;
      case kCheck:
        options->mode = Mode::kCheckModels;
        break;
      case kEfficiency:
        options->mode = Mode::kEfficiency;
        break;
      case kParams:
        if (!parse_parameters(arg, &options->parameters))
          return *error = "--params wants a count like 25.6M or 1.3B, not '" + arg + "'", false;
        break;
      case kCompute:
        if (!parse_positive(arg, &options->compute_seconds))
          return *error = "--compute wants seconds like 0.15, not '" + arg + "'", false;
        break;
      case kBucket: {
        size_t bytes = 0;
        if (!parse_size(arg, &bytes) || bytes == 0)
          return *error = "--bucket wants a size like 25M, not '" + arg + "'", false;
        options->bucket_bytes = static_cast<double>(bytes);
        break;
      }
      case kScale:
        if (!parse_host_list(arg, &options->host_counts))
          return *error = "--scale wants host counts like 1,2,4,64, not '" + arg + "'", false;
        break;
      case kGoal:
        options->mode = Mode::kGoal;
        options->goal_path = arg;
        break;
      case kTrace:
        options->mode = Mode::kTrace;
        options->trace_path = arg;
        break;
      case kDescribe:
        options->mode = Mode::kDescribe;
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        error->clear();
        return false;
      default:
        return *error = std::string("unknown or incomplete option ") + argv[optind - 1] +
                        " (--help lists them)",
               false;
    }
  }
  if (optind < argc)
    return *error = std::string("unexpected argument '") + argv[optind] + "'", false;
  if (cluster_path.empty())
    return *error = "--cluster FILE is required (tools/ddl_sim/clusters/)", false;
  ddl::Status s = load_cluster(cluster_path, &options->cluster);
  for (size_t i = 0; s.ok() && i < sets.size(); ++i) {
    const size_t equals = sets[i].find('=');
    if (equals == std::string::npos)
      return *error = "--set wants KEY=VALUE, not '" + sets[i] + "'", false;
    s = set_cluster_key(sets[i].substr(0, equals), sets[i].substr(equals + 1), &options->cluster);
  }
  if (!s.ok()) return *error = s.message(), false;
  if (hosts) options->cluster.hosts = hosts;
  if (ranks_per_host) options->cluster.ranks_per_host = ranks_per_host;
  // -b alone past -e's default: that one size (--trace and --goal take -b only).
  if (!max_given && options->min_bytes > options->max_bytes)
    options->max_bytes = options->min_bytes;
  if (options->min_bytes > options->max_bytes) return *error = "-b is larger than -e", false;
  if (options->host_counts.empty()) options->host_counts.push_back(options->cluster.hosts);
  if (!ddl::known_algorithm(options->algorithm))
    return *error = "-a: unknown algorithm '" + options->algorithm + "'", false;
  return true;
}

}  // namespace ddl_sim

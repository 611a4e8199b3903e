// ddl_sim: projects ddl's collectives onto modeled clusters (README.md beside this file).
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/registry.h"
#include "tools/ddl_sim/efficiency.h"
#include "tools/ddl_sim/goal.h"
#include "tools/ddl_sim/options.h"
#include "tools/ddl_sim/report.h"
#include "tools/ddl_sim/simulator.h"
#include "tools/ddl_sim/trace.h"

namespace ddl_sim {
namespace {

ddl::CollectiveArgs args_for(const Options &o, const Cluster &cluster, size_t bytes,
                             const std::string &algorithm) {
  const size_t count = count_for_bytes(o.collective, bytes, o.elem_size, cluster.nranks());
  return collective_args(cluster, o.collective, count, o.elem_size, algorithm);
}

int fail(const ddl::Status &s) {
  std::fprintf(stderr, "ddl_sim: %s\n", s.message().c_str());
  return 1;
}

std::vector<size_t> sizes_of(const Options &o) {
  std::vector<size_t> sizes;
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0001;
       b *= o.factor)
    sizes.push_back(static_cast<size_t>(b));
  return sizes;
}

int run_sizes(const Options &o) {
  Report report(o, o.cluster);
  report.header(stdout);
  for (size_t bytes : sizes_of(o)) {
    const ddl::CollectiveArgs args = args_for(o, o.cluster, bytes, o.algorithm);
    if (args.count == 0) continue;
    SimResult result;
    ddl::Status s = simulate(o.cluster, args, &result);
    if (!s.ok()) return fail(s.prefix(ddl::strprintf("%zu B: ", bytes)));
    report.row(stdout, bytes, args.count, result);
  }
  if (!o.json_path.empty() && !report.write_json(o.json_path))
    return fail(ddl::invalid_argument("cannot write %s", o.json_path.c_str()));
  return 0;
}

// The cost models' choice against every algorithm the models consider, per size.
int run_check_models(const Options &o) {
  std::printf("# %s on %s: %d hosts x %d ranks\n", ddl::collective_name(o.collective),
              o.cluster.name.c_str(), o.cluster.hosts, o.cluster.ranks_per_host);
  std::printf("%12s  %-12s %12s  %-12s %12s  %8s\n", "size", "chosen", "time(us)", "fastest",
              "time(us)", "loss");
  for (size_t bytes : sizes_of(o)) {
    const ddl::CollectiveArgs chosen_args = args_for(o, o.cluster, bytes, "");
    if (chosen_args.count == 0) continue;
    SimResult chosen;
    ddl::Status s = simulate(o.cluster, chosen_args, &chosen);
    if (!s.ok()) return fail(s);
    std::string best_name = chosen.algorithm;
    double best = chosen.seconds;
    for (const ddl::AlgorithmInfo &info : ddl::algorithm_table()) {
      if (info.collective != o.collective || info.name == chosen.algorithm) continue;
      const ddl::CollectiveArgs args = args_for(o, o.cluster, bytes, info.name);
      // What the models would not consider here (hier on one host) is no alternative.
      if (!(info.cost(args) < std::numeric_limits<double>::infinity())) continue;
      SimResult other;
      s = simulate(o.cluster, args, &other);
      if (!s.ok()) return fail(s);
      if (other.seconds < best) best = other.seconds, best_name = info.name;
    }
    const double loss = chosen.seconds / best - 1;
    std::printf("%12zu  %-12s %12.1f  %-12s %12.1f  %7.1f%%%s\n", bytes, chosen.algorithm.c_str(),
                chosen.seconds * 1e6, best_name.c_str(), best * 1e6, loss * 100,
                loss > 0.10 ? "  <- models off by > 10%" : "");
  }
  return 0;
}

int run_efficiency(const Options &o) {
  TrainingJob job;
  job.parameters = o.parameters;
  job.elem_size = o.elem_size;
  job.compute_seconds = o.compute_seconds;
  job.bucket_bytes = o.bucket_bytes;
  std::printf("# DDP step on %s: %.4g M parameters (%s), %.1f ms compute, %.0f MB buckets\n",
              o.cluster.name.c_str(), o.parameters / 1e6, o.dtype.c_str(), o.compute_seconds * 1e3,
              o.bucket_bytes / (1 << 20));
  std::printf("%6s %6s %7s  %-8s %12s %12s %12s %10s\n", "hosts", "ranks", "buckets", "algo",
              "allreduce", "exposed", "step", "efficiency");
  for (int hosts : o.host_counts) {
    Cluster cluster = o.cluster;
    cluster.hosts = hosts;
    std::string algorithm;
    ddl::Status failed;
    const StepProjection p = project_step(job, [&](double bytes) {
      SimResult r;
      ddl::CollectiveArgs args =
          collective_args(cluster, ddl::Collective::kAllreduce,
                          static_cast<size_t>(bytes) / o.elem_size, o.elem_size, o.algorithm);
      if (cluster.nranks() == 1) return 0.0;
      ddl::Status s = simulate(cluster, args, &r);
      if (!s.ok()) failed = s;
      algorithm = r.algorithm;
      return r.seconds;
    });
    if (!failed.ok()) return fail(failed);
    std::printf("%6d %6d %7d  %-8s %10.2fms %10.2fms %10.2fms %9.1f%%\n", hosts, cluster.nranks(),
                p.buckets, algorithm.empty() ? "-" : algorithm.c_str(), p.allreduce_seconds * 1e3,
                p.exposed_seconds * 1e3, p.step_seconds * 1e3, p.efficiency * 100);
  }
  return 0;
}

int run_goal(const Options &o) {
  const ddl::CollectiveArgs args = args_for(o, o.cluster, o.min_bytes, o.algorithm);
  std::vector<ddl::Schedule> by_rank;
  ddl::Status s = ddl::build_every_schedule(args, &by_rank);
  if (!s.ok()) return fail(s);
  std::ofstream out(o.goal_path);
  write_goal(o.cluster, by_rank, o.elem_size, out);
  out.close();
  if (!out) return fail(ddl::invalid_argument("cannot write %s", o.goal_path.c_str()));
  std::printf("%s: %s %zu B (%s) on %d ranks\n", o.goal_path.c_str(),
              ddl::collective_name(o.collective), o.min_bytes, by_rank[0].algorithm.c_str(),
              args.nranks);
  return 0;
}

// The -b size's row, and the steps of the first host's ranks as a Chrome trace.
int run_trace(const Options &o) {
  const ddl::CollectiveArgs args = args_for(o, o.cluster, o.min_bytes, o.algorithm);
  SimResult result;
  ddl::Status s = simulate(o.cluster, args, &result, o.cluster.ranks_per_host);
  if (!s.ok()) return fail(s);
  Report report(o, o.cluster);
  report.header(stdout);
  report.row(stdout, o.min_bytes, args.count, result);
  std::ofstream out(o.trace_path);
  write_chrome_trace(result, out);
  out.close();
  if (!out) return fail(ddl::invalid_argument("cannot write %s", o.trace_path.c_str()));
  std::printf("%s: %zu steps of ranks 0-%d\n", o.trace_path.c_str(), result.trace.size(),
              o.cluster.ranks_per_host - 1);
  return 0;
}

}  // namespace
}  // namespace ddl_sim

int main(int argc, char **argv) {
  using namespace ddl_sim;
  Options options;
  std::string error;
  if (!parse_options(argc, argv, &options, &error)) {
    if (error.empty()) return 0;  // --help
    std::fprintf(stderr, "ddl_sim: %s\n", error.c_str());
    return 2;
  }
  switch (options.mode) {
    case Mode::kDescribe:
      std::fputs(describe_cluster(options.cluster).c_str(), stdout);
      return 0;
    case Mode::kCheckModels:
      return run_check_models(options);
    case Mode::kEfficiency:
      return run_efficiency(options);
    case Mode::kGoal:
      return run_goal(options);
    case Mode::kTrace:
      return run_trace(options);
    case Mode::kSizes:
      break;
  }
  return run_sizes(options);
}

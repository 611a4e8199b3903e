#include "lib/algorithms/registry.h"

#include <cmath>

#include "lib/algorithms/chain.h"
#include "lib/algorithms/dissemination.h"
#include "lib/algorithms/recursive_doubling.h"
#include "lib/algorithms/ring.h"

namespace ddl {
namespace {

// Model constants measured on the 2-core development machines (UCX shared memory + cma):
// an 8 B two-rank ring allreduce (2 messages) takes ~2 us, so alpha ~ 1 us per message;
// point-to-point transfers of 256 KB reach ~4 GB/s; reduction kernels run at ~10 GB/s
// out of cache (bench/kernels). Only their ratios matter for the choice.
constexpr double kAlpha = 1.0e-6;
constexpr double kBeta = 1.0 / 4.0e9;
constexpr double kGamma = 1.0 / 10.0e9;

double bytes_of(const CollectiveArgs &a) {
  return static_cast<double>(a.count) * static_cast<double>(a.elem_size);
}

double ring_cost(const CollectiveArgs &a) {
  return ring_allreduce_cost(a.nranks, bytes_of(a), kAlpha, kBeta, kGamma);
}

double rd_cost(const CollectiveArgs &a) {
  if (a.nranks <= 1) return 0.0;
  const int rounds = static_cast<int>(std::floor(std::log2(a.nranks)));
  const double n = bytes_of(a);
  double t = rounds * (kAlpha + n * kBeta + n * kGamma);
  if ((1 << rounds) != a.nranks) t += 2 * (kAlpha + n * kBeta) + n * kGamma;
  return t;
}

// Collectives with one algorithm need no model.
double no_cost(const CollectiveArgs &) {
  return 0.0;
}

}  // namespace

const std::vector<AlgorithmInfo> &algorithm_table() {
  static const std::vector<AlgorithmInfo> table = {
      {"ring", Collective::kAllreduce,
       "reduce-scatter then allgather around a ring, pipelined in chunks", build_ring_allreduce,
       ring_cost},
      {"rd", Collective::kAllreduce, "recursive doubling: log2(n) exchanges of the whole vector",
       build_recursive_doubling_allreduce, rd_cost},
      {"ring", Collective::kReduceScatter, "n-1 ring steps, each reducing one block",
       build_ring_reduce_scatter, no_cost},
      {"ring", Collective::kAllgather, "n-1 ring steps, each forwarding one block",
       build_ring_allgather, no_cost},
      {"chain", Collective::kBroadcast, "pipelined chain from the root", build_chain_broadcast,
       no_cost},
      {"dissemination", Collective::kBarrier, "ceil(log2 n) rounds of signals at distance 2^k",
       build_dissemination_barrier, no_cost},
  };
  return table;
}

bool known_algorithm(const std::string &name) {
  if (name.empty()) return true;
  for (const AlgorithmInfo &info : algorithm_table())
    if (name == info.name) return true;
  return false;
}

std::string algorithm_names() {
  std::string names;
  for (const AlgorithmInfo &info : algorithm_table())
    if (names.find(info.name) == std::string::npos)
      names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

const AlgorithmInfo &choose_algorithm(const CollectiveArgs &args, std::string *why) {
  const AlgorithmInfo *best = nullptr;
  double best_cost = 0;
  std::string considered;
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != args.collective) continue;
    if (!args.algorithm.empty() && args.algorithm == info.name) {
      if (why) *why = std::string(info.name) + " (forced by DDL_ALGO)";
      return info;
    }
    const double cost = info.cost(args);
    considered += strprintf("%s%s %.1f us", considered.empty() ? "" : ", ", info.name, cost * 1e6);
    if (!best || cost < best_cost) {
      best = &info;
      best_cost = cost;
    }
  }
  if (why) *why = std::string(best->name) + " (models: " + considered + ")";
  return *best;
}

Status build_schedule(const CollectiveArgs &args, Schedule *schedule, std::string *why) {
  *schedule = Schedule();
  for (const AlgorithmInfo &info : algorithm_table()) {
    if (info.collective != args.collective) continue;
    choose_algorithm(args, why).build(args, schedule);
    return Status::Ok();
  }
  return unsupported("no algorithm for %s", collective_name(args.collective));
}

}  // namespace ddl

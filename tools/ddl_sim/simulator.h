// The discrete-event simulator: every rank's schedule (the one the library's builders make
// for the call, lib/algorithms/registry.h) run over a modeled cluster (cluster.h).
//
// A step starts when its dependencies are done, as in the executor. A message takes the
// links of its path: the two ranks' ports into their host (and the host's memory bus) inside
// a host; sender's NIC, the fabric's leaf uplinks when the hosts are on different leaves,
// and the receiver's NIC between hosts. Each link serves the messages that reach it in turn
// (first come, first served), each for bytes / rate, so two messages on one link take twice
// as long as one, and a message moves at its slowest link's rate; it arrives one latency of
// its path after its last byte left. With `link_sharing = fair` a link serves the messages on
// it at once instead, each at rate / n (processor sharing), so a small message is not held
// behind a large one. A rank's CPU (or GPU) is one more resource: every
// message it posts or completes costs message_overhead, every reduction bytes / reduce_rate,
// every local copy bytes / copy_rate, and single copies (kPeerRead/kPeerWrite) hold it while
// the copy crosses the host; each reduction, copy and single copy costs step_overhead more. The
// call takes the slowest rank's last step plus call_overhead.
#pragma once

#include <string>
#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/common/status.h"
#include "tools/ddl_sim/cluster.h"

namespace ddl_sim {

// Where the time went, per kind of resource: the busiest one's busy time, and the bytes all
// of them together carried (or, for compute, reduced and copied).
enum class Tier { kLocal, kBus, kNic, kFabric, kCompute };
constexpr int kTiers = 5;
const char *tier_name(Tier tier);

struct TierUse {
  double busiest_seconds = 0;
  double bytes = 0;
};

// One step of a traced rank: when its dependencies were done and when it was.
struct TracedStep {
  int rank = 0;
  uint32_t step = 0;
  ddl::StepKind kind = ddl::StepKind::kCopy;
  int peer = -1;
  double bytes = 0;
  double ready = 0, done = 0;  // seconds from the call's start
};

struct SimResult {
  double seconds = 0;  // the call, as ddl_perf would time it
  std::string algorithm;
  std::string why;  // the registry's reason for the algorithm
  TierUse tiers[kTiers];
  size_t steps = 0, messages = 0;
  std::vector<TracedStep> trace;  // the steps of ranks below `trace_ranks`, as they finished
};

// Runs the schedules (by_rank[r]: rank r's) of elements of elem_size bytes. Fails when they
// do not fit the cluster's ranks, a send has no receive, or the schedules stall.
// Ranks below `trace_ranks` have every step traced (SimResult::trace).
ddl::Status simulate_schedules(const Cluster &cluster, const std::vector<ddl::Schedule> &by_rank,
                               size_t elem_size, SimResult *result, int trace_ranks = 0);

// Builds every rank's schedule for the call (args.rank ignored) with the library's registry,
// as a communicator on this cluster would, and simulates it.
ddl::Status simulate(const Cluster &cluster, const ddl::CollectiveArgs &args, SimResult *result,
                     int trace_ranks = 0);

}  // namespace ddl_sim

#include "tools/ddl_sim/goal.h"

#include <cmath>

namespace ddl_sim {
namespace {

// A local step's nanoseconds (its bytes at `rate`, plus the cluster's step_overhead), at least
// 1 so that LogGOPSim keeps the operation.
long long calc_ns(const Cluster &cluster, double bytes, double rate) {
  const double seconds = cluster.step_overhead + bytes / rate;
  return std::max(1LL, static_cast<long long>(std::llround(seconds * 1e9)));
}

}  // namespace

void write_goal(const Cluster &cluster, const std::vector<ddl::Schedule> &by_rank, size_t elem_size,
                std::ostream &out) {
  out << "num_ranks " << by_rank.size() << "\n";
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const ddl::Schedule &schedule = by_rank[r];
    out << "\nrank " << r << " {\n";
    // Step i's label is l<i+1>; a receive-and-reduce adds a calc with a label past them all,
    // and what depends on the step depends on that calc.
    const size_t n = schedule.steps.size();
    std::vector<size_t> done_label(n);
    size_t extra = n;
    for (size_t i = 0; i < n; ++i) {
      const ddl::Step &step = schedule.steps[i];
      const double bytes = static_cast<double>(step.count) * static_cast<double>(elem_size);
      const long long b = static_cast<long long>(bytes);
      const size_t label = i + 1;
      done_label[i] = label;
      switch (step.kind) {
        case ddl::StepKind::kSend:
          out << "l" << label << ": send " << b << "b to " << step.peer << " tag " << step.tag
              << "\n";
          break;
        case ddl::StepKind::kRecv:
        case ddl::StepKind::kRecvReduce:
          out << "l" << label << ": recv " << b << "b from " << step.peer << " tag " << step.tag
              << "\n";
          if (step.kind == ddl::StepKind::kRecvReduce) {
            done_label[i] = ++extra;
            out << "l" << extra << ": calc " << calc_ns(cluster, bytes, cluster.reduce_rate)
                << "\n";
            out << "l" << extra << " requires l" << label << "\n";
          }
          break;
        case ddl::StepKind::kCopy:
          out << "l" << label << ": calc " << calc_ns(cluster, bytes, cluster.copy_rate) << "\n";
          break;
        case ddl::StepKind::kReduce:
          out << "l" << label << ": calc " << calc_ns(cluster, bytes, cluster.reduce_rate) << "\n";
          break;
        case ddl::StepKind::kPeerRead:
        case ddl::StepKind::kPeerWrite:
          out << "l" << label << ": calc " << calc_ns(cluster, bytes, cluster.local_rate) << "\n";
          break;
      }
      for (uint32_t d : step.deps) out << "l" << label << " requires l" << done_label[d] << "\n";
    }
    out << "}\n";
  }
}

}  // namespace ddl_sim

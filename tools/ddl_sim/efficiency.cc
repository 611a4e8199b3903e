#include "tools/ddl_sim/efficiency.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace ddl_sim {

StepProjection project_step(const TrainingJob &job,
                            const std::function<double(double bytes)> &allreduce_seconds) {
  StepProjection out;
  const double total = job.parameters * static_cast<double>(job.elem_size);
  out.buckets = std::max(1, static_cast<int>(std::ceil(total / job.bucket_bytes)));
  const double forward = job.compute_seconds / 3, backward = job.compute_seconds - forward;
  std::map<double, double> timed;  // bytes -> seconds: every bucket but the last has one size
  double done = 0;
  for (int k = 0; k < out.buckets; ++k) {
    const double bytes = std::min(job.bucket_bytes, total - job.bucket_bytes * k);
    const double ready = forward + backward * (k + 1) / out.buckets;
    auto found = timed.find(bytes);
    if (found == timed.end()) found = timed.emplace(bytes, allreduce_seconds(bytes)).first;
    done = std::max(done, ready) + found->second;
    out.allreduce_seconds += found->second;
  }
  out.step_seconds = std::max(job.compute_seconds, done);
  out.exposed_seconds = out.step_seconds - job.compute_seconds;
  out.efficiency = job.compute_seconds / out.step_seconds;
  return out;
}

}  // namespace ddl_sim

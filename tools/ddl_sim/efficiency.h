// "What scaling efficiency will my job get?": a data-parallel training step projected from
// the simulated allreduce times, overlapped with the backward pass as PyTorch's DDP does.
//
// The model: one step is a forward pass (1/3 of the compute time) and a backward pass (2/3)
// on every GPU; the gradients (`parameters` x `elem_size` bytes) are cut into buckets of
// `bucket_bytes` (DDP's bucket_cap_mb, 25 MB by default), which become ready one after the
// other, evenly spread over the backward pass; each bucket's allreduce starts when it is
// ready and the previous one is done (one communicator, calls in order). The step ends when
// the compute and the last allreduce are both done; efficiency = compute / step, the
// fraction of perfect linear scaling (weak scaling: the per-GPU batch stays).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace ddl_sim {

struct TrainingJob {
  double parameters = 25.6e6;  // ResNet-50
  size_t elem_size = 4;        // float32 gradients
  double compute_seconds = 0.1;
  double bucket_bytes = 25.0 * 1024 * 1024;
};

struct StepProjection {
  double step_seconds = 0;
  double exposed_seconds = 0;    // communication not hidden behind the backward pass
  double allreduce_seconds = 0;  // all the buckets' allreduces, one after the other
  int buckets = 0;
  double efficiency = 1;
};

// allreduce_seconds(bytes): one allreduce of that many bytes on the cluster in question.
StepProjection project_step(const TrainingJob &job,
                            const std::function<double(double bytes)> &allreduce_seconds);

}  // namespace ddl_sim

// GPU buffers for ddl_perf -G: the CUDA driver API opened with dlopen, as libddl opens it
// (DDL_CUDA_LIBRARY, else libcuda.so.1), so that ddl_perf too runs where there is no CUDA and
// the tests can hand both the same stand-in driver. One GPU per local rank by default, as
// nccl-tests assigns them; -D N puts every rank on GPU N (ddl allows several ranks per GPU).
#pragma once

#include <cstddef>
#include <string>

namespace ddl_perf {

// The local rank from the launcher's environment (ddlrun's DDL_LOCAL_RANK, Open MPI's,
// torchrun's LOCAL_RANK, Slurm's SLURM_LOCALID); else the rank (DDL_RANK, Open MPI's, RANK,
// SLURM_PROCID); 0 when none is set.
int local_rank_from_env();

class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;

  // Opens the driver, picks the GPU (`device`, or local_rank mod the GPU count) and makes
  // its primary context current on this thread. false with *error saying why.
  bool open(int device, int local_rank, std::string *error);

  // "GPU 0 of 1 (NVIDIA H100 80GB HBM3) through libcuda.so.1"
  std::string description() const;

  // Device memory, and synchronous copies to and from it; false with *error on failure.
  bool alloc(size_t bytes, void **ptr, std::string *error);
  void free(void *ptr);
  bool to_device(void *dst, const void *src, size_t bytes, std::string *error);
  bool to_host(void *dst, const void *src, size_t bytes, std::string *error);
  // Waits for everything queued on the GPU (-S's timed calls).
  bool synchronize(std::string *error);

 private:
  struct Api;
  Api *api_ = nullptr;
  std::string library_;
  std::string name_;
  int device_ = -1;
  int count_ = 0;
  void *context_ = nullptr;
};

}  // namespace ddl_perf

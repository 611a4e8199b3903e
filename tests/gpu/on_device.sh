#!/usr/bin/env bash
# Runs run_gpu_checks.sh on a GPU machine from a pack made by pack_for_device.sh (see there),
# then, when the machine has MPS, the steps whose figures change under it again with MPS on.
#
#   tests/gpu/on_device.sh PACK LOG_DIR
#
# GPU_STEPS and GPU_MPS_STEPS pick the steps of each pass (GPU_MPS_STEPS="" skips the MPS pass).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pack=$(cd "${1:?usage: on_device.sh PACK LOG_DIR}" && pwd)
logs=${2:?usage: on_device.sh PACK LOG_DIR}
mkdir -p "$logs"
export LD_LIBRARY_PATH=$pack/build:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$pack/lib/ucx
chmod +x "$pack"/build/bin/* "$pack"/build/tests/device/* "$pack"/build/bench/kernels/*

{
  echo "# $(date -u +%FT%TZ) $(uname -r)"
  python3 -c "import torch; print('# torch', torch.__version__, 'cuda', torch.version.cuda,
              'nccl', '.'.join(map(str, torch.cuda.nccl.version())))"
  nproc | sed 's/^/# cores: /'
} | tee "$logs/machine.txt"

"$here/run_gpu_checks.sh" "$pack/build" "$logs/plain" 2>&1 | tee "$logs/plain.log"
status=${PIPESTATUS[0]}

mps_steps=${GPU_MPS_STEPS-torch_collectives_2ranks torch_overlap_2ranks async_torch_overlap_2ranks async_torch_ddp_2ranks async_torch_latency_2ranks perf_stream_2ranks_ipc_async perf_stream_2ranks_staged_async perf_stream_2ranks_staged_sync perf_2ranks_ipc latency_2ranks perf_4ranks_ipc}
if [ -n "$mps_steps" ] && command -v nvidia-cuda-mps-control > /dev/null; then
  # MPS is a daemon of this user's, not a setting of the card: it ends with the machine, and
  # is stopped below all the same.
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ddl-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ddl-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
    echo "=== with MPS"
    GPU_STEPS=$mps_steps "$here/run_gpu_checks.sh" "$pack/build" "$logs/mps" 2>&1 |
      tee "$logs/mps.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi
exit "$status"

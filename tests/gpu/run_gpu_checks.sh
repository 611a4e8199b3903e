#!/usr/bin/env bash
# ddl on a real GPU: every check and timing of issues 25 and 33 in one run (the C ABI on device
# buffers, then the torch backend on CUDA tensors), for a machine with an NVIDIA GPU, PyTorch
# with CUDA, a C++ compiler (the torch backend is built there, against its torch) and a ddl
# build whose kernels were built (DDL_CUDA_KERNELS).
#
#   tests/gpu/run_gpu_checks.sh BUILD_DIR [LOG_DIR]
#
# GPU_STEPS="NAME ..." runs only the steps named (a short lease: the most telling first).
# Each step has its own time limit and its log in LOG_DIR (default: a temporary folder);
# the summary at the end says which steps passed. Exits 77 (skipped) without a GPU, else
# non-zero when any step failed. Ranks share GPU 0, as ranks of one job on one GPU do.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run_gpu_checks.sh BUILD_DIR [LOG_DIR]}" && pwd)
logs=${2:-$(mktemp -d)}
mkdir -p "$logs"
python=${DDL_PYTHON:-python3}
export DDL_BUILD_DIR=$build DDL_LIBRARY=$build/libddl.so.0 PYTHONUNBUFFERED=1
export DDL_TIMEOUT_MS=${DDL_TIMEOUT_MS:-30000}

why=$("$python" -c "import torch; print('' if torch.cuda.is_available() else 'its torch sees no GPU')" 2>&1 | tail -1)
if [ -n "$why" ]; then
  echo "run_gpu_checks: skipped: $python: $why"
  exit 77
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"

failed=()
# step NAME LIMIT_S COMMAND...: runs it, its output to the terminal and LOG_DIR/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  [ -z "${GPU_STEPS:-}" ] || [[ " $GPU_STEPS " == *" $name "* ]] || return 0
  echo "=== $name"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
}

ddlrun=$build/bin/ddlrun
perf=("$build/bin/ddl_perf" -b 8 -e 128M -f 4 -c 1 -n 10 -w 3)
# The torch backend on CUDA tensors (torch_rank.py), built once before its ranks start.
export PYTHONPATH=$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}
torch_rank=("$python" "$here/torch_rank.py")
# First, what holds a stream for a host thread without hanging (the asynchronous stream
# mode's question, lib/device/stream_calls.cc): the cases that deadlocked on an H200 are
# skipped unless DDL_GPU_PROBE_DEADLOCKS=1 (Criterion's --timeout does not end them).
step stream_wait 60 "$build/tests/device/test_stream_wait_gpu" --verbose --timeout 10
step torch_build 300 "$python" -c "import ddl.torch; ddl.torch.extension(); print('built')"
# The asynchronous stream mode (experimental, DDL_CUDA_STREAM_ASYNC=1): short limits, as its
# earlier form hung on the last three GPUs.
async=(env DDL_CUDA_STREAM_ASYNC=1 DDL_TIMEOUT_MS=8000)
step async_check_1rank 40 "${async[@]}" "$ddlrun" -n 1 -- "$python" "$here/gpu_rank.py" check
step async_torch_collectives_1rank 40 "${async[@]}" "$ddlrun" -n 1 -- "${torch_rank[@]}" collectives
step async_check_2ranks 40 "${async[@]}" "$ddlrun" -n 2 -- "$python" "$here/gpu_rank.py" check
step async_torch_overlap_2ranks 40 "${async[@]}" "$ddlrun" -n 2 -- "${torch_rank[@]}" overlap
step async_torch_latency_1rank 40 "${async[@]}" "$ddlrun" -n 1 -- "${torch_rank[@]}" latency
step async_torch_latency_2ranks 40 "${async[@]}" "$ddlrun" -n 2 -- "${torch_rank[@]}" latency
step async_torch_ddp_2ranks 60 "${async[@]}" "$ddlrun" -n 2 -- "${torch_rank[@]}" ddp
# The stream-ordered calls staged (as across hosts, where the asynchronous mode is the
# default), in both modes: the asynchronous one must not be slower.
step perf_stream_2ranks_staged_async 60 env DDL_CUDA_IPC=0 DDL_CUDA_STREAM_ASYNC=1 \
  "$ddlrun" -n 2 -- "${perf[@]}" -G -S
step perf_stream_2ranks_staged_sync 60 env DDL_CUDA_IPC=0 DDL_CUDA_STREAM_ASYNC=0 \
  "$ddlrun" -n 2 -- "${perf[@]}" -G -S
# The asynchronous mode's allreduce over CUDA IPC on the device (lib/device/stream_ipc.h),
# against the host-synchronous CUDA-IPC one (perf_2ranks_ipc, below).
step perf_stream_2ranks_ipc_async 60 "${async[@]}" "$ddlrun" -n 2 -- "${perf[@]}" -G -S
step torch_collectives_2ranks 180 "$ddlrun" -n 2 -- "${torch_rank[@]}" collectives
step torch_ddp_2ranks 120 "$ddlrun" -n 2 -- "${torch_rank[@]}" ddp
step torch_overlap_2ranks 120 "$ddlrun" -n 2 -- "${torch_rank[@]}" overlap
step torch_latency_1rank 60 "$ddlrun" -n 1 -- "${torch_rank[@]}" latency
step torch_latency_2ranks 60 "$ddlrun" -n 2 -- "${torch_rank[@]}" latency
step torch_fsdp_2ranks 120 "$ddlrun" -n 2 -- "${torch_rank[@]}" fsdp
step torch_collectives_1rank 120 "$ddlrun" -n 1 -- "${torch_rank[@]}" collectives
step torch_collectives_4ranks 240 "$ddlrun" -n 4 -- "${torch_rank[@]}" collectives
step kernels 150 "$build/tests/device/test_device_kernels_gpu" --verbose
step reduce_bandwidth 60 "$build/bench/kernels/device_reduce_bench" 64 256 1024
step check_2ranks_ipc 120 "$ddlrun" -n 2 -- "$python" "$here/gpu_rank.py" check
step check_2ranks_staged 120 "$ddlrun" -n 2 -x DDL_CUDA_IPC=0 -- "$python" "$here/gpu_rank.py" check
step kill_2ranks_ipc 60 "$python" "$here/gpu_rank.py" kill_job 2
step perf_2ranks_ipc 90 "$ddlrun" -n 2 -- "${perf[@]}" -G
step perf_2ranks_staged 90 "$ddlrun" -n 2 -x DDL_CUDA_IPC=0 -- "${perf[@]}" -G
step latency_2ranks 60 "$ddlrun" -n 2 -- "$python" "$here/gpu_rank.py" latency
step vs_nccl 90 "$python" "$root/bench/gpu_vs_nccl.py"
step perf_4ranks_ipc 90 "$ddlrun" -n 4 -- "${perf[@]}" -G
step kill_3ranks_staged 60 env DDL_CUDA_IPC=0 "$python" "$here/gpu_rank.py" kill_job 3
step check_4ranks_ipc 150 "$ddlrun" -n 4 -- "$python" "$here/gpu_rank.py" check
step perf_2ranks_host 90 "$ddlrun" -n 2 -- "${perf[@]}"
step check_1rank 90 "$ddlrun" -n 1 -- "$python" "$here/gpu_rank.py" check

echo "=== summary: ${#failed[@]} step(s) failed${failed[*]:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]

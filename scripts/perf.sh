#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run ddl_perf over
# ddlrun (2 ranks, 8 B .. 64 MB, float32 sum, results checked), printing nccl-tests' table.
#   scripts/perf.sh [ranks] [ddl_perf flags...]
# The rank count is taken only when the first argument is a number: `scripts/perf.sh -b 1M`
# runs 2 ranks with those flags.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDL_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ranks=2
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  ranks=$1
  shift
fi
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-b 8 -e 64M -f 2 -n 20 -w 5 -c 1)
exec "$build/bin/ddlrun" -n "$ranks" -- "$build/bin/ddl_perf" "${flags[@]}"

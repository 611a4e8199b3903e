#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run ddl_perf over
# ddlrun (2 ranks, 8 B .. 64 MB, float32 sum, results checked), printing nccl-tests' table.
#   scripts/perf.sh [ranks] [ddl_perf flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ranks=${1:-2}
shift || true
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-b 8 -e 64M -f 2 -n 20 -w 5 -c 1)
exec "$root/build/tools/ddlrun/ddlrun" -n "$ranks" -- "$root/build/tools/ddl_perf/ddl_perf" "${flags[@]}"

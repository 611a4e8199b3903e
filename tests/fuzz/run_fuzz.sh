#!/usr/bin/env bash
# Fuzzing campaign: every target (or those named) in turn, each until RUNS executions or
# SECONDS seconds, whichever comes first, one process at a time. The seed corpus is copied
# to a work directory (the checked-in corpus stays small); crashes land there as
# <target>-crash-*. Prints one line per target: executions, exec/s, corpus size, outcome.
#
#   tests/fuzz/run_fuzz.sh [-t SECONDS] [-r RUNS] [-b BUILD_DIR] [-w WORK_DIR] [target...]
#   (defaults: 180 s, 10000000 runs, build-fuzz, /tmp/ddl-fuzz)
#
# Build first (clang): CC=clang CXX=clang++ cmake -S . -B build-fuzz -DDDL_BUILD_FUZZ=ON
#                      -DDDL_BUILD_BENCH=OFF && cmake --build build-fuzz --target ddl_fuzz_all
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=180 runs=10000000 build=$root/build-fuzz work=/tmp/ddl-fuzz
while getopts "t:r:b:w:" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    r) runs=$OPTARG ;;
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_params fuzz_datatype fuzz_host_port fuzz_placement
  fuzz_launch_env fuzz_config fuzz_wire_hello fuzz_wire_root_frames fuzz_wire_peer)
mkdir -p "$work"
printf '%-22s %12s %9s %8s %7s  %s\n' target executions exec/s seconds corpus outcome
status=0
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/$t
  [ -x "$bin" ] || { echo "$t: $bin missing (build ddl_fuzz_all)"; status=1; continue; }
  corpus=$work/corpus/$t
  mkdir -p "$corpus"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null
  log=$work/$t.log
  start=$(date +%s.%N)
  # -timeout: one input running this long is a hang; -error_exitcode: crashes -> 77.
  "$bin" -runs="$runs" -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$work/$t-" "$corpus" > "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')
  rate=$(awk -v n="${execs:-0}" -v t="$elapsed" 'BEGIN{printf "%.0f", (t > 0 ? n / t : 0)}')
  outcome=ok
  if [ $rc -ne 0 ]; then
    outcome="FAILED rc=$rc: $(grep -m1 -E 'ERROR|FUZZ_CHECK|runtime error' "$log")"
    status=1
  fi
  printf '%-22s %12s %9s %8.0f %7s  %s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "$elapsed" "$(ls "$corpus" | wc -l)" "$outcome"
done
exit $status

#!/usr/bin/env bash
# Fuzzing campaign: every target (or those named) in turn, each until RUNS executions or
# SECONDS seconds, whichever comes first, one process at a time, at nice 19. The seed corpus is
# copied to a work directory (the checked-in corpus stays small); crashes land there as
# <target>-crash-*. Prints one line per target: executions, exec/s (libFuzzer's own average),
# wall seconds, corpus size, outcome. tests/fuzz/RESULTS.md records a run of this script.
#
#   tests/fuzz/run_fuzz.sh [-t SECONDS] [-r RUNS] [-b BUILD_DIR] [-w WORK_DIR] [target...]
#   (defaults: 1200 s, 10000000 runs, build-fuzz, /tmp/ddl-fuzz; targets: every fast one)
#
# The socket-level targets fuzz_wire_hello, fuzz_wire_root_frames and fuzz_wire_peer run only
# when named (they go through real TCP connections, ~1k exec/s; fuzz_hello, fuzz_root_frames
# and fuzz_peer_reply fuzz the same decoders directly), e.g. run_fuzz.sh -t 120 fuzz_wire_peer.
#
# Build first (clang): CC=clang CXX=clang++ cmake -S . -B build-fuzz -DDDL_BUILD_FUZZ=ON
#                      -DDDL_BUILD_BENCH=OFF && cmake --build build-fuzz --target ddl_fuzz_all
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=1200 runs=10000000 build=$root/build-fuzz work=/tmp/ddl-fuzz
while getopts "t:r:b:w:" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    r) runs=$OPTARG ;;
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_params fuzz_datatype fuzz_host_port fuzz_placement
  fuzz_launch_env fuzz_config fuzz_modes fuzz_signature fuzz_hello fuzz_root_frames
  fuzz_peer_reply)

# Longest input per target: room for every structure the target reads, no more (libFuzzer's
# default grows to 4096 bytes, and longer inputs only cost time). Placement: 8 placements of
# ~100 bytes (each may be up to 512: two of those fit too); hello: 2 + 16 + a 256-byte token;
# signature: 2 x 24 + 8 + 512; peer reply: an ack and 3 answers of up to 65 entries.
max_len_for() {
  case $1 in
    fuzz_peer_reply) echo 2048 ;;
    fuzz_placement | fuzz_launch_env | fuzz_root_frames) echo 1024 ;;
    fuzz_signature) echo 600 ;;
    fuzz_hello) echo 300 ;;
    fuzz_modes) echo 128 ;;
    *) echo 4096 ;;
  esac
}
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
  nice -n 19 "$bin" -runs="$runs" -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
    -max_len="$(max_len_for "$t")" -artifact_prefix="$work/$t-" "$corpus" > "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  outcome=ok
  if [ $rc -ne 0 ]; then
    outcome="FAILED rc=$rc: $(grep -m1 -E 'ERROR|FUZZ_CHECK|runtime error' "$log")"
    status=1
  fi
  printf '%-22s %12s %9s %8.0f %7s  %s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "$elapsed" "$(ls "$corpus" | wc -l)" "$outcome"
done
exit $status

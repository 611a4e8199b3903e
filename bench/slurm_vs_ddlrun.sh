#!/usr/bin/env bash
# ddl launched by Slurm's srun against ddlrun -H, on the same emulated hosts (issue 24's target:
# the same speed): 2 hosts x 2 ranks at 1 Gbit/s, allreduce of SIZE (default 64M), alternating
# srun without PMI, srun --mpi=pmix and ddlrun -H for ROUNDS rounds (default 3); medians.
#
#   bench/slurm_vs_ddlrun.sh [BUILD_DIR [SIZE [ROUNDS]]]       (root; Slurm's daemons)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
size=${2:-64M}
rounds=${3:-3}
if [ "${4:-}" != --inner ]; then
  exec "$root/tools/emuhosts/emuslurm" run --hosts 2 --rate 1gbit -- "$0" "$build" "$size" "$rounds" --inner
fi
emuhosts=$root/tools/emuhosts/emuhosts
perf=("$build/tools/ddl_perf/ddl_perf" -b "$size" -e "$size" -n 5 -w 1 -c 0)
work=$(mktemp -d /var/tmp/ddl-bench-slurm.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The out-of-place time (µs) of ddl_perf's one row.
time_of() { awk '$1 ~ /^[0-9]+$/ && NF > 8 { print $6; exit }'; }
run() {
  case $1 in
    srun) (cd "$work" && "$emuhosts" exec h0 -- env -u DDL_HOST_ID HOME="$work" \
      srun -N 2 -n 4 --overcommit --mpi=none "${perf[@]}") ;;
    srun-pmix) (cd "$work" && "$emuhosts" exec h0 -- env -u DDL_HOST_ID HOME="$work" \
      srun -N 2 -n 4 --overcommit --mpi=pmix "${perf[@]}") ;;
    ddlrun) "$emuhosts" exec h0 -- "$build/tools/ddlrun/ddlrun" -H h0:2,h1:2 \
      --launch-agent "$EMUHOSTS_AGENT" -- "${perf[@]}" ;;
  esac 2> /dev/null | time_of
}
declare -A times
for ((r = 1; r <= rounds; ++r)); do
  for how in srun srun-pmix ddlrun; do
    t=$(run $how)
    echo "round $r: $how ${t:-failed} us"
    times[$how]+="${t:-nan} "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "| launcher | median time per allreduce of $size (µs), 2 hosts x 2 ranks, 1 Gbit/s | vs ddlrun -H |"
echo "|---|---:|---:|"
base=$(echo "${times[ddlrun]}" | median)
for how in srun srun-pmix ddlrun; do
  m=$(echo "${times[$how]}" | median)
  echo "| $how | $m | $(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.3f", a / b }') |"
done

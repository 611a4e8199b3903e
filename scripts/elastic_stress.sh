#!/usr/bin/env bash
# Repeats every failure kind of tests/multiproc/test_elastic (ranks killed mid-allreduce,
# mid-alltoall and mid-shrink, two at once, a rank stopped, agree, grow) and, as root,
# test_host_failure's lost host and downed link, COUNT times each: how many runs passed,
# failed or hung (past LIMIT seconds), and whether anything was left in /dev/shm. CI runs
# each once (ctest); this is the long count.
#
#   scripts/elastic_stress.sh [COUNT] [BUILD_DIR]      (default 100, build)
#   LIMIT=120 scripts/elastic_stress.sh 20
#   HOST_COUNT=10 scripts/elastic_stress.sh 100   (the emulated-host kinds take ~25 s a run)
set -uo pipefail
count=${1:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build}
limit=${LIMIT:-120}
elastic=$build/tests/multiproc/test_elastic
hosts=$build/tests/multiproc/test_host_failure
[ -x "$elastic" ] || { echo "no $elastic: build first (scripts/build.sh)" >&2; exit 1; }
logs=$(mktemp -d /tmp/elastic_stress.XXXXXX)

kinds=(
  "$elastic elastic/a_rank_killed_mid_allreduce_is_shrunk_away"
  "$elastic elastic/rank_0_killed_mid_allreduce_is_shrunk_away"
  "$elastic elastic/a_rank_killed_mid_small_allreduces_is_shrunk_away"
  "$elastic elastic/a_rank_killed_mid_alltoall_is_shrunk_away"
  "$elastic elastic/two_ranks_killed_at_once_are_shrunk_away"
  "$elastic elastic/a_rank_that_dies_during_the_shrink_is_agreed_away"
  "$elastic elastic/a_stopped_rank_is_left_out_and_told_so_when_it_continues"
  "$elastic elastic/agree_combines_the_live_ranks_values_and_names_the_failed"
  "$elastic elastic/a_shrunk_job_grows_back_with_a_new_process"
)
host_count=${HOST_COUNT:-$count}
if [ "$(id -u)" = 0 ] && [ -x "$hosts" ] && [ "$host_count" -gt 0 ]; then
  kinds+=("$hosts host_failure/a_killed_host_is_named_on_the_survivors_within_10_s"
          "$hosts host_failure/a_link_down_is_named_on_every_rank_within_10_s")
fi

shm_before=$(ls /dev/shm | sort)
total_bad=0
printf '%-62s %6s %6s %6s %9s\n' kind passed failed hung "median ms"
for entry in "${kinds[@]}"; do
  binary=${entry%% *} test=${entry#* }
  name=${test#*/}
  runs=$count
  [ "$binary" = "$hosts" ] && runs=$host_count
  passed=0 failed=0 hung=0 times=()
  for ((i = 1; i <= runs; i++)); do
    log=$logs/$name.$i.log
    start=$(date +%s%N)
    timeout -s KILL "$limit" "$binary" --jobs 1 --filter "$test" > "$log" 2>&1
    rc=$?
    times+=("$((($(date +%s%N) - start) / 1000000))")
    case $rc in
      0) passed=$((passed + 1)); rm -f "$log" ;;
      137) hung=$((hung + 1)) ;;
      *) failed=$((failed + 1)) ;;
    esac
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-62s %6d %6d %6d %9d\n' "$name" "$passed" "$failed" "$hung" "$median"
  total_bad=$((total_bad + failed + hung))
done
leftovers=$(comm -13 <(echo "$shm_before") <(ls /dev/shm | sort))
echo "left in /dev/shm: ${leftovers:-nothing}"
echo "logs of the runs that did not pass: $logs"
[ "$total_bad" = 0 ] && [ -z "$leftovers" ]

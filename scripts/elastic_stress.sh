#!/usr/bin/env bash
# Repeats every failure kind of tests/multiproc/test_elastic (ranks killed mid-allreduce,
# mid-alltoall and mid-shrink (rank 0 too), two at once, a rank stopped, agree, grow) and of
# tests/multiproc/test_agreement (the root, inner ranks and leaves killed at every point of
# the agreement, on one host and on hosts of their own: 18 kills in all), as root
# test_host_failure's lost host and downed link, and under torch examples/elastic_train.py
# losing rank 2 or rank 0 (DDP over the "ddl" backend under ddlrun --keep-going; rank 0 with
# torch's store in ddlrun, --torch-store; rank 0 again under mpirun --enable-recovery with
# DDL_TORCH_STORE=process), COUNT times each: how many runs passed, failed or
# hung (past LIMIT seconds), and whether anything was left in /dev/shm. CI runs each once
# (ctest, tests/python/test_elastic_example.py); this is the long count. A torch run passes
# when its 3 survivors end with the same parameters as a reference run in which the victim
# left cleanly at the same step (made once per kind).
#
#   scripts/elastic_stress.sh [COUNT] [BUILD_DIR]      (default 100, build)
#   LIMIT=120 scripts/elastic_stress.sh 20
#   HOST_COUNT=10 scripts/elastic_stress.sh 100   (the emulated-host kinds take ~25 s a run)
#   TORCH_COUNT=0 scripts/elastic_stress.sh 100   (no torch kinds; they take ~10 s a run)
#   TORCH_COUNT=100 HOST_COUNT=0 scripts/elastic_stress.sh 0   (the torch kinds alone)
set -uo pipefail
count=${1:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build}
limit=${LIMIT:-120}
elastic=$build/tests/multiproc/test_elastic
agreement=$build/tests/multiproc/test_agreement
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
  "$elastic elastic/rank_0_dying_during_the_shrink_is_agreed_away"
  "$elastic elastic/a_stopped_rank_is_left_out_and_told_so_when_it_continues"
  "$elastic elastic/agree_combines_the_live_ranks_values_and_names_the_failed"
  "$elastic elastic/a_shrunk_job_grows_back_with_a_new_process"
  "$agreement agreement/the_root_dying_at_every_point_is_agreed_away"
  "$agreement agreement/an_inner_rank_dying_at_every_point_is_agreed_away"
  "$agreement agreement/a_leaf_dying_is_agreed_away_in_a_tree_that_is_not_full"
  "$agreement agreement/ranks_on_hosts_of_their_own_agree_round_a_death"
)
host_count=${HOST_COUNT:-$count}
if [ "$(id -u)" = 0 ] && [ -x "$hosts" ] && [ "$host_count" -gt 0 ]; then
  kinds+=("$hosts host_failure/a_killed_host_is_named_on_the_survivors_within_10_s"
          "$hosts host_failure/a_link_down_is_named_on_every_rank_within_10_s")
fi

# The torch kinds: the tests' Python (scripts/python-env.sh) with this checkout's package.
torch_count=${TORCH_COUNT:-$count}
ddlrun=$build/tools/ddlrun/ddlrun
python=${DDL_PYTHON:-$("$root/scripts/python-env.sh" 2> /dev/null)}
example=$root/examples/elastic_train.py
export DDL_BUILD_DIR=$build PYTHONPATH=$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}
if [ "$torch_count" -gt 0 ] && [ -x "$ddlrun" ] && "$python" -c "import torch" 2> /dev/null; then
  kinds+=("torch torch/rank_2_killed_under_ddp" "torch torch/rank_0_killed_under_ddp")
  command -v mpirun > /dev/null && kinds+=("torch torch/rank_0_killed_under_mpirun")
fi

# elastic_train.py on 4 ranks, rank $1 killed (or leaving: $2 = leave) at step 3 of 8, under
# ddlrun (rank 0 with torch's store in ddlrun) or, $5 = mpirun, under Open MPI's mpirun
# --enable-recovery with torch's store in a process of its own (DDL_TORCH_STORE=process).
# Writes the survivors' parameters to $3, the output to $4.
train() {
  local victim=$1 how=$2 out=$3 log=$4 launcher=${5:-ddlrun} flags=(--keep-going)
  local args=(--steps 8 --at-step 3 "--$how-rank" "$victim" --json "$out")
  if [ "$launcher" = mpirun ]; then
    timeout -s KILL "$limit" mpirun --allow-run-as-root --oversubscribe --enable-recovery \
      --bind-to none -np 4 -x DDL_BUILD_DIR -x PYTHONPATH -x DDL_TORCH_STORE=process \
      -x OMP_NUM_THREADS=1 "$python" "$example" "${args[@]}" > "$log" 2>&1
    return
  fi
  [ "$victim" = 0 ] && flags+=(--torch-store)
  timeout -s KILL "$limit" "$ddlrun" "${flags[@]}" -n 4 -- "$python" "$example" "${args[@]}" \
    > "$log" 2>&1
}

# One run of a kind, its output in $2: 0 passed, 137 hung, else failed.
run_once() {
  local entry=$1 log=$2
  local binary=${entry%% *} test=${entry#* }
  if [ "$binary" != torch ]; then
    timeout -s KILL "$limit" "$binary" --jobs 1 --filter "$test" > "$log" 2>&1
    return
  fi
  local victim=${test#torch/rank_} launcher=${test##*_} reference
  victim=${victim%%_*}
  [ "$launcher" = mpirun ] || launcher=ddlrun
  reference=$logs/reference.$victim.$launcher.json
  if [ ! -e "$reference" ]; then
    train "$victim" leave "$reference" "$logs/reference.$victim.$launcher.log" "$launcher" ||
      { echo "the reference run failed: $logs/reference.$victim.$launcher.log" > "$log"; return 1; }
  fi
  train "$victim" kill "$logs/run.json" "$log" "$launcher" || return
  "$python" - "$logs/run.json" "$reference" "$log" >> "$log" 2>&1 << 'EOF'
import json, re, sys
got, ref = (json.load(open(path)) for path in sys.argv[1:3])
sums = re.findall(r"param checksum ([-+0-9.eE]+)", open(sys.argv[3]).read())
worst = max(abs(a - b) for a, b in zip(got["params"], ref["params"]))
print(f"survivors {got['size']}, checksums {sums}, largest difference from the reference {worst}")
sys.exit(0 if got["size"] == ref["size"] == 3 and len(set(sums)) == 1 and len(sums) == 3
         and worst <= 1e-6 else 1)
EOF
}

shm_before=$(ls /dev/shm | sort)
total_bad=0
printf '%-62s %6s %6s %6s %9s\n' kind passed failed hung "median ms"
for entry in "${kinds[@]}"; do
  binary=${entry%% *} test=${entry#* }
  name=${test#*/}
  runs=$count
  [ "$binary" = "$hosts" ] && runs=$host_count
  [ "$binary" = torch ] && runs=$torch_count
  [ "$runs" -gt 0 ] || continue
  passed=0 failed=0 hung=0 times=()
  for ((i = 1; i <= runs; i++)); do
    log=$logs/$name.$i.log
    start=$(date +%s%N)
    run_once "$entry" "$log"
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

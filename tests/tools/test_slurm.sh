#!/usr/bin/env bash
# ddl under a real Slurm (issue 24, item 2): Slurm's own slurmctld and one slurmd per emulated
# host (tools/emuhosts/emuslurm), then, from h0:
#   1. srun -N 2 -n 4 ddl_perf -c 1 without any PMI: ddl finds rank 0 on the step's first node,
#      at a port from the job and step ids, with a token from ~/.ddl/slurm-secret;
#   2. the same with --mpi=pmix, where Slurm has its PMIx plugin;
#   3. srun -N 2 -n 2 python examples/ddp_train.py over backend "ddl" (when DDL_PYTHON has
#      torch);
#   4. srun -N 2 -n 2 python examples/jax_train.py and keras_train.py --check (when it has jax,
#      tensorflow): ddl.jax and ddl.tensorflow find their ranks from Slurm's variables.
# emuslurm stops and removes everything it started at the end, whatever happens.
#
#   test_slurm.sh BUILD_DIR
# Skipped (77) without root, Slurm's daemons (Debian: slurmctld slurmd slurm-client) or network
# namespaces (emuslurm says which).
set -uo pipefail
build=$(cd "${1:?usage: test_slurm.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${2:-}" != --inner ]; then
  "$root/tools/emuhosts/emuslurm" run --hosts 2 --rate none -- "$0" "$build" --inner
  rc=$?
  [ $rc -eq 77 ] && echo "test_slurm: skipped"
  exit $rc
fi
perf=$build/tools/ddl_perf/ddl_perf
python=${DDL_PYTHON:-python3}
work=$(mktemp -d /var/tmp/ddl-test-slurm.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/tools/emuhosts/emuhosts" exec h0 -- sinfo

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# srun on h0 as a user's shell there: without emuhosts' DDL_HOST_ID (each node's own boot id
# tells the hosts apart, as on real nodes), in a directory outside the checkout.
srun_on_h0() {
  (cd "$work" && timeout -k 5 180 "$root/tools/emuhosts/emuhosts" exec h0 -- \
    env -u DDL_HOST_ID HOME="$work/home" DDL_BUILD_DIR="$build" DDL_LOG_LEVEL=info srun "$@")
}
mkdir -p "$work/home"

echo "=== 1. srun -N 2 -n 4 ddl_perf, no PMI"
out=$(srun_on_h0 -N 2 -n 4 --overcommit --mpi=none "$perf" -b 8 -e 16M -f 16 -c 1 -n 3 -w 1 2>&1)
grep -q "Out of bounds values : 0 OK" <<< "$out" || fail "no PMI: $out"
grep -q "launched by slurm, rank 0 on the step's first node: rank 3 of 4; rank 0's rendezvous at h0:" <<< "$out" ||
  fail "no PMI: rank 3 did not find rank 0 on h0 from Slurm's variables: $out"
grep -q "with a job token" <<< "$out" || fail "no PMI: no job token"
[ "$(stat -c %a "$work/home/.ddl/slurm-secret" 2> /dev/null)" = 600 ] ||
  fail "no PMI: ~/.ddl/slurm-secret is not there with mode 600"
grep -h "launched by" <<< "$out" | head -1

echo "=== 2. srun --mpi=pmix -N 2 -n 4 ddl_perf"
if srun --mpi=list 2>&1 | grep -q pmix; then
  out=$(srun_on_h0 -N 2 -n 4 --overcommit --mpi=pmix "$perf" -b 8 -e 16M -f 16 -c 1 -n 3 -w 1 2>&1)
  grep -q "Out of bounds values : 0 OK" <<< "$out" || fail "pmix: $out"
  grep -q "rank 0's rendezvous through PMIx" <<< "$out" || fail "pmix: PMIx was not used: $out"
else
  echo "skipped: this Slurm has no PMIx plugin (srun --mpi=list)"
fi

echo "=== 3. srun -N 2 -n 2 python examples/ddp_train.py (backend ddl)"
if "$python" -c "import torch" 2> /dev/null; then
  out=$(srun_on_h0 -N 2 -n 2 --mpi=none env OMP_NUM_THREADS=1 "$python" "$root/examples/ddp_train.py" --steps 5 2>&1)
  grep -q "ddl ddp x2: final loss" <<< "$out" || fail "ddp_train.py under srun: $out"
  grep -h "final loss" <<< "$out"
else
  echo "skipped: $python has no torch"
fi

echo "=== 4. srun -N 2 -n 2: the JAX and Keras examples, checked against one process"
# The bindings' compiled handlers come from the caller's cache (built at first use).
caches="DDL_JAX_CACHE=${DDL_JAX_CACHE:-$HOME/.cache/ddl/jax} DDL_TF_CACHE=${DDL_TF_CACHE:-$HOME/.cache/ddl/tensorflow}"
for example in jax_train.py keras_train.py; do
  module=${example%%_*}
  [ "$module" = keras ] && module=tensorflow
  if ! "$python" -c "import $module" 2> /dev/null; then
    echo "skipped: $python has no $module"
    continue
  fi
  # shellcheck disable=SC2086  # $caches: two assignments for env
  out=$(srun_on_h0 -N 2 -n 2 --mpi=none env OMP_NUM_THREADS=1 $caches "$python" \
    "$root/examples/$example" --steps 5 --check 2>&1)
  [ "$(grep -c "largest difference from one process" <<< "$out")" -eq 2 ] ||
    fail "$example under srun: $out"
  grep -h "process(es): loss" <<< "$out"
done

echo "=== test_slurm: $failures failure(s)"
[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# Chaos: kill a rank of a running job, check that every other rank notices, says who died,
# and exits; that nothing hangs; that nothing is left behind.
#
#   scripts/chaos.sh [runs=100] [ranks=4]
#
# Each run starts `ddlrun -n RANKS` of ddl_chaos_driver (tests/fuzz/chaos_driver.cc: a loop
# of allreduces of random sizes, 1 B .. 8 MB, results checked) with DDL_TIMEOUT_MS=10000,
# and SIGKILLs one random rank at a random moment (a third of them in the first 120 ms, i.e.
# during ddl_comm_init_from_env; the rest within 3 s). A run passes when every survivor
# exits by itself with the driver's error code (10: init failed, 11: a collective failed)
# and a ddl_comm_last_error naming the killed rank, within 40 s of the kill (a hard
# deadline: a rank still there then is a hang; its stack is printed), and no rank process
# or new /dev/shm entry remains. The survivors ignore ddlrun's SIGTERM (it has a 60 s
# grace), so what is measured is the library noticing the death, not ddlrun stopping the
# job. Prints one line per run, each failure in detail, the time from the kill to each
# survivor's exit (p50/p90/p99/max), how survivors ended, and the pass count; exits non-zero
# when a run failed.
#
# Environment: DDL_TIMEOUT_MS (10000), CHAOS_SEED (random; printed, to replay a sequence),
# CHAOS_BUILD (build dir, default build-chaos; configured and built here: ddlrun, the
# driver, libddl), CHAOS_KEEP=1 keeps every run's directory (failed runs' are always kept).
# Note: /dev/shm is compared before and after each run; other jobs on the machine that
# create or remove entries at the same time show up there too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-100}
ranks=${2:-4}
build=${CHAOS_BUILD:-$root/build-chaos}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDL_BUILD_BENCH=OFF \
    > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "${JOBS:-2}" --target ddlrun ddl_chaos_driver > "$build.build.log" 2>&1 ||
  { tail -40 "$build.build.log"; exit 1; }

extra=()
[ -n "${CHAOS_SEED:-}" ] && extra+=(--seed "$CHAOS_SEED")
[ "${CHAOS_KEEP:-0}" = 1 ] && extra+=(--keep)
exec python3 "$root/scripts/chaos/chaos.py" \
  --ddlrun "$build/tools/ddlrun/ddlrun" --driver "$build/tests/fuzz/ddl_chaos_driver" \
  --runs "$runs" --ranks "$ranks" --timeout-ms "${DDL_TIMEOUT_MS:-10000}" "${extra[@]}"

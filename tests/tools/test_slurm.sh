#!/usr/bin/env bash
# ddl under a real Slurm (issue 24, item 2): Slurm's own slurmctld and one slurmd per emulated
# host (tools/emuhosts: network namespaces; each slurmd with its node name, its own /tmp and
# cgroup mounts), then, from h0:
#   1. srun -N 2 -n 4 ddl_perf -c 1 without any PMI: ddl finds rank 0 on the step's first node,
#      at a port from the job and step ids, with a token from ~/.ddl/slurm-secret;
#   2. the same with --mpi=pmix, where Slurm has its PMIx plugin;
#   3. srun -N 2 -n 2 python examples/ddp_train.py over backend "ddl" (when DDL_PYTHON has
#      torch).
# Everything it starts is stopped and removed at the end, whatever happens.
# Also the recipe for trying Slurm by hand (README, "Launching").
#
#   test_slurm.sh BUILD_DIR
# Skipped (77) without root, Slurm's daemons (Debian: slurmctld slurmd slurm-client) or network
# namespaces.
set -uo pipefail
build=$(cd "${1:?usage: test_slurm.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
emuhosts=$root/tools/emuhosts/emuhosts
perf=$build/tools/ddl_perf/ddl_perf
python=${DDL_PYTHON:-python3}
if [ "$(id -u)" != 0 ]; then
  echo "test_slurm: skipped: needs root (network namespaces, slurmd)"
  exit 77
fi
for tool in slurmctld slurmd srun sinfo; do
  if ! command -v $tool > /dev/null; then
    echo "test_slurm: skipped: no $tool (apt-get install slurmctld slurmd slurm-client)"
    exit 77
  fi
done

name=ddlslurm$$
work=$(mktemp -d /var/tmp/ddl-slurm.XXXXXX)
chmod 755 "$work"
export SLURM_CONF=$work/slurm.conf
cleanup() {
  pkill -f "slurmd -D -N h[01] -f $SLURM_CONF" 2> /dev/null
  pkill -f "slurmctld -D -f $SLURM_CONF" 2> /dev/null
  sleep 0.5
  "$emuhosts" down --name "$name" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

if ! eval "$("$emuhosts" up --name "$name" --hosts 2 --rate none)"; then
  echo "test_slurm: skipped: emuhosts could not make the hosts (network namespaces)"
  exit 77
fi
mkdir -p "$work/state" "$work/spool-h0" "$work/spool-h1"
cat > "$SLURM_CONF" << EOF
ClusterName=ddltest
SlurmctldHost=h0(10.100.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool-%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=h0 NodeAddr=10.100.0.1 CPUs=2 State=UNKNOWN
NodeName=h1 NodeAddr=10.100.0.2 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=h0,h1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
echo "CgroupPlugin=cgroup/v1" > "$work/cgroup.conf"

on() {  # on HOST CMD...: run on an emulated host
  local host=$1
  shift
  "$emuhosts" exec --name "$name" "$host" -- "$@"
}
on h0 slurmctld -D -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
# Each node: its own /tmp (as real nodes have: PMIx's and ddl's files there are per node) and
# the cgroup controllers slurmd's cgroup plugin wants (the namespace's /sys has none).
for h in h0 h1; do
  on $h sh -c "mount -t tmpfs tmp /tmp && mount -t tmpfs cg /sys/fs/cgroup &&
    for c in freezer cpuset memory devices cpuacct; do
      mkdir -p /sys/fs/cgroup/\$c && mount -t cgroup -o \$c cg /sys/fs/cgroup/\$c || exit 1
    done && exec slurmd -D -N $h -f $SLURM_CONF" > "$work/slurmd-$h.out" 2>&1 &
done
for _ in $(seq 100); do
  [ "$(on h0 sinfo -h -o %t 2> /dev/null | sort -u)" = idle ] && break
  sleep 0.2
done
if [ "$(on h0 sinfo -h -o %t 2> /dev/null | sort -u)" != idle ]; then
  on h0 sinfo
  tail -n 5 "$work"/*.out
  echo "FAIL: the Slurm nodes did not come up"
  exit 1
fi
on h0 sinfo

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# srun on h0 as a user's shell there: without emuhosts' DDL_HOST_ID (each node's own boot id
# tells the hosts apart, as on real nodes), in a directory outside the checkout.
srun_on_h0() {
  (cd "$work" && timeout -k 5 180 "$emuhosts" exec --name "$name" h0 -- \
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

echo "=== test_slurm: $failures failure(s)"
[ "$failures" -eq 0 ]

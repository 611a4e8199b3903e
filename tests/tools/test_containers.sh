#!/usr/bin/env bash
# Ranks in containers on one node (issue 24, item 4), made with the kernel's own namespaces:
#   1. two "containers" with PID and mount namespaces of their own (same network): one host
#      to ddl (same boot id), no shared memory possible; the job must work over UCX, and the
#      warning must say what happened in a container's words;
#   2. two "pods": network, PID and mount namespaces of their own, joined by a veth pair;
#   3. one container holding both ranks (one PID namespace): the shared-memory transport.
# Each case runs ddl_perf -c 1 (results checked). Skipped (77) without root or unshare.
#
#   test_containers.sh DDL_PERF
set -uo pipefail
perf=${1:?usage: test_containers.sh DDL_PERF}
if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null || ! command -v ip > /dev/null; then
  echo "test_containers: skipped: needs root, unshare and ip (network and PID namespaces)"
  exit 77
fi
if ! unshare --pid --fork --mount-proc true 2> /dev/null; then
  echo "test_containers: skipped: this kernel or sandbox refuses new PID namespaces"
  exit 77
fi

work=$(mktemp -d)
pods=(ddlpod$$a ddlpod$$b)
cleanup() {
  for ns in "${pods[@]}"; do ip netns del "$ns" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# rank R N ROOT [PREFIX...]: one rank of ddl_perf in the background, its output in $work/R.log.
rank() {
  local r=$1 n=$2 root=$3
  shift 3
  DDL_RANK=$r DDL_WORLD_SIZE=$n DDL_ROOT=$root DDL_JOB_TOKEN=containers$$ DDL_TIMEOUT_MS=30000 \
    DDL_LOG_LEVEL=info timeout -k 5 120 "$@" "$perf" -b 8 -e 4M -f 8 -c 1 -n 3 -w 1 \
    > "$work/$r.log" 2>&1 &
  pids+=($!)
}
# wait_ok CASE: both ranks exited 0 and checked their results.
wait_ok() {
  local rc=0 pid
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  pids=()
  if [ $rc -ne 0 ] || ! grep -q "Out of bounds values : 0 OK" "$work/0.log"; then
    cat "$work/0.log" "$work/1.log"
    return 1
  fi
}
# free_port: a port for rank 0 to listen on, below the kernel's ephemeral range (where the
# connections of tests running beside this one take their local ports: a random port up to
# 40000 once met one, "Address already in use") and not listened on now.
free_port() {
  local low port
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || echo 32768)
  while :; do
    port=$((10000 + RANDOM % (low - 10000)))
    if [ -z "$(ss -Hltn "sport = :$port" 2> /dev/null)" ]; then
      echo "$port"
      return
    fi
  done
}
pids=()

echo "=== 1. two containers on one network: separate PID and mount namespaces"
port=$(free_port)
for r in 0 1; do rank $r 2 127.0.0.1:$port unshare --pid --fork --mount-proc; done
wait_ok "containers" || fail "containers: a rank failed"
grep -q "runs in another PID namespace" "$work/1.log" ||
  fail "containers: rank 1 does not say why there is no shared memory"
grep -q "using UCX" "$work/1.log" || fail "containers: rank 1 does not say it uses UCX"
grep -h "another PID namespace" "$work/1.log" | head -1

echo "=== 2. two pods: network, PID and mount namespaces of their own, a veth between them"
for ns in "${pods[@]}"; do ip netns add "$ns"; done
links=(ddlv$$a ddlv$$b)
ip link add "${links[0]}" netns "${pods[0]}" type veth peer name "${links[1]}" netns "${pods[1]}"
for i in 0 1; do
  ip -n "${pods[$i]}" addr add "10.213.0.$((i + 1))/24" dev "${links[$i]}"
  ip -n "${pods[$i]}" link set "${links[$i]}" up
  ip -n "${pods[$i]}" link set lo up
done
# UCX takes only interfaces that are running: wait for the veth's carrier.
for i in 0 1; do
  for _ in $(seq 50); do
    [ "$(ip netns exec "${pods[$i]}" cat "/sys/class/net/${links[$i]}/operstate")" = up ] && break
    sleep 0.1
  done
done
port=$(free_port)
for r in 0 1; do
  rank $r 2 10.213.0.1:$port ip netns exec "${pods[$r]}" unshare --pid --fork --mount-proc
done
wait_ok "pods" || fail "pods: a rank failed"
grep -q "runs in another PID namespace" "$work/1.log" ||
  fail "pods: rank 1 does not say why there is no shared memory"

echo "=== 4. a rank killed in its container: the other names it, well inside the deadline"
port=$(free_port)
for r in 0 1; do
  DDL_RANK=$r DDL_WORLD_SIZE=2 DDL_ROOT=127.0.0.1:$port DDL_JOB_TOKEN=containers$$ \
    DDL_TIMEOUT_MS=60000 timeout -k 5 120 unshare --pid --fork --mount-proc \
    "$perf" -b 64M -e 64M -n 1000 -w 0 -c 0 > "$work/$r.log" 2>&1 &
  pids+=($!)
done
sleep 3
for p in $(pgrep -f "^$perf -b 64M"); do  # rank 1's ddl_perf, not its unshare or timeout
  tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx DDL_RANK=1 && kill -KILL "$p"
done
t0=$SECONDS
wait "${pids[0]}"
rc0=$?
pids=()
wait
echo "rank 0 exited $rc0, $((SECONDS - t0)) s after the kill"
[ "$rc0" -ne 0 ] || fail "killed: rank 0 went on as if nothing happened"
[ $((SECONDS - t0)) -lt 30 ] || fail "killed: rank 0 took $((SECONDS - t0)) s to notice"
grep -q "rank 1" "$work/0.log" || fail "killed: rank 0's error does not name rank 1: $(cat "$work/0.log")"
grep -h "error" "$work/0.log" | head -1

echo "=== 3. one container with both ranks: shared memory"
port=$(free_port)
cat > "$work/both.sh" << EOF
$(declare -f rank)
work=$work perf=$perf pids=()
rank 0 2 127.0.0.1:$port
rank 1 2 127.0.0.1:$port
wait
EOF
unshare --pid --fork --mount-proc bash "$work/both.sh"
grep -q "Out of bounds values : 0 OK" "$work/0.log" || fail "one container: no clean check"
grep -q "transport shm" "$work/0.log" || fail "one container: rank 0 does not use shared memory"
if grep -q "using UCX" "$work/0.log" "$work/1.log"; then fail "one container: fell back to UCX"; fi

echo "=== test_containers: $failures failure(s)"
[ "$failures" -eq 0 ]

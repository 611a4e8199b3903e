#!/usr/bin/env bash
# Kill -> next step under torch across emulated hosts (issue 34): examples/elastic_train.py
# (DDP over the "ddl" backend, ddlrun --keep-going, torch's store in ddlrun) on HOSTS emulated
# hosts x RANKS ranks (tools/emuhosts, 1 Gbit/s links), rank VICTIM SIGKILLed at the start of
# step 3, ROUNDS rounds. For each round: the time from the kill to the first and to the last
# survivor going on (the wall-clock stamps the example prints beside "killing myself" and
# "again from step": one machine, one clock; "going on" is after the shrink, a MIN allreduce
# and DDP's broadcast of the parameters on the shrunk group). Needs root.
#
#   bench/recovery_across_hosts.sh [HOSTS] [RANKS] [ROUNDS] [VICTIM] [BUILD_DIR]
#   (default 4 2 5 5 build: rank 5 is on host h2)
# DDL_SHRINK_KEEP_CONNECTIONS, when set, reaches every rank (to compare with new connections).
set -euo pipefail
hosts=${1:-4} ranks=${2:-2} rounds=${3:-5} victim=${4:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${5:-$root/build}" && pwd)
python=${DDL_PYTHON:-$("$root/scripts/python-env.sh" 2> /dev/null)}
export DDL_BUILD_DIR=$build PYTHONPATH=$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}
export BENCH_PYTHON=$python BENCH_DDLRUN=$build/tools/ddlrun/ddlrun BENCH_ROUNDS=$rounds
export BENCH_VICTIM=$victim BENCH_EXAMPLE=$root/examples/elastic_train.py
export BENCH_HOSTLIST
BENCH_HOSTLIST=$(for ((h = 0; h < hosts; h++)); do printf 'h%d:%d,' "$h" "$ranks"; done)
BENCH_HOSTLIST=${BENCH_HOSTLIST%,}
echo "$hosts emulated hosts x $ranks ranks, rank $victim killed at step 3 of 8, $rounds rounds"
# ddlrun runs on h0: the root namespace has no address the hosts could reach its store at.
exec "$root/tools/emuhosts/emuhosts" run --hosts "$hosts" -- bash -c '
  log=$(mktemp)
  trap "rm -f $log" EXIT
  for ((round = 1; round <= BENCH_ROUNDS; round++)); do
    "$EMUHOSTS_AGENT" h0 timeout -s KILL 300 "$BENCH_DDLRUN" --keep-going --torch-store \
      -H "$BENCH_HOSTLIST" --launch-agent "$EMUHOSTS_AGENT" -x DDL_SHRINK_KEEP_CONNECTIONS \
      -- "$BENCH_PYTHON" \
      "$BENCH_EXAMPLE" --steps 8 --at-step 3 --kill-rank "$BENCH_VICTIM" > "$log" 2>&1 ||
      { echo "round $round failed:"; tail -20 "$log"; exit 1; }
    "$BENCH_PYTHON" - "$log" "$round" << "EOF"
import re, sys
text = open(sys.argv[1]).read()
killed = float(re.search(r"killing myself at step \d+ at ([0-9.]+)", text).group(1))
went = re.findall(r"again from step \d+ \(([0-9.]+) s\) at ([0-9.]+)", text)
back = sorted(float(at) - killed for _, at in went)
shrink = sorted(float(took) for took, _ in went)
sums = set(re.findall(r"param checksum ([-+0-9.eE]+)", text))
print(f"round {sys.argv[2]}: {len(back)} survivors went on {back[0]:.3f} - {back[-1]:.3f} s "
      f"after the kill (of which the shrink and the first collectives {shrink[0]:.3f} - "
      f"{shrink[-1]:.3f} s); {len(sums)} distinct final checksum(s)")
EOF
  done'

#!/usr/bin/env bash
# The bootstrap's allgather with rank 0's answers sent to every rank itself (a star) and
# passed on by relays (the default beyond 64 ranks, lib/bootstrap/relay.h), alternating:
# rank 0 alone on emulated host h0 behind a 1 Gbit/s link (tools/emuhosts), ranks 1..N-1 as
# threads of one process on h1, 300-byte blobs (a UCX address). Per run: a barrier, then
# the allgather timed on h1 (its slowest rank); ROUNDS runs of each kind, 3 allgathers each,
# medians. Needs root.
#
#   bench/bootstrap_relays.sh [BUILD_DIR] [RANKS...]   (default build, 256 1024; ROUNDS=3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
export BENCH_BIN=$build/bench/bootstrap_bench BENCH_RANKS="${*:-256 1024}"
export BENCH_ROUNDS=${ROUNDS:-3}
[[ -x $BENCH_BIN ]] || { echo "no $BENCH_BIN: build the bench target bootstrap_bench" >&2; exit 2; }
echo "rank 0 on h0, the others on h1, 1 Gbit/s links; $BENCH_ROUNDS rounds of 3 allgathers each"
exec "$root/tools/emuhosts/emuhosts" run --hosts 2 --rate 1gbit -- bash -c '
  set -euo pipefail
  out=$(mktemp -d)
  trap "rm -rf $out" EXIT
  median() { sort -g | awk "{ v[NR] = \$1 } END { print v[int((NR + 1) / 2)] }"; }
  for n in $BENCH_RANKS; do
    : > "$out/star"; : > "$out/relays"
    for ((round = 1; round <= BENCH_ROUNDS; round++)); do
      for kind in star relays; do
        fanout=0
        [[ $kind == star ]] && fanout=$((n - 1))
        port=$((20000 + RANDOM % 20000))
        "$EMUHOSTS_AGENT" h0 timeout -s KILL 300 "$BENCH_BIN" "$n" 0 0 "10.100.0.1:$port" \
          "$fanout" 3 300 > /dev/null &
        "$EMUHOSTS_AGENT" h1 timeout -s KILL 300 "$BENCH_BIN" "$n" 1 $((n - 1)) \
          "10.100.0.1:$port" "$fanout" 3 300 | awk "{ print \$3 }" >> "$out/$kind"
        wait
      done
    done
    star=$(median < "$out/star") relays=$(median < "$out/relays")
    awk -v n="$n" -v s="$star" -v r="$relays" "BEGIN {
      printf \"%5d ranks: star %.4f s, relays %.4f s (%.1fx)\n\", n, s, r, s / r }"
  done
'

#!/usr/bin/env bash
# scripts/perf.sh's command line, run for real with tiny sizes: an optional rank count first,
# and ddl_perf's flags without a count (`scripts/perf.sh -b 1M` must not take -b for the count).
# Installing and building are stubbed: perf.sh runs from a scratch root whose scripts/ holds the
# real perf.sh beside no-op install-deps.sh and build.sh, and whose build/bin links to this
# build's tools.   check_perf_sh.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/build/bin"
ln -s "$src/scripts/perf.sh" "$tmp/scripts/perf.sh"
for stub in install-deps build; do
  printf '#!/bin/sh\necho %s >> "%s/ran"\n' "$stub" "$tmp" > "$tmp/scripts/$stub.sh"
  chmod +x "$tmp/scripts/$stub.sh"
done
for tool in ddlrun ddl_perf; do ln -s "$build/bin/$tool" "$tmp/build/bin/$tool"; done
unset DDL_BUILD_DIR OMP_NUM_THREADS

fail() {
  echo "check_perf_sh: $*" >&2
  exit 1
}

# run WANT_RANKS SIZES... -- ARGS...: perf.sh ARGS must run WANT_RANKS ranks and print a row
# for each of SIZES.
run() {
  local want=$1
  shift
  local sizes=()
  while [ "$1" != "--" ]; do
    sizes+=("$1")
    shift
  done
  shift
  rm -f "$tmp/ran"
  local out status=0
  out=$(timeout -k 5 120 "$tmp/scripts/perf.sh" "$@" 2>&1) || status=$?
  [ "$status" -eq 0 ] || fail "perf.sh $* exited with $status:"$'\n'"$out"
  [ "$(cat "$tmp/ran")" = $'install-deps\nbuild' ] || fail "perf.sh $* did not install, then build"
  grep -Eq "(^|[^0-9])$want ranks" <<< "$out" || fail "perf.sh $*: not $want ranks:"$'\n'"$out"
  for size in "${sizes[@]}"; do
    grep -Eq "^ +$size +[0-9]+ " <<< "$out" || fail "perf.sh $*: no row of $size B:"$'\n'"$out"
  done
  echo "ok: perf.sh $* ($want ranks; rows ${sizes[*]})"
}

run 2 1024 2048 -- -b 1K -e 2K -f 2 -n 2 -w 1
run 3 4096 -- 3 -b 4K -e 4K -n 2 -w 1
run 2 64 -- -b 64 -e 64 -n 1 -w 1 -d half -o max
# DDL_BUILD_DIR: the tools are taken from there, as build.sh builds there.
mv "$tmp/build" "$tmp/elsewhere"
DDL_BUILD_DIR=$tmp/elsewhere run 2 8 -- -b 8 -e 8 -n 1 -w 1

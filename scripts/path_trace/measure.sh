#!/usr/bin/env bash
# The path of one ddl_allreduce through ddl's source files at two revisions (README.md).
#   scripts/path_trace/measure.sh [OLD] [NEW] [RUNS]
# OLD defaults to 26f9461 (before issue 35's one dispatch, 426f011), NEW to HEAD, RUNS to 3:
# each revision is checked out into a git worktree, built instrumented (build.sh) and run on 2
# ranks at 4 KB and 8 MB, RUNS times each; the table goes to stdout. Worktrees and builds live
# in a temporary folder, removed on exit whatever happens; PATH_TRACE_KEEP=DIR keeps the
# symbolized traces and the ranks' logs there (path_trace.py analyze --tree reads a trace).
# Needs gdb (with its Python, as Debian's has), python3 and what ddl's own build needs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
old=${1:-26f9461}
new=${2:-HEAD}
runs=${3:-3}
command -v gdb > /dev/null ||
  { echo "measure.sh: needs gdb (path_trace.py names functions with it)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/path_trace.XXXXXX")
cleanup() {
  for rev in old new; do
    # Best effort: whatever is left, prune and rm -rf below take away.
    if [ -d "$work/$rev-src" ]; then
      git -C "$repo" worktree remove --force "$work/$rev-src" || true
    fi
  done
  git -C "$repo" worktree prune
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/out"

for rev in old new; do
  commit=${old}
  [ "$rev" = new ] && commit=${new}
  src=$work/$rev-src
  build=$work/$rev-build
  git -C "$repo" worktree add --quiet --detach "$src" "$commit"
  echo "$rev: $(git -C "$src" log -1 --format='%h %s' | cut -c1-100); building" >&2
  "$here/build.sh" "$src" "$build"
  # The program and the tracer are not instrumented: the trace holds only the library's calls.
  gcc -O0 -g -o "$build/path_trace_prog" "$here/prog.c" "$here/tracer.c" -I"$src/include" \
    -L"$build" -lddl -Wl,-rpath,"$build"
  ddlrun=$(find "$build" -name ddlrun -type f -perm -u+x | head -n 1)
  for count in 1024 2097152; do  # 4 KB (flat) and 8 MB (direct) of float32
    for run in $(seq 1 "$runs"); do
      name=$work/out/${rev}_${count}_$run
      echo "$rev: $count floats, run $run" >&2
      # DDL_LOG_LEVEL=info: the library logs the way it chose (the report's "way").
      PATH_TRACE_OUT=$name.trace DDL_LOG_LEVEL=info timeout 300 \
        "$ddlrun" -n 2 "$build/path_trace_prog" "$count" > "$name.log" 2>&1 ||
        { cat "$name.log" >&2; exit 1; }
      python3 "$here/path_trace.py" symbolize "$name.trace" "$src" > "$name.sym"
      rm "$name.trace"
    done
  done
done

describe() { git -C "$repo" log -1 --format='%h %ad %s' --date=short "$1" | cut -c1-90; }
python3 "$here/path_trace.py" report "$work/out" "$(describe "$old")" "$(describe "$new")"
if [ -n "${PATH_TRACE_KEEP:-}" ]; then
  mkdir -p "$PATH_TRACE_KEEP"
  cp "$work"/out/* "$PATH_TRACE_KEEP"/
fi

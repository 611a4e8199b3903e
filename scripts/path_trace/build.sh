#!/usr/bin/env bash
# An instrumented build of libddl and ddlrun for path tracing.
#   scripts/path_trace/build.sh SRC BUILD
# SRC is a source tree of ddl (a git worktree at the revision to measure), BUILD a new folder.
set -euo pipefail
src=$1
build=$2
# Debug (-O0 -g): every call the source writes is a call in the binary, and gdb can name each
# function's defining file. -finstrument-functions makes every function call the tracer
# (tracer.c) on entry and exit; functions from system headers (the C++ library's templates)
# are left out, so the path holds only ddl's own functions. -fno-inline keeps ddl's inline
# functions as calls too. Tests, benchmarks and -Werror are off: only the library is needed.
instrument="-finstrument-functions -fno-inline"
instrument+=" -finstrument-functions-exclude-file-list=/usr/include,/usr/lib,include/c++"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DDDL_WERROR=OFF -DDDL_BUILD_TESTS=OFF \
  -DDDL_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$instrument" -DCMAKE_C_FLAGS="$instrument" \
  > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target ddl ddlrun > "$build.build.log" 2>&1 ||
  { tail -n 50 "$build.build.log"; exit 1; }

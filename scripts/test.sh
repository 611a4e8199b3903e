#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
#
#   scripts/test.sh           every test (what CI runs)
#   scripts/test.sh --quick   the developer's loop: builds, then runs the tests labelled `quick`
#                             in tests/CMakeLists.txt (unit tests and a few multi-rank smoke
#                             tests, about 2 minutes here); installs nothing
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
if [ "$quick" = 1 ]; then
  "$root/scripts/build.sh"
else
  "$root/scripts/install-deps.sh"
  # tests/python's interpreter: a virtual environment (made once) with torch, jax, TensorFlow,
  # numpy, pytest, ddl. The build makes ddl.torch's backend and ddl.jax's and ddl.tensorflow's
  # modules against its frameworks (bindings/python/frameworks.cmake), so that no test
  # compiles them.
  DDL_PYTHON=$("$root/scripts/python-env.sh")
  # Anything else on its stdout would make every Python test skip ("no interpreter").
  if [ ! -x "$DDL_PYTHON" ]; then
    echo "test.sh: scripts/python-env.sh printed no interpreter: '$DDL_PYTHON'" >&2
    exit 1
  fi
  export DDL_PYTHON
  "$root/scripts/build.sh" -DDDL_PYTHON="$DDL_PYTHON"
fi
echo "test.sh: dependencies and build: $SECONDS s"
cd "${DDL_BUILD_DIR:-$root/build}"
# As many tests at once as there are cores, but one that starts ranks at a time (the lock
# `ranks`, tests/CMakeLists.txt): the one-process tests run beside it.
jobs=$(nproc)
if [ "$quick" = 1 ]; then
  exec ctest --output-on-failure --timeout 300 -j "$jobs" -L quick "$@"
fi
status=0
ctest --output-on-failure --timeout 900 -j "$jobs" "$@" || status=$?
echo "test.sh: in all $SECONDS s"
exit $status

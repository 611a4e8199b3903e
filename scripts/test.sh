#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# tests/python's interpreter: a virtual environment (made once) with torch, numpy, pytest, ddl.
DDL_PYTHON=$("$root/scripts/python-env.sh")
export DDL_PYTHON
cd "${DDL_BUILD_DIR:-$root/build}"
# Tests spawn up to 8 ranks each: run one test binary at a time on small machines.
ctest --output-on-failure --timeout 900 -j 1

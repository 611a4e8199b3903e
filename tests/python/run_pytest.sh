#!/usr/bin/env bash
# Runs the Python package's tests for CTest: run_pytest.sh SOURCE_DIR [CONFIGURED_PYTHON].
# Exit status 77 (CTest's "skipped") when the interpreter has no pytest.
set -uo pipefail
root=$1
python=${DDL_PYTHON:-${2:-python3}}
if ! command -v "$python" > /dev/null; then
  echo "python_bindings: skipped: no interpreter '$python' (run scripts/python-env.sh)"
  exit 77
fi
if ! "$python" -c "import pytest, numpy" 2> /dev/null; then
  echo "python_bindings: skipped: $python has no pytest or numpy" \
       "(scripts/python-env.sh makes a virtual environment with them)"
  exit 77
fi
cd "$root" || exit 1
exec "$python" -m pytest tests/python -q -p no:cacheprovider

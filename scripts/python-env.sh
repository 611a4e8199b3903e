#!/usr/bin/env bash
# Makes (once) the Python environment the tests and examples use, and prints its python.
#
#   scripts/python-env.sh            -> prints e.g. /root/.cache/ddl/venv/bin/python
#
# The virtual environment lives outside the clone, at ${DDL_VENV:-$HOME/.cache/ddl/venv}, so
# that torch (large) is downloaded once per machine and reused by every later run and clone.
# It gets the current torch from PyPI, numpy, pytest, ml_dtypes (numpy's bfloat16), ninja
# (torch.utils.cpp_extension builds ddl.torch's backend with it), jax (ddl.jax),
# tensorflow-cpu (ddl.tensorflow; it brings keras), torchft (ddl.torchft), accelerate,
# ray[train], lightning and deepspeed (examples/accelerate_train.py, ray_train.py,
# lightning_train.py, deepspeed_train.py), and
# this checkout's bindings/python on its path (development: the package runs from this
# checkout, finds its build/ or $DDL_BUILD_DIR, and builds ddl.torch's backend at first use;
# `pip install ./bindings/python` is the user's self-contained install instead).
# Progress goes to stderr; stdout carries only the interpreter's path.
set -euo pipefail
# stdout carries the interpreter's path alone: everything else goes to stderr (fd 3 keeps the
# real stdout), whatever a command prints (`import deepspeed` prints a warning to stdout).
exec 3>&1 1>&2
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DDL_VENV:-$HOME/.cache/ddl/venv}
python=$venv/bin/python
log() { echo "python-env: $*"; }

if [ ! -x "$python" ]; then
  base=${DDL_BASE_PYTHON:-python3}
  log "creating $venv with $($base --version 2>&1)"
  mkdir -p "$(dirname "$venv")"
  if ! "$base" -m venv "$venv"; then
    # Debian's python3 needs python3-venv for `-m venv`.
    log "installing python3-venv"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends python3-venv
    rm -rf "$venv"
    "$base" -m venv "$venv"
  fi
fi

# Only what is missing: a present torch is never downloaded again. MODULE=PACKAGE where PyPI
# names it otherwise (TensorFlow's CPU build: ddl.tensorflow runs on CPUs).
missing=()
for entry in torch numpy pytest setuptools ml_dtypes ninja matplotlib jax \
             tensorflow=tensorflow-cpu torchft accelerate "ray.train=ray[train]" lightning \
             deepspeed; do
  "$python" -c "import ${entry%%=*}" > /dev/null 2>&1 || missing+=("${entry#*=}")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} from PyPI into $venv"
  "$python" -m pip install --quiet --upgrade pip
  "$python" -m pip install --quiet "${missing[@]}"
fi

# The package itself, from this checkout, through a .pth file (no build; redone when the
# venv's ddl is another checkout's, an installed one, or absent).
installed=$("$python" -c "import ddl, os; print(os.path.dirname(os.path.dirname(ddl.__file__)))" \
              2> /dev/null || true)
if [ "$installed" != "$root/bindings/python" ]; then
  log "pointing $venv at $root/bindings/python"
  "$python" -m pip uninstall --quiet --yes ddl > /dev/null 2>&1 || true
  site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$root/bindings/python" > "$site/ddl-checkout.pth"
fi
echo "$python" >&3

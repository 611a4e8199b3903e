#!/usr/bin/env bash
# The self-contained wheel (issue 24, item 1), as a user gets it: `pip wheel ./bindings/python`
# (with pip's build isolation) builds libddl, the tools and the torch backend into the package;
# the wheel goes into a fresh virtual environment in another directory, which sees torch but no
# checkout, no DDL_BUILD_DIR and no LD_LIBRARY_PATH; there `import ddl.torch` loads the
# packaged backend without compiling anything, ddlrun and ddl_perf are commands, the DDP
# example trains over backend "ddl", and the Python tests of loading and calling pass on the
# installed package. A
# torch other than the one it was built against is refused with both versions named.
#
#   test_wheel.sh PYTHON     (an interpreter with torch: scripts/python-env.sh's)
# Skipped (77) when PYTHON has no torch or pip cannot reach scikit-build-core. Under CTest
# (CXX and CC: the project build's compilers) ccache serves most of the wheel's compiles from
# that build's objects (cmake/compile_flags.cmake): 30 s instead of 100-140 s here.
set -uo pipefail
python=${1:-${DDL_PYTHON:-python3}}
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! "$python" -c "import torch" 2> /dev/null; then
  echo "test_wheel: skipped: $python has no torch (scripts/python-env.sh makes one that has)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

echo "=== pip wheel ./bindings/python"
t0=$SECONDS
if ! "$python" -m pip wheel --quiet --no-deps -w "$tmp/wheels" "$root/bindings/python" \
  > "$tmp/wheel.log" 2>&1; then
  if grep -q "No matching distribution found for scikit-build-core" "$tmp/wheel.log"; then
    echo "test_wheel: skipped: pip cannot get scikit-build-core here"
    exit 77
  fi
  cat "$tmp/wheel.log"
  echo "FAIL: pip wheel failed"
  exit 1
fi
wheel=$(ls "$tmp"/wheels/ddl-*.whl)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KB) in $((SECONDS - t0)) s"
# Listed once: `zipfile -l | grep -q` fails under pipefail when grep stops reading early.
members=$("$python" -m zipfile -l "$wheel")
for member in ddl/libddl.so.0 ddl/bin/ddlrun ddl/bin/ddl_perf ddl/torch/_build_info.py \
              ddl/framework_abi.h ddl/jax/ffi_calls.cc ddl/tensorflow/ops.cc; do
  grep -q -e " *$member " -e "^$member" <<< "$members" || fail "the wheel lacks $member"
done
grep -q "ddl/torch/_torch_backend" <<< "$members" || fail "the wheel lacks the torch backend"

echo "=== a fresh venv elsewhere: torch only, then the wheel"
base=$("$python" -c "import sys; print(getattr(sys, '_base_executable', sys.executable))")
"$base" -m venv "$tmp/venv" || exit 1
site=$("$tmp/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
torch_site=$("$python" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
# torch (a few GB) from the other environment, as a path: its .pth files (a checkout's ddl)
# are not read from there.
echo "$torch_site" > "$site/torch-from-elsewhere.pth"
"$tmp/venv/bin/python" -m pip install --quiet --no-deps --no-index "$wheel" || exit 1

mkdir -p "$tmp/run" "$tmp/extensions"
cp "$root/examples/ddp_train.py" "$tmp/run/"
# No checkout, no build, no compiler (CXX names one that fails), an empty extension cache.
clean_env=(env -i HOME="$tmp" PATH="$tmp/venv/bin:/usr/bin:/bin" CXX=/bin/false CC=/bin/false
           TORCH_EXTENSIONS_DIR="$tmp/extensions" OMP_NUM_THREADS=1)
cd "$tmp/run" || exit 1
t0=$EPOCHREALTIME
out=$("${clean_env[@]}" python -c "import ddl.torch, ddl; ddl.torch.extension(); print(ddl.library_path())" 2>&1) ||
  fail "import ddl.torch: $out"
t1=$EPOCHREALTIME
echo "import ddl.torch and load its backend: $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; libddl: $out"
case "$out" in "$site/ddl/libddl.so.0") ;; *) fail "libddl is not the package's: $out" ;; esac
[ -z "$(ls -A "$tmp/extensions")" ] || fail "something was compiled into the extension cache"

echo "=== ddlrun and ddl_perf, as commands of the package"
out=$("${clean_env[@]}" ddlrun -n 2 -- ddl_perf -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 2>&1)
grep -q "Out of bounds values : 0 OK" <<< "$out" || fail "ddlrun -n 2 ddl_perf: $out"

echo "=== the DDP example over backend ddl"
out=$("${clean_env[@]}" ddlrun -n 2 -- python ddp_train.py --steps 5 2>&1)
[ $? -eq 0 ] && grep -qi "loss" <<< "$out" || fail "ddp_train.py: $out"
tail -2 <<< "$out"

# What an installed package changes is where libddl, the tools and the backend are found, not
# what they do: the tests that load them each way run here (the library's search order, the
# ctypes collectives and rooted calls, torch tensors, the torch backend's collectives under
# ddlrun); python_bindings runs every Python test on the checkout (6.5 min here, which this
# test used to repeat).
echo "=== the Python tests of loading and calling, on the installed package (DDL_TEST_INSTALLED=1)"
# ddl.jax and ddl.tensorflow: their collectives on 2 ranks, with the handlers and ops the
# wheel built (built against the jax and TensorFlow of this environment, where they are).
# test_framework_launchers: the wheel's own torch.backends entry point (pyproject.toml) makes
# "ddl" known to a bare `import torch`.
tests=(test_library.py test_collectives.py test_rooted.py test_torch.py test_torch_backend.py
       test_jax.py test_tensorflow.py test_framework_launchers.py)
only="(not test_torch_backend and not test_jax and not test_tensorflow"
only+=" and not test_framework_launchers)"
only+=" or (test_framework_launchers and not example)"
only+=" or (test_torch_backend and test_collectives and ddlrun)"
only+=" or ((test_jax or test_tensorflow) and test_collectives and 2)"
out=$(cd "$root/tests/python" && "${clean_env[@]}" DDL_TEST_INSTALLED=1 timeout -k 10 900 \
  python -m pytest "${tests[@]}" -k "$only" -q -p no:cacheprovider 2>&1)
rc=$?
tail -3 <<< "$out"
[ $rc -eq 0 ] || fail "the Python tests on the installed package: $(tail -40 <<< "$out")"
[ -z "$(ls -A "$tmp/extensions")" ] || fail "the tests compiled something into the extension cache"
for framework in jax tensorflow; do
  if grep -q "ddl/$framework/_build_info.py" <<< "$members"; then
    echo "ddl.$framework: built into the wheel"
    [ ! -e "$tmp/.cache/ddl/$framework" ] ||
      fail "ddl.$framework compiled its own though the wheel carries it built"
  fi
done

echo "=== another torch than the backend's is refused"
info=$(ls "$site"/ddl/torch/_build_info.py)
cp "$info" "$tmp/info.bak"
echo 'TORCH_VERSION = "1.0.0"' > "$info"
out=$("${clean_env[@]}" python -c "import ddl.torch; ddl.torch.extension()" 2>&1) &&
  fail "a backend built for torch 1.0.0 loaded"
grep -q "built against torch 1.0.0, and this environment has torch" <<< "$out" ||
  fail "the refusal does not name both versions: $out"
cp "$tmp/info.bak" "$info"

echo "=== test_wheel: $failures failure(s)"
[ "$failures" -eq 0 ]

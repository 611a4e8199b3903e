"""Shared pieces of the ddl package's tests: where the checkout and its build are, and
`run_ranks`, which starts a job of real processes (one per rank) and collects them.

The tests import the package from this checkout's bindings/python (not whatever `ddl` is
installed), and load the library of $DDL_BUILD_DIR (CTest sets it) or the checkout's build/.
With DDL_TEST_INSTALLED=1 they test the `ddl` installed in the interpreter instead (a wheel:
tests/install/test_wheel.sh), with its own library, backend and `ddlrun` on PATH.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import secrets

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = os.environ.get("DDL_TEST_INSTALLED") == "1"
PACKAGE_DIR = None if INSTALLED else os.path.join(REPO, "bindings", "python")
BUILD_DIR = None if INSTALLED else os.environ.get("DDL_BUILD_DIR") or os.path.join(REPO, "build")
DDLRUN = (shutil.which("ddlrun") or "ddlrun") if INSTALLED else \
    os.path.join(BUILD_DIR, "tools", "ddlrun", "ddlrun")
RANK_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_main.py")
FUSION_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fusion_rank.py")


def package_env(env):
    """env (a dict) made to run the package under test in a child process."""
    if not INSTALLED:
        env["DDL_BUILD_DIR"] = BUILD_DIR
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_DIR, env.get("PYTHONPATH")]))
    return env


if not INSTALLED:
    sys.path.insert(0, PACKAGE_DIR)
    os.environ["DDL_BUILD_DIR"] = BUILD_DIR  # for this process's own `import ddl` too

SKIP = 77  # a rank exits with this to say "skip" (printing why)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(nranks, rank, port, token, extra=None):
    env = dict(os.environ)
    env.update({
        "DDL_RANK": str(rank),
        "DDL_WORLD_SIZE": str(nranks),
        "DDL_ROOT": f"127.0.0.1:{port}",
        "DDL_JOB_TOKEN": token,
        # A lost peer or a mismatch must end as an error well before the harness's timeout.
        "DDL_TIMEOUT_MS": "20000",
    })
    package_env(env)
    env.update(extra or {})
    return env


class Rank:
    def __init__(self, rank, returncode, out):
        self.rank, self.returncode, self.out = rank, returncode, out

    def __repr__(self):
        return f"--- rank {self.rank} (exit {self.returncode}) ---\n{self.out}"


def run_ranks(nranks, scenario, *args, timeout=90, env=None, expect=None, main=RANK_MAIN):
    """Runs `main scenario args...` (rank_main.py unless given) as nranks processes of one
    job; fails the test (with every rank's output) unless each rank's exit status is as
    expected (default 0). `expect` maps rank -> exit status. Returns the Ranks. A rank
    exiting with SKIP skips."""
    port, token = free_port(), secrets.token_hex(8)
    procs = []
    for r in range(nranks):
        procs.append(subprocess.Popen(
            [sys.executable, main, scenario, *map(str, args)],
            env=rank_env(nranks, r, port, token, env), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True))
    deadline = time.monotonic() + timeout
    results, timed_out = [], False
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        results.append(Rank(r, p.returncode, out))
    report = "\n".join(map(repr, results))
    if timed_out:
        pytest.fail(f"{scenario} on {nranks} ranks did not finish in {timeout} s:\n{report}")
    if all(x.returncode == SKIP for x in results):
        pytest.skip(results[0].out.strip().splitlines()[-1])
    expect = expect or {}
    wrong = [x for x in results if x.returncode != expect.get(x.rank, 0)]
    if wrong:
        pytest.fail(f"{scenario} on {nranks} ranks: unexpected exit status of rank(s) "
                    f"{[x.rank for x in wrong]}:\n{report}")
    return results


def _run_job(cmd, env, timeout):
    """Runs a launcher's command line; fails the test on a hang or a non-zero exit (with the
    output). Returns the output."""
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} hung:\n{e.stdout}")
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{p.stdout}"
    return p.stdout


def run_ddlrun(nranks, command, timeout, keep_going=False, torch_store=False):
    """Runs `command` (a Python script and its arguments) as nranks processes under ddlrun
    (--keep-going, --torch-store when asked), torch's launcher variables cleared (see
    _run_job); skips without ddlrun."""
    if not os.access(DDLRUN, os.X_OK):
        pytest.skip(f"no ddlrun at {DDLRUN} (build ddl first)")
    cmd = [DDLRUN, "-n", str(nranks)] + (["--keep-going"] if keep_going else []) + \
        (["--torch-store"] if torch_store else []) + ["--", sys.executable, *command]
    env = package_env(dict(os.environ))
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return _run_job(cmd, env, timeout)


def run_mpirun(nranks, command, timeout, mpirun_args=(), env=None):
    """Runs `command` (a Python script and its arguments) as nranks processes under Open MPI's
    mpirun (see _run_job), with mpirun_args before them and env's variables passed on to
    every rank; skips without mpirun."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun")
    env = env or {}
    passed = [arg for var in ("DDL_BUILD_DIR", "PYTHONPATH", *env) for arg in ("-x", var)]
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(nranks), *passed,
           *mpirun_args, sys.executable, *command]
    return _run_job(cmd, package_env(dict(os.environ, OMP_NUM_THREADS="1", **env)), timeout)


def largest_differences(out, nprocs):
    """The "largest difference ...: D" lines of an example's --check, one per process (the
    processes' lines may run into each other: "...: 5.96e-08rank 1: largest ...")."""
    import re
    diffs = [float(d) for d in
             re.findall(r"largest difference [^:\n]*: ([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)", out)]
    assert len(diffs) == nprocs, out
    return diffs


def has_module(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


@pytest.fixture
def requires_torch():
    if not has_module("torch"):
        pytest.skip("torch is not importable in this Python; scripts/python-env.sh makes a "
                    "virtual environment with it")

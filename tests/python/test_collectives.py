"""Blocking collectives over real processes, checked against float64 numpy references."""

import os
import subprocess
import sys

import pytest

from conftest import DDLRUN, RANK_MAIN, rank_env, run_ranks


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_every_dtype_and_op(nranks):
    run_ranks(nranks, "collectives", timeout=240)


@pytest.mark.parametrize("nranks", [2, 3])
def test_buffer_protocol_objects(nranks):
    run_ranks(nranks, "buffers")


def test_explicit_communicator_with_config():
    run_ranks(2, "explicit")


def test_split():
    run_ranks(4, "split")
    run_ranks(3, "split")


def test_under_ddlrun():
    ddlrun = DDLRUN
    if not os.access(ddlrun, os.X_OK):
        pytest.skip(f"{ddlrun} is not built")
    env = rank_env(1, 0, 0, "")
    for var in ("DDL_RANK", "DDL_WORLD_SIZE", "DDL_ROOT", "DDL_JOB_TOKEN"):
        del env[var]  # ddlrun sets them
    p = subprocess.run([ddlrun, "-n", "3", "--timeout", "60", "--tag-output", "--",
                        sys.executable, RANK_MAIN, "smoke"],
                       env=env, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):
        assert f"ok rank {r} of 3" in p.stdout, p.stdout

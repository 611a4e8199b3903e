"""Failures end as ddl.Error on every rank, never as a hang."""

import signal

import pytest

from conftest import free_port, run_ranks


@pytest.mark.parametrize("kind", ["count", "dtype", "collective", "async"])
def test_mismatched_calls_fail_on_every_rank(kind):
    ranks = run_ranks(2, "mismatch", kind)
    for r in ranks:
        assert "DDL_ERR_INVALID_USAGE" in r.out, r


def test_survivors_agree_shrink_and_grow_back():
    ranks = run_ranks(3, "elastic", free_port(), expect={1: -signal.SIGKILL}, timeout=90)
    assert all("ok" in ranks[r].out for r in (0, 2)), ranks


def test_killed_rank_is_an_error_on_the_survivors():
    ranks = run_ranks(3, "killed", expect={2: -signal.SIGKILL}, timeout=60)
    for r in ranks[:2]:
        assert "ok" in r.out, r


def test_abort_from_another_thread():
    run_ranks(2, "abort", timeout=60)


def test_gil_released_while_waiting():
    run_ranks(2, "gil", timeout=60)

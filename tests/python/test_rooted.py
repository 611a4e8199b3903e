"""The Communicator's alltoall(v), reduce, gather(v), scatter(v), scan, exscan, send and recv (tags, from
any source) over real processes, every result checked exactly (rooted_rank.py)."""

import os

import pytest

from conftest import run_ranks

ROOTED_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rooted_rank.py")


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_every_call(nranks):
    run_ranks(nranks, "all", main=ROOTED_MAIN, timeout=120)


def test_over_ucx():
    run_ranks(3, "all", main=ROOTED_MAIN, env={"DDL_SHM": "0"}, timeout=120)

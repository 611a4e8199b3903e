"""Nonblocking collectives (ddl.Request) and ddl.group()."""

import pytest

from conftest import run_ranks


@pytest.mark.parametrize("nranks", [2, 3])
def test_requests_in_flight(nranks):
    run_ranks(nranks, "async")


@pytest.mark.parametrize("nranks", [1, 2])
def test_group(nranks):
    run_ranks(nranks, "group")

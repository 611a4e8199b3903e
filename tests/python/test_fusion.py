"""ddl.fusion: Horovod-style negotiated fusion of asynchronous allreduces, over 1-4 real
processes (scenarios in fusion_rank.py)."""

import signal

import pytest

from conftest import FUSION_MAIN, run_ranks


def fusion(nranks, scenario, **kwargs):
    return run_ranks(nranks, scenario, main=FUSION_MAIN, **kwargs)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_mixed_dtypes_ops_and_sizes(nranks):
    fusion(nranks, "mixed")


@pytest.mark.parametrize("nranks", [2, 3])
def test_names_in_different_orders_meet_by_name(nranks):
    fusion(nranks, "orders")


def test_many_small_tensors():
    fusion(2, "many")


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_late_rank_holds_the_tensor_back(nranks):
    fusion(nranks, "late")


@pytest.mark.parametrize("nranks", [2, 3])
def test_mismatched_tensors_fail_on_every_rank(nranks):
    for r in fusion(nranks, "mismatch"):
        assert "submitted differently" in r.out, r


def test_close_is_clean_or_gives_up_within_its_deadline():
    fusion(2, "close")


def test_killed_rank_fails_every_pending_handle():
    fusion(3, "killed", expect={2: -signal.SIGKILL}, timeout=60)


def test_close_returns_with_a_frozen_peer():
    fusion(2, "stopped", expect={1: -signal.SIGKILL}, timeout=60)


def test_communicator_api_and_argument_errors():
    fusion(2, "api")


def test_torch_tensors(requires_torch):
    fusion(2, "torch")

"""PyTorch CPU tensors (every dtype incl. float16/bfloat16) through the ddl package."""

import pytest

from conftest import run_ranks


@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_tensors(requires_torch, nranks):
    run_ranks(nranks, "torch", timeout=240)

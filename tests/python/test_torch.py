"""PyTorch CPU tensors (every dtype incl. float16/bfloat16) through the ddl package, and the
backend a checkout loads."""

import os

import pytest

from conftest import INSTALLED, run_ranks


@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_tensors(requires_torch, nranks):
    run_ranks(nranks, "torch", timeout=240)


def test_a_checkout_loads_the_builds_backend_while_it_is_current(requires_torch, tmp_path):
    """A checkout's ddl.torch loads the backend that the project's build made against this
    torch (bindings/python/frameworks.cmake) rather than compiling one; not one older than a
    source of it (edited since the build), nor one built for another torch."""
    if INSTALLED:
        pytest.skip("an installed package carries its own backend")
    import torch

    import ddl.torch
    from ddl import _framework

    def in_build(version, sources):
        return _framework.module_in_build("torch", "_torch_backend.*.so", "TORCH_VERSION",
                                          version, sources)

    built = in_build(torch.__version__, ddl.torch._SOURCES)
    if built is None:
        pytest.skip("this build was configured without -DDDL_PYTHON (scripts/test.sh passes it)")
    assert ddl.torch.extension().__file__ == built
    edited = tmp_path / "edited.h"
    edited.write_text("")
    later = os.path.getmtime(built) + 60
    os.utime(edited, (later, later))
    assert in_build(torch.__version__, ddl.torch._SOURCES + [str(edited)]) is None
    assert in_build("1.0.0", ddl.torch._SOURCES) is None

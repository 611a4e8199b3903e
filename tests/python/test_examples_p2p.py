"""examples/moe_train.py and examples/pipeline_train.py in a small configuration, over ddl and
over gloo, under ddlrun and torchrun: each checks its own loss curve against a one-process run
of the same model (and exits non-zero past its tolerance)."""

import os
import subprocess
import sys

import pytest

from conftest import DDLRUN, REPO
from test_torch_backend import _env, _free_port

EXAMPLES = os.path.join(REPO, "examples")


@pytest.fixture(scope="module", autouse=True)
def _extension():
    pytest.importorskip("torch", reason="torch is not installed in this Python")
    import ddl.torch
    ddl.torch.extension()  # built once here, not in every rank at once


def _run(launcher, nranks, script, backend):
    path = os.path.join(EXAMPLES, script)
    args = [path, "--backend", backend, "--steps", "4"]
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nranks),
               "--master-port", str(_free_port())] + args
    else:
        cmd = [DDLRUN, "-n", str(nranks), "--", sys.executable] + args
    env = _env()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    name = script.split("_")[0]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith(name + ":")]
    assert line and "largest difference from one process" in line[0], p.stdout
    return line[0]


@pytest.mark.parametrize("script", ["moe_train.py", "pipeline_train.py"])
@pytest.mark.parametrize("launcher,backend", [("ddlrun", "ddl"), ("torchrun", "ddl"),
                                              ("torchrun", "gloo")])
def test_example_matches_one_process(script, launcher, backend):
    print(_run(launcher, 2, script, backend))


@pytest.mark.parametrize("script", ["moe_train.py", "pipeline_train.py"])
def test_example_on_four_processes(script):
    print(_run("ddlrun", 4, script, "ddl"))

"""ddl where the script never imports it: torch's plugin entry point (bindings/python's
pyproject.toml, group "torch.backends") makes the name "ddl" known in every `import torch` and
fills in env:// from ddlrun's variables; then a plain `init_process_group("ddl")` under
ddlrun, Accelerate (examples/accelerate_train.py: the group made before Accelerator), Ray
Train (examples/ray_train.py: TorchConfig(backend="ddl")), Lightning
(examples/lightning_train.py: DDPStrategy(process_group_backend="ddl")) and DeepSpeed
(examples/deepspeed_train.py: init_distributed(dist_backend="ddl"), ZeRO stages 0 and 2)
train over ddl and end equal to one process. Each framework's test skips, saying so, where it
is not installed.

A checkout's package has no installed metadata, so these tests put the entry point that
pyproject.toml declares into a directory of their own on PYTHONPATH (as a wheel's
dist-info holds it); with DDL_TEST_INSTALLED=1 the wheel's own is used.
"""

import importlib.util
import json
import os
import re
import sys

import pytest

from conftest import DDLRUN, INSTALLED, REPO, _run_job, free_port, package_env

pytest.importorskip("torch", reason="torch is not installed in this Python")

EXAMPLES = os.path.join(REPO, "examples")


def declared_entry_point():
    """`name = "module:function"` of pyproject.toml's "torch.backends" table."""
    with open(os.path.join(REPO, "bindings", "python", "pyproject.toml")) as f:
        text = f.read()
    table = re.search(r'\[project\.entry-points\."torch\.backends"\]\n([^\[]*)', text)
    assert table, "pyproject.toml declares no torch.backends entry point"
    name, value = re.search(r'^(\w+)\s*=\s*"([^"]+)"', table.group(1), re.M).groups()
    return name, value


@pytest.fixture
def plugin_env(tmp_path):
    """The environment of a child whose torch finds ddl's entry point."""
    env = package_env(dict(os.environ, OMP_NUM_THREADS="1"))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                "TORCH_DEVICE_BACKEND_AUTOLOAD"):
        env.pop(var, None)
    if not INSTALLED:
        name, value = declared_entry_point()
        info = tmp_path / "plugin" / "ddl_checkout-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ddl-checkout\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[torch.backends]\n{name} = {value}\n")
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "plugin"), env["PYTHONPATH"]])
    return env


def require(module, name):
    """Skips unless `module` is installed, without importing it into this process: the
    examples import the frameworks in their own. (Lightning's import loads torch._dynamo and
    with it triton, whose LLVM aborts a process where TensorFlow's is loaded: "Option
    registered more than once", and test_tensorflow.py runs in this process before.)"""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} is not installed in this Python")


def run(cmd, env, timeout=180):
    return _run_job(cmd, env, timeout)


def launches(example):
    """The example under torchrun and, where it is built, ddlrun (2 processes each)."""
    cmds = [[sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
             "--master-port", str(free_port()), example]]
    if os.access(DDLRUN, os.X_OK):
        cmds.append([DDLRUN, "-n", "2", "--", sys.executable, example])
    return cmds


PROBE = """
import json, os, sys
import torch, torch.distributed as dist
print(json.dumps({"registered": "ddl" in dist.Backend.backend_list,
                  "imported": sorted(m for m in sys.modules if m.startswith("ddl.torch")),
                  "rank": os.environ.get("RANK"), "master": os.environ.get("MASTER_ADDR"),
                  "local_world": os.environ.get("LOCAL_WORLD_SIZE")}))
"""


def probe(env):
    return json.loads(run([sys.executable, "-c", PROBE], env).strip().splitlines()[-1])


def test_import_torch_registers_ddl_and_loads_nothing_more(plugin_env):
    got = probe(plugin_env)
    assert got["registered"], got
    assert got["imported"] == [], f"import torch loaded {got['imported']}"
    # It is torch's plugin mechanism that does it: switched off, the name is unknown.
    assert not probe(dict(plugin_env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))["registered"]


def test_import_torch_reads_ddlrun_variables(plugin_env):
    env = dict(plugin_env, DDL_RANK="1", DDL_WORLD_SIZE="4", DDL_LOCAL_SIZE="2",
               DDL_ROOT="10.0.0.7:29999")
    got = probe(env)
    assert (got["rank"], got["master"], got["local_world"]) == ("1", "10.0.0.7", "2"), got


def test_init_process_group_under_ddlrun_without_importing_ddl(plugin_env):
    if not os.access(DDLRUN, os.X_OK):
        pytest.skip(f"no ddlrun at {DDLRUN} (build ddl first)")
    script = ("import torch, torch.distributed as dist\n"
              "dist.init_process_group('ddl')\n"
              "t = torch.full((4,), float(dist.get_rank() + 1))\n"
              "dist.all_reduce(t)\n"
              "assert t.tolist() == [3.0] * 4, t\n"
              # One string: print writes its arguments apart when Python runs unbuffered,
              # and two ranks' words then interleave on ddlrun's output.
              "print(f'rank {dist.get_rank()} over {dist.get_backend()} ok')\n"
              "dist.destroy_process_group()\n")
    out = run([DDLRUN, "-n", "2", "--", sys.executable, "-c", script], plugin_env, timeout=120)
    assert out.count("over ddl ok") == 2, out


@pytest.mark.parametrize("framework,name", [("accelerate", "Accelerate"),
                                              ("lightning", "Lightning")])
def test_example_under_torchrun_and_ddlrun(plugin_env, framework, name):
    """accelerate_train.py, lightning_train.py: 2 processes, the one-process run's loss."""
    require(framework, name)
    for cmd in launches(os.path.join(EXAMPLES, f"{framework}_train.py")):
        out = run(cmd + ["--steps", "8"], plugin_env)
        assert f"{framework} over ddl: 2 processes" in out, out
        assert "same final loss as one process: ok" in out, out


def test_ray_train_example_over_ddl(plugin_env):
    require("ray", "Ray Train")
    require("ray.train", "Ray Train")
    out = run([sys.executable, os.path.join(EXAMPLES, "ray_train.py"), "--steps", "8"],
              dict(plugin_env, RAY_USAGE_STATS_ENABLED="0"), timeout=300)
    assert "ray train over ddl: 2 workers" in out, out
    assert "same final loss as one process: ok" in out, out


def test_deepspeed_example_over_ddl(plugin_env):
    require("deepspeed", "DeepSpeed")
    # Stage 0 allreduces the gradients; stage 2 reduce-scatters them and allgathers the
    # parameters. (DeepSpeed builds its CPU shared-memory op once per machine, ~20 s.)
    for cmd, stage in zip(launches(os.path.join(EXAMPLES, "deepspeed_train.py")), ("0", "2")):
        out = run(cmd + ["--steps", "8", "--zero", stage], plugin_env, timeout=300)
        assert f"deepspeed zero {stage} over ddl: 2 processes" in out, out
        assert "same final loss as one process: ok" in out, out

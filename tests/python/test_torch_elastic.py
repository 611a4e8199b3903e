"""The ddl backend's shrink and split in real processes (4, under ddlrun): torch's
dist.shrink_group leaving a rank out on purpose; ddl.torch.shrink_group after a rank was
killed (finding it by ddl's agreement); dist.split_group and a 2-D DeviceMesh made by
splitting the world's ddl communicator. Each process runs this file as a script with a
scenario name; every job runs under a timeout.
"""

import os
import signal
import sys


# ---- the processes' side ---------------------------------------------------------------------

def _sum_of(torch, dist, value, group=None):
    t = torch.tensor([float(value)])
    dist.all_reduce(t, group=group)
    return t.item()


def scenario_shrink_excluding(torch, dist, rank):
    if rank == 3:
        return  # left out on purpose: it does not call
    group = dist.shrink_group([3])
    assert dist.get_world_size() == 3 and dist.get_rank() == rank, (rank, dist.get_rank())
    assert group.size() == 3
    assert _sum_of(torch, dist, rank + 1) == 6


def scenario_shrink_after_kill(torch, dist, rank):
    import ddl.torch
    from torch._C._distributed_c10d import ErrorType
    assert _sum_of(torch, dist, 1) == 4
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            _sum_of(torch, dist, 1)
        raise AssertionError("the collectives went on without rank 1")
    except dist.DistBackendError as e:
        assert "rank 1" in str(e), str(e)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.get_error() == ErrorType.REMOTE_ERROR  # Backend::getError
    ddl.torch.shrink_group()
    old_ranks = {0: 0, 2: 1, 3: 2}
    assert dist.get_world_size() == 3 and dist.get_rank() == old_ranks[rank]
    assert _sum_of(torch, dist, rank) == 5  # 0 + 2 + 3
    new_backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert new_backend.get_error() == ErrorType.SUCCESS


def scenario_split(torch, dist, rank):
    pairs = dist.split_group(split_ranks=[[0, 1], [2, 3]])
    assert pairs.size() == 2
    assert _sum_of(torch, dist, rank, group=pairs) == (1 if rank < 2 else 5)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    rows, cols = mesh.get_group("shard"), mesh.get_group("replicate")
    # Mesh [[0, 1], [2, 3]]: "shard" groups are the rows, "replicate" groups the columns.
    assert _sum_of(torch, dist, rank, group=rows) == (1 if rank < 2 else 5)
    assert _sum_of(torch, dist, rank, group=cols) == (2 if rank % 2 == 0 else 4)


def worker(name):
    import torch
    import torch.distributed as dist
    import ddl.torch  # noqa: F401  registers the backend
    dist.init_process_group("ddl")
    rank = dist.get_rank()
    globals()["scenario_" + name](torch, dist, rank)
    print(f"rank {rank}: {name} ok", flush=True)
    dist.destroy_process_group()


# ---- pytest's side ---------------------------------------------------------------------------

if __name__ != "__main__":
    import pytest

    from conftest import run_ddlrun

    pytest.importorskip("torch", reason="torch is not installed in this Python")

    def run(name, keep_going=False):
        return run_ddlrun(4, [os.path.abspath(__file__), name], timeout=180,
                          keep_going=keep_going)

    def test_shrink_group_leaves_out_the_excluded_rank():
        assert run("shrink_excluding").count("shrink_excluding ok") == 4  # rank 3 too, untouched

    def test_shrink_group_after_a_kill_finds_the_dead_rank():
        out = run("shrink_after_kill", keep_going=True)
        assert out.count("shrink_after_kill ok") == 3, out

    def test_split_group_and_a_device_mesh_split_the_ddl_communicator():
        assert run("split").count("split ok") == 4

if __name__ == "__main__":
    worker(sys.argv[1])  # the package under test comes through PYTHONPATH (conftest)

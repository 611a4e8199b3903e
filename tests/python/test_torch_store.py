"""DDL_TORCH_STORE=process (ddl/_launch_env.py): under mpirun and srun the rank that will be 0
starts torch's store in a process of its own and every rank becomes its client; a store that
cannot start (its port taken) leaves rank 0 hosting it, with a warning. The whole chain (rank 0
killed under mpirun, the others going on) is in test_elastic_example.py.
"""

import os
import socket

import pytest

from conftest import package_env

pytest.importorskip("torch", reason="torch is not installed in this Python")


def store_env(port, rank="0"):
    env = package_env(dict(os.environ))
    env.update(RANK=rank, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               DDL_TORCH_STORE="process")
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rank_0_starts_a_store_that_serves_its_clients():
    import datetime

    import torch.distributed as dist
    from ddl import _launch_env

    env = store_env(free_port())
    store = _launch_env.start_store_process(env, watch_pid=os.getpid())
    try:
        assert store is not None and env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        client = dist.TCPStore("127.0.0.1", int(env["MASTER_PORT"]), is_master=False,
                               timeout=datetime.timedelta(seconds=30))
        client.set("key", "value")
        assert client.get("key") == b"value"
    finally:
        if store is not None:
            store.kill()
            store.wait()


def test_other_ranks_become_clients_and_start_nothing():
    from ddl import _launch_env

    env = store_env(free_port(), rank="1")
    assert _launch_env.start_store_process(env) is None
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"


def test_a_store_that_cannot_start_leaves_rank_0_hosting_it():
    from ddl import _launch_env

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        env = store_env(taken.getsockname()[1])
        with pytest.warns(RuntimeWarning, match="could not start torch's store process"):
            assert _launch_env.start_store_process(env) is None
    assert "TORCHELASTIC_USE_AGENT_STORE" not in env

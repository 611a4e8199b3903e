"""ddl.torchft.ProcessGroupDDL as torchft's Manager drives a process group, in real processes:
configure for a quorum of 3 (through the quorum's store prefix, as torchft does), allreduce;
one member dies; the survivors' next allreduce fails, naming it, instead of hanging; they
configure a quorum of 2 and go on. Run as a script per member; pytest's side below."""

import os
import subprocess
import sys


# ---- a member's side -------------------------------------------------------------------------

def member(port, rank):
    import datetime

    import torch
    from torch.distributed import AllreduceOptions, ReduceOp

    from ddl.torchft import ProcessGroupDDL

    def allreduce(pg, value):
        t = torch.full((1000,), float(value))
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.SUM
        pg.allreduce([t], opts).wait()
        return t

    pg = ProcessGroupDDL(timeout=datetime.timedelta(seconds=30))
    assert pg.getBackendName() == "torchft-ddl"
    pg.configure(f"127.0.0.1:{port}/quorum0", f"replica_{rank}", rank, 3, quorum_id=0)
    t = allreduce(pg, rank + 1)
    assert torch.all(t == 6.0), t[:4]
    if rank == 2:
        os._exit(0)  # leaves without a word, as a crashed replica does
    try:
        allreduce(pg, 1)
        raise AssertionError("an allreduce with a dead member succeeded")
    except Exception as e:
        assert "rank 2" in str(e), e  # ddl names the dead member
    pg.configure(f"127.0.0.1:{port}/quorum1", f"replica_{rank}", rank, 2, quorum_id=1)
    t = allreduce(pg, rank + 10)
    assert torch.all(t == 21.0), t[:4]
    pg.abort(errored=False)
    print(f"member {rank}: ok", flush=True)


# ---- pytest's side ---------------------------------------------------------------------------

if __name__ != "__main__":
    import importlib.util

    import pytest

    from conftest import package_env

    # Only looked for, not imported: torchft imports triton, which aborts the process when
    # TensorFlow (test_tensorflow.py) is already loaded in it. The members import it.
    if importlib.util.find_spec("torchft") is None:
        pytest.skip("torchft is not installed in this Python", allow_module_level=True)

    def test_a_dead_member_fails_the_call_and_a_new_quorum_goes_on():
        import ddl.torch
        from torch.distributed import TCPStore
        ddl.torch.extension()  # built once here, not in every member at once
        store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        env = package_env(dict(os.environ, OMP_NUM_THREADS="1"))
        members = [subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                     str(store.port), str(r)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for r in range(3)]
        outs = []
        try:
            for m in members:
                outs.append(m.communicate(timeout=180)[0])
        finally:
            for m in members:
                m.kill()
        for r in (0, 1):
            assert members[r].returncode == 0 and f"member {r}: ok" in outs[r], outs[r]

    def test_example_loses_a_replica_and_goes_on_as_over_gloo():
        """examples/torchft_train.py: 2 replica groups under torchft's lighthouse, one killed
        inside a step's quorum; the survivor does not commit that step, goes on alone, and
        ends with the same parameters over ddl as over gloo (the example checks both)."""
        from conftest import REPO
        example = os.path.join(REPO, "examples", "torchft_train.py")
        p = subprocess.run([sys.executable, example, "--steps", "8", "--kill-step", "3"],
                           env=package_env(dict(os.environ)), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        assert p.returncode == 0, p.stdout
        for backend in ("ddl", "gloo"):
            assert f"{backend}: 1 survivors, parameters agree" in p.stdout, p.stdout


if __name__ == "__main__":
    member(int(sys.argv[1]), int(sys.argv[2]))

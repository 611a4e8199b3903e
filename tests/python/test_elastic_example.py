"""examples/elastic_train.py loses one of 4 processes (SIGKILL at a step; rank 0 too, with
ddlrun --torch-store) and finishes on the other 3, under ddlrun --keep-going, with the parameters of a reference run in which that
process left cleanly at the same step (the same membership, nobody dying); every survivor
ends with the same parameters. Rank 0 again under mpirun --enable-recovery, torch's store in
a process of its own (DDL_TORCH_STORE=process). Under a timeout.
"""

import json
import os
import re

import pytest

from conftest import REPO, run_ddlrun, run_mpirun

EXAMPLE = os.path.join(REPO, "examples", "elastic_train.py")
TOLERANCE = 1e-6  # the same sums in the same order: equal in practice

pytest.importorskip("torch", reason="torch is not installed in this Python")


def train(tmp_path, name, *extra, keep_going=False, torch_store=False, mpirun=False):
    out = tmp_path / f"{name}.json"
    command = [EXAMPLE, "--steps", "8", "--at-step", "3", "--json", str(out), *extra]
    if mpirun:  # Open MPI's --enable-recovery: the other ranks outlive a dead one
        log = run_mpirun(4, command, timeout=240, mpirun_args=["--enable-recovery"],
                         env={"DDL_TORCH_STORE": "process"})
    else:
        log = run_ddlrun(4, command, timeout=240, keep_going=keep_going, torch_store=torch_store)
    sums = re.findall(r"param checksum ([-+0-9.eE]+)", log)
    assert len(sums) == 3, log
    assert len(set(sums)) == 1, f"survivors disagree on the parameters: {sums}\n{log}"
    with open(out) as f:
        return json.load(f), log


# Rank 2 with torch's store in rank 0 (env://, ddlrun's default), and rank 0 itself with the
# store in ddlrun (--torch-store, as torchrun's agent hosts it): torch's own bookkeeping of a
# shrink (dist.shrink_group) connects to the store again, so its host must survive.
# Under mpirun no launcher of ddl's hosts the store: rank 0 starts it in a process of its own.
@pytest.mark.parametrize("victim,torch_store,mpirun", [(2, False, False), (0, True, False),
                                                       (0, True, True)])
def test_losing_a_rank_matches_the_reference_run(tmp_path, victim, torch_store, mpirun):
    killed, log = train(tmp_path, f"kill{victim}", "--kill-rank", str(victim), keep_going=True,
                        torch_store=torch_store, mpirun=mpirun)
    assert f"rank {victim}: killing myself" in log and "again from step 3" in log, log
    reference, _ = train(tmp_path, f"leave{victim}", "--leave-rank", str(victim),
                         torch_store=torch_store, mpirun=mpirun)
    assert killed["size"] == reference["size"] == 3
    worst = max(abs(a - b) for a, b in zip(killed["params"], reference["params"]))
    assert worst <= TOLERANCE, f"parameters differ by {worst} from the reference run"

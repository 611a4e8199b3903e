"""ddp_train.py's model and data under Hugging Face Accelerate, its gradients averaged by ddl.

    ddlrun -n 2 -- python examples/accelerate_train.py
    python -m torch.distributed.run --nproc-per-node 2 examples/accelerate_train.py
    mpirun -np 2 python examples/accelerate_train.py

(`accelerate launch --cpu` starts one process whatever --num_processes says: its multi-CPU
launch goes through mpirun, which the lines above use directly.)

On CPUs Accelerate chooses the backend itself: gloo (or mpi), and it refuses any other it is
given (`InitProcessGroupKwargs(backend="ddl")`: "Your assigned backend ddl is not available,
please use gloo"). It takes a default process group that already exists, though, so the
script makes it first: `dist.init_process_group("ddl")`, then `Accelerator(cpu=True)`.
Accelerate's state still says "gloo" (its own choice, not used); every collective goes to
the group made here (the script checks that it is ddl's). On GPUs Accelerate passes a backend
it is given through (`InitProcessGroupKwargs(backend="ddl")`; not tried here: no GPU).

Rank 0 then trains the same model in one process (ddp_train.py's run: the same global batch,
seeds and steps) and checks that the final loss is the same.
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_train  # noqa: E402  (its model and data; it imports ddl.torch, which registers "ddl")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    from accelerate import Accelerator

    # Before Accelerator(): on CPUs it would make a gloo group itself.
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    accelerator = Accelerator(cpu=True)
    if dist.get_backend() != args.backend:
        sys.exit(f"the default group runs over {dist.get_backend()}, not {args.backend}")
    rank, world = accelerator.process_index, accelerator.num_processes
    batch = 256
    local = batch // world
    x, y = ddp_train.make_dataset(args.steps * batch, 32, 10, 0)
    model = ddp_train.make_model(32, 512, 10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, opt = accelerator.prepare(model, opt)  # DistributedDataParallel over the group
    for step in range(args.steps):
        start = step * batch + rank * local
        loss = F.cross_entropy(model(x[start:start + local]), y[start:start + local])
        opt.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        opt.step()
    final = accelerator.reduce(loss.detach(), reduction="mean").item()  # the global batch's
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in model.parameters()))
    checksums = accelerator.gather(torch.tensor([checksum], dtype=torch.float64)).tolist()
    if rank == 0:
        ddp_train.check_against_one_process(
            f"accelerate over {dist.get_backend()}: {world} processes", final, checksums, args.steps)
    accelerator.wait_for_everyone()
    del model, opt
    accelerator.free_memory()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

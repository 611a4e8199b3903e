"""ddp_train.py's model and data under DeepSpeed's engine, its gradients averaged by ddl.

    ddlrun -n 2 -- python examples/deepspeed_train.py [--zero 0|1|2]
    python -m torch.distributed.run --nproc-per-node 2 examples/deepspeed_train.py
    mpirun -np 2 python examples/deepspeed_train.py

`deepspeed.init_distributed(dist_backend="ddl")` (DeepSpeed's documented way to choose the
backend) makes torch's default group over ddl; the engine's own collectives (the gradients'
allreduce at ZeRO stage 0, the reduce-scatters and allgathers of stages 1 and 2) go through
deepspeed.comm to that group. On CPUs DeepSpeed needs DS_ACCELERATOR=cpu, which the script
sets when it is unset.

Rank 0 then trains the same model in one process (ddp_train.py's run: the same global batch,
seeds and steps) and checks that the final loss is the same.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_train  # noqa: E402  (its model and data; it imports ddl.torch, which registers "ddl")

import deepspeed  # noqa: E402

GLOBAL_BATCH = 256


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2), help="ZeRO stage")
    args = p.parse_args(argv)
    deepspeed.init_distributed(dist_backend=args.backend)
    if dist.get_backend() != args.backend:
        sys.exit(f"DeepSpeed's group runs over {dist.get_backend()}, not {args.backend}")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = GLOBAL_BATCH // world
    x, y = ddp_train.make_dataset(args.steps * GLOBAL_BATCH, 32, 10, 0)
    model = ddp_train.make_model(32, 512, 10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    config = {"train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": local,
              "zero_optimization": {"stage": args.zero}, "steps_per_print": 10 ** 9,
              # ZeRO runs any torch optimizer, but asks that one it has not tested be allowed.
              "zero_allow_untested_optimizer": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    step_times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        start = step * GLOBAL_BATCH + rank * local  # this process's share, as ddp_train.py's
        loss = F.cross_entropy(engine(x[start:start + local]), y[start:start + local])
        engine.backward(loss)
        engine.step()
        step_times.append(time.perf_counter() - t0)
    final = loss.detach().clone()
    dist.all_reduce(final)
    final = final.item() / world  # the global batch's loss
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in engine.module.parameters()))
    checksums = [None] * world
    dist.all_gather_object(checksums, checksum)
    if rank == 0:
        print(f"median step {statistics.median(step_times) * 1e3:.2f} ms", flush=True)
        ddp_train.check_against_one_process(
            f"deepspeed zero {args.zero} over {dist.get_backend()}: {world} processes", final,
            checksums, args.steps)
    dist.barrier()
    engine.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

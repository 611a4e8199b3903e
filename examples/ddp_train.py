"""Data-parallel training of a small MLP on a synthetic classification task, over
torch.distributed's "ddl" backend (or gloo, to compare).

    ddlrun -n 4 -- python examples/ddp_train.py
    python -m torch.distributed.run --nproc-per-node 4 examples/ddp_train.py
    python -m torch.distributed.run --nproc-per-node 4 examples/ddp_train.py --backend gloo
    ddlrun -n 2 -- python examples/ddp_train.py --fsdp         # sharded with fully_shard
    python examples/ddp_train.py                               # one process

Every run sees the same data and the same global batch (--global-batch samples per step,
split evenly across the processes), so the loss curve does not depend on the number of
processes, up to float rounding: that is what tests/python/test_ddp_example.py checks.
"""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

try:
    import ddl.torch  # noqa: F401  registers the "ddl" backend (and reads ddlrun's/mpirun's env)
except ImportError:  # run from a checkout without installing: the package next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bindings", "python"))
    import ddl.torch  # noqa: F401


def make_dataset(n, features, classes, seed):
    """A fixed task: inputs from a Gaussian, labels from a random 'teacher' network, so that
    a student MLP can learn it but not instantly."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w1 = torch.randn(features, 64, generator=g) / features ** 0.5
    w2 = torch.randn(64, classes, generator=g) / 8
    y = (torch.tanh(x @ w1) @ w2).argmax(1)
    return x, y


def make_model(features, hidden, classes, seed):
    torch.manual_seed(seed)  # every process starts from the same weights
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--fsdp", action="store_true", help="shard with fully_shard instead of DDP")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--global-batch", type=int, default=256,
                   help="samples per step over all processes (a multiple of their number)")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    p.add_argument("--print-every", type=int, default=10)
    p.add_argument("--json", help="rank 0 writes the loss curve and step times here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    if args.global_batch % world:
        sys.exit(f"--global-batch {args.global_batch} is not a multiple of {world} processes")
    local = args.global_batch // world

    x, y = make_dataset(args.steps * args.global_batch, args.features, args.classes, args.seed)
    model = make_model(args.features, args.hidden, args.classes, args.seed + 1)
    if distributed and args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    elif distributed:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    losses, times = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        start = step * args.global_batch + rank * local  # this process's share of the batch
        xb, yb = x[start:start + local], y[start:start + local]
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP/FSDP average the gradients over the processes here
        opt.step()
        times.append(time.perf_counter() - t0)
        # The global batch's loss, for the curve (outside the timed step).
        g = loss.detach().clone()
        if distributed:
            dist.all_reduce(g)
            g /= world
        losses.append(g.item())
        if rank == 0 and args.print_every and (step % args.print_every == 0 or
                                               step == args.steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.6f}  step time "
                  f"{times[-1] * 1e3:.2f} ms", flush=True)

    # Every process must end with the same parameters (DDP) or the same full ones (FSDP).
    with torch.no_grad():
        params = [p.full_tensor() if hasattr(p, "full_tensor") else p
                  for p in model.parameters()]
        checksum = float(sum(p.double().sum() for p in params))
    steady = times[len(times) // 5:] or times  # leave out the first steps (warm-up)
    median_ms = statistics.median(steady) * 1e3
    print(f"rank {rank}: param checksum {checksum:.10e}", flush=True)
    if rank == 0:
        how = "fsdp" if args.fsdp else "ddp" if distributed else "single"
        print(f"{args.backend if distributed else 'none'} {how} x{world}: final loss "
              f"{losses[-1]:.6f}, median step time {median_ms:.2f} ms", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"backend": args.backend, "world": world, "fsdp": args.fsdp,
                           "losses": losses, "step_times_s": times,
                           "median_step_ms": median_ms, "checksum": checksum}, f)
    if distributed:
        # The model (DDP's reducer) holds the process group: freed first, the group ends in
        # destroy_process_group, not at interpreter exit, where torch 2.15's gloo aborts
        # (its worker thread frees tensors after finalization began).
        del model, opt
        gc.collect()
        dist.destroy_process_group()
    return losses, times


def check_against_one_process(label, final_loss, checksums, steps):
    """What the examples that train this model under a framework (accelerate_train.py,
    lightning_train.py, deepspeed_train.py, ray_train.py) check on their rank 0: every
    process ended with the same parameters, and the final loss is that of this file's own
    one-process run of as many steps (the same data, seeds and global batch). Prints `label`
    with what it found; exits with the difference if there is one."""
    print(f"{label}, final loss {final_loss:.6f}, param checksums "
          f"{', '.join('%.10e' % c for c in checksums)}", flush=True)
    if any(c != checksums[0] for c in checksums):
        sys.exit("the processes ended with different parameters")
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    try:
        losses, _ = main(["--steps", str(steps), "--print-every", "0"])
    finally:
        os.environ.update(saved)
    if not math.isclose(final_loss, losses[-1], rel_tol=1e-4, abs_tol=1e-5):
        sys.exit(f"final loss {final_loss} differs from the one-process run's {losses[-1]}")
    print("same final loss as one process: ok", flush=True)


if __name__ == "__main__":
    main()

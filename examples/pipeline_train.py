"""A two-stage pipeline over torch.distributed ("ddl", or gloo to compare): the even ranks run
the first half of an MLP, the odd ranks the second half and the loss. Each step splits the
batch into micro-batches: stage 0 sends each micro-batch's activations forward, stage 1 sends
the gradient of each back (GPipe's schedule; the sends are isend, so that none waits for a
receive its peer posts later). With 4 or more processes, pairs (0, 1), (2, 3), ... are
data-parallel replicas: each stage's gradients are all-reduced among the ranks of that stage.

    ddlrun -n 2 -- python examples/pipeline_train.py
    python -m torch.distributed.run --nproc-per-node 4 examples/pipeline_train.py --backend gloo
    python examples/pipeline_train.py                  # one process: both stages, no pipeline

The run checks itself: rank 0 also trains the whole model in one process on the whole global
batch and compares the loss of every step (the largest difference is printed; the run fails
past --tolerance). Rank 0 prints the median step time.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

try:
    import ddl.torch  # noqa: F401  registers the "ddl" backend
except ImportError:  # run from a checkout without installing: the package next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bindings", "python"))
    import ddl.torch  # noqa: F401

DTYPE = torch.float64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-per-pair", type=int, default=256)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--tolerance", type=float, default=1e-9)
    return p.parse_args()


def make_stages(args):
    torch.manual_seed(3)
    first = nn.Sequential(nn.Linear(32, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU()).to(DTYPE)
    second = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(),
                           nn.Linear(args.width, 8)).to(DTYPE)
    return first, second


def batch(pair, step, args):
    g = torch.Generator().manual_seed(10_000 * step + pair)
    x = torch.randn(args.batch_per_pair, 32, generator=g, dtype=DTYPE)
    y = torch.sin(x[:, :8] * 2)
    return x, y


def loss_of(out, y, global_batch):
    return ((out - y) ** 2).sum() / global_batch  # this micro-batch's share of the mean


def sgd(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


def pipeline_step(stage, model, x, y, args, rank, global_batch, stage_group, replicas):
    """One GPipe step on this rank's stage; returns this pair's loss (on stage 1, else 0).
    Sends are nonblocking (isend) and waited for at the end of the step: a blocking send of a
    large activation could wait for a receive the peer posts only after its own send, as
    MPI_Send may."""
    micro_x, micro_y = x.chunk(args.micro_batches), y.chunk(args.micro_batches)
    peer = rank + 1 if stage == 0 else rank - 1
    total = torch.zeros((), dtype=DTYPE)
    sends = []
    if stage == 0:
        outs = []
        for mx in micro_x:
            out = model(mx)
            outs.append(out)
            sends.append(dist.isend(out.detach(), peer))
        for out in outs:
            grad = torch.empty_like(out)
            dist.recv(grad, peer)
            out.backward(grad)
    else:
        for i, my in enumerate(micro_y):
            act = torch.empty(micro_x[i].shape[0], args.width, dtype=DTYPE)
            dist.recv(act, peer)
            act.requires_grad_()
            loss = loss_of(model(act), my, global_batch)
            loss.backward()
            total += loss.detach()
            sends.append(dist.isend(act.grad, peer))  # back while the next one arrives
    for s in sends:
        s.wait()
    if replicas > 1:
        for p in model.parameters():
            dist.all_reduce(p.grad, group=stage_group)
    sgd(model.parameters(), args.lr)
    return total


def main():
    args = parse_args()
    distributed = "WORLD_SIZE" in os.environ or "DDL_WORLD_SIZE" in os.environ
    torch.set_num_threads(1)
    first, second = make_stages(args)
    if not distributed:
        rank, world, pairs = 0, 1, 1
        losses, times = [], []
    else:
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        if world % 2:
            sys.exit(f"pipeline: needs an even number of processes (two stages), not {world}")
        pairs = world // 2
        stage, pair = rank % 2, rank // 2
        # Every rank makes both groups (new_group is collective), and uses its stage's.
        groups = [dist.new_group([r for r in range(world) if r % 2 == s]) for s in (0, 1)]
        model = first if stage == 0 else second
        losses, times = [], []
        for step in range(args.steps):
            start = time.perf_counter()
            x, y = batch(pair, step, args)
            total = pipeline_step(stage, model, x, y, args, rank, args.batch_per_pair * pairs,
                                  groups[stage], pairs)
            dist.all_reduce(total)  # every pair's loss: the global one
            times.append(time.perf_counter() - start)
            losses.append(total.item())
    if rank == 0:
        # Both stages in one process, on every pair's batch at once.
        ref_first, ref_second = make_stages(args)
        params = list(ref_first.parameters()) + list(ref_second.parameters())
        reference = []
        for step in range(args.steps):
            start = time.perf_counter()
            parts = [batch(p, step, args) for p in range(pairs)]
            x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            loss = loss_of(ref_second(ref_first(x)), y, x.shape[0])
            loss.backward()
            sgd(params, args.lr)
            reference.append(loss.item())
            if not distributed:
                times.append(time.perf_counter() - start)
        losses = losses or reference
        diff = max(abs(a - b) for a, b in zip(losses, reference))
        print(f"pipeline: {world} processes over {args.backend if distributed else 'none'}: "
              f"loss {losses[0]:.6f} -> {losses[-1]:.6f}; largest difference from one process "
              f"{diff:.3g}; median step {statistics.median(times[1:] or times) * 1e3:.2f} ms",
              flush=True)
        if diff > args.tolerance:
            print(f"pipeline: FAILED: the loss differs from the one-process run by {diff:.3g} "
                  f"(> {args.tolerance})", flush=True)
            sys.exit(1)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A mixture-of-experts layer with expert parallelism over torch.distributed ("ddl", or gloo
to compare): each process holds `--experts-per-rank` experts, a replicated gate routes every
token to one expert (top-1), all_to_all_single with uneven split sizes carries the tokens to
the experts' processes and the results back, and autograd carries the gradients the same way.

    ddlrun -n 2 -- python examples/moe_train.py
    python -m torch.distributed.run --nproc-per-node 4 examples/moe_train.py --backend gloo
    python examples/moe_train.py                      # one process: every expert local

The run checks itself: rank 0 also trains the same model on the whole global batch in one
process (the same seeds, all experts local) and compares the loss of every step; the largest
difference is printed and the run fails if it exceeds --tolerance. Rank 0 prints the median
step time.
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

DTYPE = torch.float64  # routing by argmax must not flip between the two runs


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tokens-per-rank", type=int, default=256)
    p.add_argument("--model", type=int, default=64, help="token width")
    p.add_argument("--hidden", type=int, default=128, help="expert hidden width")
    p.add_argument("--experts-per-rank", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--tolerance", type=float, default=1e-9)
    return p.parse_args()


def make_experts(count, first, args):
    """Experts first .. first+count-1, each seeded by its global index (same in every run)."""
    experts = []
    for e in range(first, first + count):
        torch.manual_seed(1000 + e)
        experts.append(nn.Sequential(nn.Linear(args.model, args.hidden), nn.GELU(),
                                     nn.Linear(args.hidden, args.model)).to(DTYPE))
    return nn.ModuleList(experts)


def make_gate(n_experts, args):
    torch.manual_seed(7)
    return nn.Linear(args.model, n_experts).to(DTYPE)


def batch(rank, step, args):
    """Rank `rank`'s tokens and targets at `step` (the global batch is every rank's, in order)."""
    g = torch.Generator().manual_seed(100_000 * step + rank)
    x = torch.randn(args.tokens_per_rank, args.model, generator=g, dtype=DTYPE)
    target = torch.tanh(x.roll(1, dims=1)) * 0.5
    return x, target


class AllToAll(torch.autograd.Function):
    """all_to_all_single with uneven splits that autograd goes through: the gradient of the
    received rows goes back to their senders by the reverse exchange."""

    @staticmethod
    def forward(ctx, x, recv_splits, send_splits, group):
        ctx.splits, ctx.group = (recv_splits, send_splits), group
        out = x.new_empty(sum(recv_splits), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv_splits, send_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        recv_splits, send_splits = ctx.splits
        back = grad.new_empty(sum(send_splits), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), send_splits, recv_splits, group=ctx.group)
        return back, None, None, None


def moe_forward(x, gate, experts, first_expert, per_rank, world, group):
    """The layer: x + weight * expert(x), expert and weight from the gate's top-1 choice.
    With world > 1 the tokens travel to their expert's process and back."""
    probs = torch.softmax(gate(x), dim=-1)
    weight, choice = probs.max(dim=-1)
    owner = choice // per_rank
    order = torch.argsort(owner, stable=True)  # tokens grouped by destination process
    send_counts = torch.bincount(owner, minlength=world)
    if world > 1:
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        tokens = AllToAll.apply(x[order], recv_splits, send_splits, group)
        which = torch.empty(sum(recv_splits), dtype=choice.dtype)
        dist.all_to_all_single(which, choice[order], recv_splits, send_splits, group=group)
    else:
        tokens, which = x[order], choice[order]
    out = torch.zeros_like(tokens)
    for local, expert in enumerate(experts):
        mask = which == first_expert + local
        if mask.any():
            out = out.index_put((mask.nonzero(as_tuple=True)[0],), expert(tokens[mask]))
    if world > 1:
        out = AllToAll.apply(out, send_splits, recv_splits, group)
    back = torch.empty_like(out)
    back = back.index_copy(0, order, out)  # undo the grouping
    return x + weight.unsqueeze(1) * back


def train(rank, world, args, group, batches_of):
    """Steps of SGD; returns the loss of every step (the global one) and the step times."""
    per_rank = args.experts_per_rank
    n_experts = per_rank * max(world, 1)
    gate = make_gate(n_experts, args)
    first = rank * per_rank if world > 1 else 0
    experts = make_experts(per_rank if world > 1 else n_experts, first, args)
    params = list(gate.parameters()) + list(experts.parameters())
    global_tokens = args.tokens_per_rank * args.world
    losses, times = [], []
    for step in range(args.steps):
        start = time.perf_counter()
        x, target = batches_of(step)
        y = moe_forward(x, gate, experts, first, per_rank, world, group)
        loss = ((y - target) ** 2).sum() / global_tokens  # this rank's share of the mean
        for p in params:
            p.grad = None
        loss.backward()
        total = loss.detach().clone()
        if world > 1:
            # The gate is replicated: its gradient is the sum of every rank's share. The
            # experts' gradients came back through the all-to-all's backward already.
            for p in gate.parameters():
                dist.all_reduce(p.grad, group=group)
            dist.all_reduce(total, group=group)
        with torch.no_grad():
            for p in params:
                p -= args.lr * p.grad
        times.append(time.perf_counter() - start)
        losses.append(total.item())
    return losses, times


def main():
    args = parse_args()
    distributed = "WORLD_SIZE" in os.environ or "DDL_WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    args.world = world
    torch.set_num_threads(1)
    losses, times = train(rank, world if distributed else 1, args, None,
                          lambda step: batch(rank, step, args))
    if rank == 0:
        # The same model in one process on the whole global batch.
        def whole(step):
            parts = [batch(r, step, args) for r in range(world)]
            return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        solo = argparse.Namespace(**vars(args))
        solo.experts_per_rank = args.experts_per_rank * world
        reference, _ = train(0, 1, solo, None, whole)
        diff = max(abs(a - b) for a, b in zip(losses, reference))
        print(f"moe: {world} processes over {args.backend if distributed else 'none'}: loss "
              f"{losses[0]:.6f} -> {losses[-1]:.6f}; largest difference from one process "
              f"{diff:.3g}; median step {statistics.median(times[1:] or times) * 1e3:.2f} ms",
              flush=True)
        if diff > args.tolerance:
            print(f"moe: FAILED: the loss differs from the one-process run by {diff:.3g} "
                  f"(> {args.tolerance})", flush=True)
            sys.exit(1)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

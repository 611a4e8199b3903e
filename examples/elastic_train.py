"""Data-parallel training that loses a process and goes on, over torch.distributed's "ddl"
backend, with no checkpoint on disk and no relaunch.

    ddlrun --keep-going -n 4 -- python examples/elastic_train.py --kill-rank 2 --at-step 5
    ddlrun -n 4 -- python examples/elastic_train.py --leave-rank 2 --at-step 5   # reference

At step --at-step, rank R kills itself with SIGKILL at the start of the step (--kill-rank), or
leaves the job cleanly (--leave-rank: the reference run, with the same membership and nobody
dying). A process can also be killed from outside at any moment. The survivors' collective
fails (a DistBackendError naming the dead rank); they shrink the group with
ddl.torch.shrink_group (ddl's fault-tolerant agreement finds who died, the same on every
survivor), go back to the last step that every survivor finished (an in-memory copy of the
parameters and the optimizer's state, kept for the last two steps), rebuild DDP on the shrunk
group, share the data out again over the survivors and finish. The global batch stays the
same, so the final parameters equal the reference run's to float rounding
(tests/python/test_elastic_example.py checks it).
"""

import argparse
import copy
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import ddl.torch
except ImportError:  # run from a checkout without installing: the package next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bindings", "python"))
    import ddl.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_train import make_dataset, make_model  # noqa: E402  the same task and model


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--global-batch", type=int, default=48,
                   help="samples per step over all processes (a multiple of 4 and of 3 keeps "
                        "DDP's mean the global mean before and after losing one of 4)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--kill-rank", type=int, default=-1, help="this rank dies (SIGKILL) ...")
    p.add_argument("--leave-rank", type=int, default=-1, help="... or leaves cleanly ...")
    p.add_argument("--at-step", type=int, default=5, help="... at the start of this step")
    p.add_argument("--json", help="the surviving rank 0 writes its parameters here")
    return p.parse_args(argv)


def snapshot(model, opt):
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            copy.deepcopy(opt.state_dict()))


def restore(model, opt, saved):
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("ddl")
    me = dist.get_rank()  # this process's rank in the job as started: its name in the logs
    x, y = make_dataset(args.global_batch * args.steps, 32, 10, seed=1)
    model = make_model(32, 64, 10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ddp = DDP(model)
    saved = {0: snapshot(model, opt)}
    step = 0
    while step < args.steps:
        if step == args.at_step and me in (args.kill_rank, args.leave_rank):
            if me == args.kill_rank:
                # Wall-clock stamps (here and when the survivors go on): kill -> next step.
                print(f"rank {me}: killing myself at step {step} at {time.time():.3f}",
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            print(f"rank {me}: leaving at step {step}", flush=True)
            return 0
        if step == args.at_step and args.leave_rank >= 0 and dist.get_world_size() > 1:
            # The reference: the same membership change, agreed without a failure.
            leaving = args.leave_rank  # the group is still the original one here
            dist.shrink_group([leaving])
            ddp = DDP(model)
        try:
            size, rank = dist.get_world_size(), dist.get_rank()
            share = args.global_batch // size
            first = step * args.global_batch + rank * share
            xb, yb = x[first:first + share], y[first:first + share]
            opt.zero_grad()
            F.cross_entropy(ddp(xb), yb).backward()  # DDP averages the gradients
            opt.step()
            step += 1
            saved[step] = snapshot(model, opt)
            saved.pop(step - 2, None)
        except RuntimeError as e:  # DistBackendError, or DDP's wrapping of it
            print(f"rank {me}: step {step} failed at {time.time():.3f}: {str(e).splitlines()[0]}",
                  flush=True)
            start = time.monotonic()
            ddl.torch.shrink_group()  # the default group, shrunk, becomes the default
            # Every survivor goes back to the last step that all of them finished.
            done = torch.tensor([step])
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            step = int(done.item())
            restore(model, opt, saved[step])
            ddp = DDP(model)
            print(f"rank {me}: now rank {dist.get_rank()} of {dist.get_world_size()}, "
                  f"again from step {step} ({time.monotonic() - start:.3f} s) at "
                  f"{time.time():.3f}", flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    print(f"rank {me}: done, rank {dist.get_rank()} of {dist.get_world_size()}, "
          f"param checksum {flat.double().sum().item():.10e}", flush=True)
    if args.json and dist.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump({"size": dist.get_world_size(), "params": flat.tolist()}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

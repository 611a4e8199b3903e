#!/usr/bin/env python3
"""ddl's direct op (torch.ops.ddl.all_reduce_, and its wrapper ddl.torch.all_reduce_), torch's
path to the ddl backend in layers (the backend's binding, the process group's binding with the
dispatcher) and dist.all_reduce on it, against DeepSpeed's CPU shared-memory allreduce
(deepspeed.comm.inference_all_reduce, the op tensor-parallel inference calls once per layer
per token), in place, float32, in one job of 2 processes: every case in every round, the
order alternating, medians over rounds of the per-call mean.

    DS_ACCELERATOR=cpu python -m torch.distributed.run --nproc-per-node 2 \\
        bench/torch_direct_vs_deepspeed.py [--rounds 7]

Needs deepspeed importable beside torch (it is not a dependency of ddl; see bench/one-host.md
for how it was installed) and ddl's package (PYTHONPATH=bindings/python, DDL_BUILD_DIR=build
from a checkout). Without deepspeed the DeepSpeed column is "-".
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

import ddl.torch

SIZES = [8, 4096, 65536, 1 << 20, 32 << 20]


def deepspeed_allreduce():
    """deepspeed.comm.inference_all_reduce over the process group already made, or None."""
    try:
        import deepspeed
        import deepspeed.comm as ds_comm
    except ImportError:
        return None
    deepspeed.init_distributed(dist_backend="gloo")  # adopts the existing default group
    return lambda t: ds_comm.inference_all_reduce(t)


def timed(fn, t, calls):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn(t)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    dist.init_process_group("ddl")
    rank = dist.get_rank()
    handle = ddl.torch.direct_handle()
    # torch's path to the backend in layers, to tell what each costs: the process group's
    # binding (pybind, the dispatcher's c10d::allreduce_, the backend) and the backend's own
    # binding (pybind and the backend: no dispatcher).
    group = dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))
    opts = dist.AllreduceOptions()
    opts.asyncOp = False  # as dist.all_reduce(t) sets it: the blocking path
    cases = {
        "torch.ops.ddl.all_reduce_": lambda t: torch.ops.ddl.all_reduce_(t, handle, 0),
        "ddl.torch.all_reduce_": ddl.torch.all_reduce_,
        "backend.allreduce": lambda t: backend.allreduce([t], opts),
        "group.allreduce": lambda t: group.allreduce([t], opts),
        "dist.all_reduce (ddl)": dist.all_reduce,
    }
    ds = deepspeed_allreduce()
    if ds:
        cases["DeepSpeed inference_all_reduce"] = ds
    rows = []
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4))
        calls = max(5, min(3000, int(2e8 // max(nbytes, 1) // 100)))
        samples = {name: [] for name in cases}
        for r in range(args.rounds):
            names = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in names:
                samples[name].append(timed(cases[name], t, calls))
        rows.append((nbytes, {name: statistics.median(s) for name, s in samples.items()}))
    if rank == 0:
        names = list(cases)
        print(f"torch {torch.__version__}, {dist.get_world_size()} processes, {args.rounds} "
              f"rounds, medians of the per-call mean (us); DS_ACCELERATOR="
              f"{os.environ.get('DS_ACCELERATOR', '')}")
        print(f"{'bytes':>10}  " + "  ".join(f"{n:>30}" for n in names))
        for nbytes, med in rows:
            ds_us = med.get("DeepSpeed inference_all_reduce")
            cells = []
            for n in names:
                ratio = f" ({ds_us / med[n]:.2f}x)" if ds_us and n != "DeepSpeed inference_all_reduce" \
                    else ""
                cells.append(f"{med[n]:>21.2f}{ratio:>9}")
            print(f"{nbytes:>10}  " + "  ".join(cells))
        print("(x: DeepSpeed's time / this one's; > 1: faster than DeepSpeed)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Does a tag or a receive from any source cost anything? A torch send/recv ping-pong
between 2 processes on the ddl backend: tag 0, tag 3, and every receive from any source,
alternating case by case within each round (the order reversed every other round), medians
over rounds of the half round trip.

    python -m torch.distributed.run --nproc-per-node 2 bench/torch_p2p_tags.py [BYTES ...]

(from a checkout: PYTHONPATH=bindings/python and DDL_BUILD_DIR=build as scripts/python-env.sh
sets them). Default sizes: 8 B and 64 KiB.
"""

import statistics
import sys
import time

import torch
import torch.distributed as dist

import ddl.torch  # noqa: F401  registers "ddl"

CASES = {"tag 0": (0, False), "tag 3": (3, False), "any source": (0, True)}
ROUNDS, CALLS = 15, 2000


def pingpong(rank, t, tag, any_source):
    if rank == 0:
        dist.send(t, 1, tag=tag)
        dist.recv(t, None if any_source else 1, tag=tag)
    else:
        dist.recv(t, None if any_source else 0, tag=tag)
        dist.send(t, 0, tag=tag)


def main():
    dist.init_process_group("ddl")
    rank = dist.get_rank()
    assert dist.get_world_size() == 2, "run it with 2 processes"
    sizes = [int(a) for a in sys.argv[1:]] or [8, 65536]
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4))
        times = {name: [] for name in CASES}
        for r in range(ROUNDS):
            names = list(CASES) if r % 2 == 0 else list(reversed(CASES))
            for name in names:
                dist.barrier()
                start = time.perf_counter()
                for _ in range(CALLS):
                    pingpong(rank, t, *CASES[name])
                times[name].append((time.perf_counter() - start) / CALLS / 2 * 1e6)
        if rank == 0:
            base = statistics.median(times["tag 0"])
            for name, samples in times.items():
                median = statistics.median(samples)
                print(f"{nbytes:>8} B  {name:<10}  {median:6.1f} us  (min {min(samples):.1f}, "
                      f"{median / base:.2f}x tag 0)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ddl's allgatherv and reduce_scatterv (uneven counts) against Open MPI's MPI_Allgatherv and
MPI_Reduce_scatter, both from Python (ddl's package; mpi4py), alternating in one run.

    python bench/v_forms_vs_mpi.py --mpi-python /path/to/python-with-mpi4py
    python bench/v_forms_vs_mpi.py -n 2 --rounds 7 --sizes 4K,1M,16M

Rank i's block has (i + 1) shares of the total (float32), so no two ranks' blocks are alike.
Each size: a few warm-up calls, then calls timed from a barrier to the slowest rank's end
(the mean of --iters calls); every result is checked once. Each round runs ddl (ddlrun) and
MPI (mpirun --bind-to none) in turn, the first alternating; the table has each median over
rounds and MPI's over ddl's (> 1: ddl faster).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CALLS = ["allgatherv", "reduce_scatterv"]


def size_of(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nprocs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--sizes", default="4K,1M,16M", help="total bytes gathered (float32)")
    p.add_argument("--mpi-python", default=sys.executable,
                   help="an interpreter with mpi4py and numpy (for the MPI side)")
    p.add_argument("--worker", choices=["ddl", "mpi"], help=argparse.SUPPRESS)
    return p.parse_args()


def layout(total_bytes, n):
    """Counts with rank i holding (i + 1) shares of total_bytes of float32."""
    elements = max(n * (n + 1) // 2, total_bytes // 4)
    share = elements // (n * (n + 1) // 2)
    return [share * (i + 1) for i in range(n)]


def worker(args):
    import numpy as np
    if args.worker == "ddl":
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        import ddl
        comm = ddl.init()
        rank, n, barrier = comm.rank, comm.size, comm.barrier

        def allgatherv(send, recv, counts):
            comm.allgatherv(send, recv, counts)

        def reduce_scatterv(send, recv, counts):
            comm.reduce_scatterv(send, recv, counts)
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, n, barrier = comm.Get_rank(), comm.Get_size(), comm.Barrier

        def allgatherv(send, recv, counts):
            comm.Allgatherv(send, [recv, counts])

        def reduce_scatterv(send, recv, counts):
            comm.Reduce_scatter(send, recv, counts, op=MPI.SUM)
    results = {}
    for total in [size_of(s) for s in args.sizes.split(",")]:
        counts = layout(total, n)
        at = sum(counts[:rank])
        whole = np.arange(sum(counts), dtype=np.float32) % 1000
        mine = whole[at:at + counts[rank]].copy()
        gathered = np.empty(sum(counts), dtype=np.float32)
        reduced = np.empty(counts[rank], dtype=np.float32)
        calls = {"allgatherv": lambda: allgatherv(mine, gathered, counts),
                 "reduce_scatterv": lambda: reduce_scatterv(whole, reduced, counts)}
        calls["allgatherv"]()
        calls["reduce_scatterv"]()
        assert np.array_equal(gathered, whole), "allgatherv: wrong result"
        assert np.array_equal(reduced, mine * n), "reduce_scatterv: wrong result"
        for name in CALLS:
            for _ in range(3):
                calls[name]()
            barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                calls[name]()
            barrier()
            results[f"{name} {total}"] = (time.perf_counter() - start) / args.iters
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)


def run_side(side, args):
    script = os.path.abspath(__file__)
    flags = ["--worker", side, "--sizes", args.sizes, "--iters", str(args.iters)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if side == "ddl":
        build = os.environ.get("DDL_BUILD_DIR") or os.path.join(REPO, "build")
        env["DDL_BUILD_DIR"] = build
        cmd = [os.path.join(build, "tools", "ddlrun", "ddlrun"), "-n", str(args.nprocs), "--",
               sys.executable, script] + flags
    else:
        cmd = ["mpirun", "-np", str(args.nprocs), "--bind-to", "none", "--allow-run-as-root",
               "--oversubscribe", args.mpi_python, script] + flags
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=600).stdout
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.exit(f"v_forms_vs_mpi: the {side} run gave no result:\n{out}")


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    samples = {"ddl": [], "mpi": []}
    for r in range(args.rounds):
        for side in (["ddl", "mpi"] if r % 2 == 0 else ["mpi", "ddl"]):
            samples[side].append(run_side(side, args))
    print(f"# {args.nprocs} processes, {args.rounds} rounds alternating, {args.iters} calls "
          f"each; medians")
    print(f"| call | total | ddl | Open MPI | MPI / ddl |\n|---|---:|---:|---:|---:|")
    for key in samples["ddl"][0]:
        d = statistics.median(s[key] for s in samples["ddl"])
        m = statistics.median(s[key] for s in samples["mpi"])
        name, total = key.split()
        print(f"| {name} | {int(total) >> 10} KB | {d * 1e6:.1f} us | {m * 1e6:.1f} us | "
              f"{m / d:.2f} |")


if __name__ == "__main__":
    main()

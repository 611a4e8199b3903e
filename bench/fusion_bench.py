#!/usr/bin/env python3
"""1,000 allreduces of 4 KB (float32, in place) through ddl's Python package: one by one
against fused (issue 15, item 2: "fused >= 5x faster than one by one").

    python bench/fusion_bench.py                  # 2 processes (ddlrun), 11 rounds
    python bench/fusion_bench.py -n 4 --rounds 5 --count 1000 --bytes 4096 -J out.json

Cases, each the whole batch of tensors, timed from a barrier to the slowest rank's end:
  blocking    comm.allreduce(x) for each tensor, one after another;
  async       comm.allreduce(x, async_=True) for each, then wait() for all (ddl's queue:
              one handoff to ddl's progress thread per tensor, nothing fused);
  group       every comm.allreduce(x) inside one `with ddl.group():` (ddl's C groups fuse
              same-type allreduces of up to DDL_FUSION_BYTES, 64 KiB, into one buffer);
  fuser       ddl.Fuser.allreduce_async(x) for each (unnamed: matched by order), then wait
              for all: negotiated each cycle by the background thread, packed into one
              buffer per cycle (ddl.fusion);
  fuser named the same with a name per tensor, the same names every round (as a training
              step's gradients): after the first round the names' slots are known.
Every case checks its results. The order of the cases rotates every round; the table has
medians over rounds, and the ratio of each to the fuser's median. Each fuser case makes its
own Fuser (untimed: a split of the communicator, one untimed batch to warm it up) and
closes it after: a Fuser's thread runs a negotiation every cycle even when idle, and would
otherwise take time from the other cases.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))

CASES = ["blocking", "async", "group", "fuser", "fuser named"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nprocs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--count", type=int, default=1000, help="tensors per batch")
    p.add_argument("--bytes", type=int, default=4096, help="bytes per tensor (float32)")
    p.add_argument("--cycle-ms", type=float, default=None,
                   help="the Fuser's cycle (default: DDL_CYCLE_TIME_MS or 1 ms)")
    p.add_argument("-J", "--json", help="write every sample here (rank 0)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def launch(args):
    """Starts this script as a job of args.nprocs processes under ddlrun."""
    build = os.environ.get("DDL_BUILD_DIR") or os.path.join(REPO, "build")
    ddlrun = os.path.join(build, "tools", "ddlrun", "ddlrun")
    if not os.access(ddlrun, os.X_OK):
        sys.exit(f"fusion_bench: {ddlrun} is not built (scripts/build.sh, or set DDL_BUILD_DIR)")
    env = dict(os.environ, DDL_BUILD_DIR=build)
    cmd = [ddlrun, "-n", str(args.nprocs), "--", sys.executable,
           os.path.abspath(__file__), "--worker"] + sys.argv[1:]
    return subprocess.call(cmd, env=env)


class Worker:
    def __init__(self, args):
        import numpy as np
        import ddl
        self.np, self.ddl, self.args = np, ddl, args
        self.comm = ddl.init()
        self.fuser = None
        self.stats = collections.Counter()
        n = max(1, args.bytes // 4)
        self.xs = [np.ones(n, dtype=np.float32) for _ in range(args.count)]
        self.names = [f"grad.{i}" for i in range(args.count)]
        self.samples = {c: [] for c in CASES}

    def run_case(self, case):
        np, comm, xs = self.np, self.comm, self.xs
        if case.startswith("fuser"):
            self.fuser = self.ddl.Fuser(comm, cycle_ms=self.args.cycle_ms)
            self.submit_all(case)  # warm-up: the names get their slots, buffers are made
        for x in xs:
            x.fill(1.0)
        comm.barrier()
        start = time.perf_counter()
        if case == "blocking":
            for x in xs:
                comm.allreduce(x)
        elif case == "async":
            reqs = [comm.allreduce(x, async_=True) for x in xs]
            for r in reqs:
                r.wait()
        elif case == "group":
            with self.ddl.group():
                for x in xs:
                    comm.allreduce(x)
        else:
            self.submit_all(case)
        elapsed = np.array([time.perf_counter() - start])
        if self.fuser is not None:
            self.stats.update(self.fuser.stats)
            self.fuser.close()
            self.fuser = None
        comm.allreduce(elapsed, op="max")  # the slowest rank's time
        size = comm.size
        for i in (0, len(xs) - 1):
            assert np.all(xs[i] == size), f"{case}: tensor {i} holds {xs[i][:2]}, not {size}"
        return float(elapsed[0])

    def submit_all(self, case):
        fuser, xs = self.fuser, self.xs
        if case == "fuser":
            handles = [fuser.allreduce_async(x) for x in xs]
        else:
            handles = [fuser.allreduce_async(x, name=nm) for x, nm in zip(xs, self.names)]
        for h in handles:
            h.wait()

    def main(self):
        args = self.args
        load_before = os.getloadavg()
        for rnd in range(args.rounds):
            k = rnd % len(CASES)
            for case in CASES[k:] + CASES[:k]:
                self.samples[case].append(self.run_case(case))
        load_after = os.getloadavg()
        if self.comm.rank == 0:
            self.report(load_before, load_after, dict(self.stats))
        self.comm.destroy()

    def report(self, load_before, load_after, stats):
        args = self.args
        med = {c: statistics.median(v) for c, v in self.samples.items()}
        print(f"command: python bench/fusion_bench.py {' '.join(sys.argv[2:])}".rstrip())
        probe = self.ddl.fusion
        cycle = args.cycle_ms if args.cycle_ms is not None else \
            probe._env_float("DDL_CYCLE_TIME_MS", probe.DEFAULT_CYCLE_MS)
        fusion = probe._env_bytes("DDL_FUSION_BYTES", probe.DEFAULT_FUSION_BYTES)
        print(f"{args.count} allreduces of {args.bytes} B float32 in place, {self.comm.size} "
              f"ranks, {args.rounds} rounds; Fuser: cycle {cycle:g} ms, buffers of up to "
              f"{fusion} B")
        print(f"1-min load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
        print(f"{'case':<12} {'median':>10} {'min':>10} {'max':>10} {'per tensor':>11} "
              f"{'/ fuser':>8}")
        for c in CASES:
            v = self.samples[c]
            print(f"{c:<12} {med[c] * 1e3:8.2f} ms {min(v) * 1e3:7.2f} ms {max(v) * 1e3:7.2f} ms "
                  f"{med[c] / args.count * 1e6:8.2f} us {med[c] / med['fuser']:7.2f}x")
        cycles = stats["cycles"]
        print(f"Fusers over the run (warm-ups included): {stats['tensors']} tensors in "
              f"{stats['allreduces']} allreduces ({stats['fused_allreduces']} fused) over "
              f"{cycles} cycles")
        ratio = med["blocking"] / med["fuser"]
        verdict = "MET" if ratio >= 5 else "MISSED"
        print(f"target: fused >= 5x faster than one by one (blocking): {ratio:.2f}x -> {verdict}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "samples": self.samples, "medians": med,
                           "ratio_blocking_over_fuser": ratio, "verdict": verdict,
                           "fuser_stats": stats, "load": [load_before, load_after],
                           "ranks": self.comm.size}, f, indent=1)


def main():
    args = parse_args()
    if not args.worker:
        sys.exit(launch(args))
    Worker(args).main()


if __name__ == "__main__":
    main()

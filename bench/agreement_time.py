#!/usr/bin/env python3
"""What an agreement costs without failures: `ddl_comm_agree` (`comm.agree`) timed on N ranks
of this host, two libraries alternating round by round (say, the chain's and the leaders'),
medians over rounds of each round's median call (rank 0's clock; every rank leaves the call
within a latency of the others).

    python3 bench/agreement_time.py --ranks 2,4,8,16 --rounds 5 --calls 200 \\
        --library new=build/libddl.so.0 --library old=/tmp/oldbuild/libddl.so.0

(PYTHONPATH=bindings/python; ddlrun from --ddlrun, default build/bin/ddlrun.) Ranks beyond
the cores share them: that is part of what the agreement meets on a crowded node.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(calls):
    import ddl

    comm = ddl.init()
    for _ in range(10):  # warm: connections made, pages touched
        comm.agree(1)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        comm.agree(1)
        times.append(time.perf_counter() - start)
    if comm.rank == 0:
        print(f"median_us {statistics.median(times) * 1e6:.1f}", flush=True)
    comm.destroy()


def one_run(ddlrun, ranks, calls, library, timeout):
    env = dict(os.environ, DDL_LIBRARY=library)
    cmd = [ddlrun, "-n", str(ranks), "--", sys.executable, os.path.abspath(__file__),
           "--worker", "--calls", str(calls)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    for line in out.stdout.splitlines():
        if line.startswith("median_us "):
            return float(line.split()[1])
    raise RuntimeError(f"{' '.join(cmd)} (DDL_LIBRARY={library}) printed no time:\n"
                       f"{out.stdout}\n{out.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--ranks", default="2,4,8,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--library", action="append", default=[],
                        help="NAME=PATH of a libddl.so.0 (repeat; default: build's)")
    parser.add_argument("--ddlrun", default=os.path.join(HERE, "..", "build", "bin", "ddlrun"))
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    if args.worker:
        return worker(args.calls)
    libraries = [entry.split("=", 1) for entry in args.library] or [
        ["build", os.path.join(HERE, "..", "build", "libddl.so.0")]]
    names = [name for name, _ in libraries]
    print(f"| ranks | {' | '.join(names)} |")
    print(f"|---:|{'---:|' * len(names)}")
    for ranks in [int(r) for r in args.ranks.split(",")]:
        medians = {name: [] for name in names}
        for round_index in range(args.rounds):
            order = libraries if round_index % 2 == 0 else list(reversed(libraries))
            for name, path in order:
                medians[name].append(one_run(args.ddlrun, ranks, args.calls, path, args.timeout))
        cells = []
        for name in names:
            values = medians[name]
            cells.append(f"{statistics.median(values):.1f} us ({min(values):.1f}-{max(values):.1f})")
        print(f"| {ranks} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())

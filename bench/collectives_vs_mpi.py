#!/usr/bin/env python3
"""Every collective of ddl next to Open MPI's, on this machine, in one command.

For each rank count P of -p in turn and each collective of -C (allreduce, broadcast,
allgather, reduce_scatter, barrier, alltoall, reduce, gather, scatter, sendrecv, scan,
exscan), runs `ddlrun
-n P ddl_perf -C NAME` and `mpirun -np P mpi_allreduce -C NAME` (ob1/vader, MPI_Allreduce,
MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Barrier, MPI_Alltoall, MPI_Reduce,
MPI_Gather, MPI_Scatter, MPI_Sendrecv, MPI_Scan, MPI_Exscan; rooted calls at root 0) alternately for R rounds, with the same flags and the
same driver (tools/ddl_perf/perf_driver.cc: mean time per iteration after a barrier, maximum
across ranks). The order of the libraries flips every round and the collectives interleave,
so that slow drift of the machine hits every pair alike. Per collective and size it prints the
median out-of-place time of each library, the ratio ddl/MPI and a verdict (ok: ddl <= MPI),
then a summary: per collective and rank count, the worst ratio and every size where ddl is
slower.

It reuses bench/allreduce_vs_mpi.py's build, launch and timing helpers (same iterations per
size, same process handling, same failure messages). Results go to
bench/results/<timestamp>-collectives-p<P>.md and .json (git-ignored).

  python3 bench/collectives_vs_mpi.py                    # 2 and 4 ranks, 8 B .. 64 MB, 3 rounds
  python3 bench/collectives_vs_mpi.py --quick -p 2       # a few minutes
  python3 bench/collectives_vs_mpi.py -C broadcast,allgather -p 2,4 -b 8 -e 16M
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce_vs_mpi as common  # noqa: E402  (the helpers this bench shares)

COLLECTIVES = ["allreduce", "broadcast", "allgather", "reduce_scatter", "barrier",
               "alltoall", "reduce", "gather", "scatter", "sendrecv", "scan", "exscan"]
MPI_NAMES = {"allreduce": "MPI_Allreduce", "broadcast": "MPI_Bcast", "allgather": "MPI_Allgather",
             "reduce_scatter": "MPI_Reduce_scatter_block", "barrier": "MPI_Barrier",
             "alltoall": "MPI_Alltoall", "reduce": "MPI_Reduce", "gather": "MPI_Gather",
             "scatter": "MPI_Scatter", "sendrecv": "MPI_Sendrecv (ring: to r+1, from r-1)",
             "scan": "MPI_Scan", "exscan": "MPI_Exscan"}
# A barrier moves no data: one size, many iterations.
BARRIER_ITERS = 20000


def parse_collectives(text):
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in COLLECTIVES]
    if not names or unknown:
        raise argparse.ArgumentTypeError("unknown collective %r (known: %s)" % (
            ",".join(unknown) or text, ", ".join(COLLECTIVES)))
    return names


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-p", "--ranks", type=common.parse_ranks, default=[2, 4],
                   help="rank counts to run in turn (default 2,4)")
    p.add_argument("-C", "--collectives", type=parse_collectives, default=list(COLLECTIVES),
                   help="comma-separated, default all: " + ",".join(COLLECTIVES))
    p.add_argument("-b", "--min-bytes", type=common.parse_size, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--max-bytes", type=common.parse_size, default=64 << 20,
                   help="largest size (default 64M)")
    p.add_argument("-f", "--factor", type=int, default=2, help="size step factor (default 2)")
    p.add_argument("-r", "--rounds", type=int, default=3, help="runs of each library per collective (default 3)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations for sizes >= --split (default 20)")
    p.add_argument("--small-iters", type=int, default=200, help="timed iterations below --split (default 200)")
    p.add_argument("--split", type=common.parse_size, default=1 << 20, help="default 1M")
    p.add_argument("--tiny-iters", type=int, default=2000,
                   help="timed iterations below --tiny-split (default 2000)")
    p.add_argument("--tiny-split", type=common.parse_size, default=64 << 10, help="default 64K")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warmup iterations (default 5)")
    p.add_argument("-d", "--datatype", default="float", help="ddl_perf -d (default float)")
    p.add_argument("--build-dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(common.REPO, "build-bench")),
                   help="CMake build directory (default build-bench, or $DDL_BUILD_DIR)")
    p.add_argument("--no-build", action="store_true", help="use the binaries already built")
    p.add_argument("--timeout", type=int, default=900, help="seconds allowed for one run (default 900)")
    p.add_argument("-R", "--library-memory", action="store_true",
                   help="buffers from each library's allocator (ddl_mem_alloc, MPI_Alloc_mem)")
    p.add_argument("--baseline-lib", metavar="DIR",
                   help="also run ddl_perf against the libddl.so.0 in DIR (an older build, through "
                        "LD_LIBRARY_PATH) in the same rotation: a before/after column")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: sizes by x4, 2 rounds, fewer iterations")
    args = p.parse_args()
    if args.quick:
        args.factor, args.rounds, args.iters, args.small_iters, args.warmup = 4, 2, 10, 50, 2
        args.tiny_iters = 500
    if args.rounds < 1 or args.factor < 2 or args.min_bytes > args.max_bytes or args.timeout < 1:
        p.error("need --rounds >= 1, --factor >= 2, --min-bytes <= --max-bytes and --timeout >= 1")
    # What allreduce_vs_mpi's helpers read: every rank count gets the same sizes here.
    args.max_bytes_many = args.max_bytes
    args.mpi_only = False
    return args


def run_once(library, collective, ranks, args, bins, run_sizes):
    """One library's run of one collective: {size: out-of-place time_us} and its report."""
    if library == "base":  # ddl_perf on the baseline library
        saved = os.environ.get("LD_LIBRARY_PATH")
        os.environ["LD_LIBRARY_PATH"] = args.baseline_lib
        try:
            return run_once("ddl", collective, ranks, args, bins, run_sizes)
        finally:
            if saved is None:
                del os.environ["LD_LIBRARY_PATH"]
            else:
                os.environ["LD_LIBRARY_PATH"] = saved
    if collective != "barrier":
        return common.run_library(library, ranks, args, bins, run_sizes, ["-C", collective])
    barrier_args = argparse.Namespace(**vars(args))
    barrier_args.tiny_iters = BARRIER_ITERS if not args.quick else 2000
    return common.run_library(library, ranks, barrier_args, bins, [8], ["-C", "barrier"])


def measure(ranks, args, bins):
    run_sizes = common.sizes(args, ranks)
    load_before = os.getloadavg()[0]
    start = time.time()
    order = ["ddl", "mpi"] + (["base"] if args.baseline_lib else [])
    runs = {c: {lib: [] for lib in order} for c in args.collectives}
    factors, names = {}, {}
    for rnd in range(args.rounds):
        libraries = order if rnd % 2 == 0 else list(reversed(order))
        for collective in args.collectives:
            for lib in libraries:
                common.log("%d ranks, round %d/%d: %s %s" % (ranks, rnd + 1, args.rounds, lib, collective))
                report, times = run_once(lib, collective, ranks, args, bins, run_sizes)
                runs[collective][lib].append(times)
                factors[collective] = report.get("bus_factor", 0.0)
                names[lib] = report["library"]
    tables = {}
    for collective in args.collectives:
        table = []
        for size in sorted(runs[collective]["ddl"][0]):
            row = {"size": size}
            for lib in order:
                values = [r[size] for r in runs[collective][lib] if size in r]
                row[lib + "_time_us"] = statistics.median(values) if values else None
            d, m = row["ddl_time_us"], row["mpi_time_us"]
            row["ratio"] = d / m if d and m else None
            b = row.get("base_time_us")
            row["base_ratio"] = b / m if b and m else None
            row["ddl_busbw_gbs"] = size / 1e3 / d * factors[collective] if d and collective != "barrier" else None
            row["mpi_busbw_gbs"] = size / 1e3 / m * factors[collective] if m and collective != "barrier" else None
            table.append(row)
        tables[collective] = table
    load = [load_before, os.getloadavg()[0]]
    return {"ranks": ranks, "libraries": names, "tables": tables, "runs": runs, "load": load,
            "seconds": time.time() - start}


def slower(table):
    return [r for r in table if r["ratio"] is not None and r["ratio"] > 1.0]


def render(result, args):
    ranks = result["ranks"]
    names = result["libraries"]
    lines = [
        "## every collective, %s, %d ranks%s" % (args.datatype, ranks, " (quick smoke run)" if args.quick else ""),
        "",
        "- ddl: %s via `ddlrun -n %d ddl_perf -C NAME`; MPI: %s, `mpirun -np %d --mca pml ob1 --mca btl "
        "self,vader --bind-to none mpi_allreduce -C NAME`" % (names.get("ddl"), ranks, names.get("mpi"), ranks),
        "- time: median over %d alternating rounds of the out-of-place time (mean per iteration, max across "
        "ranks); %d iterations below %s, %d below %s, %d from there; %d warmup; barrier: %d iterations" % (
            args.rounds, args.tiny_iters, common.human(args.tiny_split), args.small_iters,
            common.human(args.split), args.iters, args.warmup, BARRIER_ITERS if not args.quick else 2000),
        "- buffers: %s" % ("each library's allocator (-R 1)" if args.library_memory else "posix_memalign (-R 0)"),
        "- ratio = ddl time / MPI time (< 1: ddl faster); verdict ok when ratio <= 1%s" % (
            "; baseline: the same ddl_perf on %s (LD_LIBRARY_PATH), in the same rotation" % args.baseline_lib
            if args.baseline_lib else ""),
        "- machine: %d cores, 1-min load average %.1f before, %.1f after; %.0f s" % (
            os.cpu_count() or 1, result["load"][0], result["load"][1], result["seconds"]),
        "",
    ]
    for collective in args.collectives:
        table = result["tables"][collective]
        lines += ["### %s (%s), %d ranks" % (collective, MPI_NAMES[collective], ranks), ""]
        base = bool(args.baseline_lib)
        header = ["size", "ddl (us)", "MPI (us)", "ratio", "ddl busbw", "MPI busbw", "verdict"]
        header += ["baseline (us)", "baseline/MPI"] if base else []
        body = [[common.human(r["size"]) if collective != "barrier" else "-",
                 common.fmt(r["ddl_time_us"], ".2f"), common.fmt(r["mpi_time_us"], ".2f"),
                 common.fmt(r["ratio"], ".2f"), common.fmt(r["ddl_busbw_gbs"], ".3f"),
                 common.fmt(r["mpi_busbw_gbs"], ".3f"),
                 "-" if r["ratio"] is None else ("ok" if r["ratio"] <= 1.0 else "SLOWER")]
                + ([common.fmt(r["base_time_us"], ".2f"), common.fmt(r["base_ratio"], ".2f")] if base else [])
                for r in table]
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]

        def line(cells):
            return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"

        lines += [line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
        lines += [line(row) for row in body] + [""]
    return "\n".join(lines) + "\n"


def summary_lines(result):
    out = []
    for collective, table in result["tables"].items():
        rows = [r for r in table if r["ratio"] is not None]
        if not rows:
            continue
        worst = max(rows, key=lambda r: r["ratio"])
        losses = slower(table)
        verdict = "MET" if not losses else "MISSED"
        where = ", ".join("%s (%.2f)" % (common.human(r["size"]), r["ratio"]) for r in losses)
        out.append("- %d ranks, %s: **%s** — worst ratio %.2f at %s%s" % (
            result["ranks"], collective, verdict, worst["ratio"],
            common.human(worst["size"]) if collective != "barrier" else "barrier",
            "; slower at " + where if losses else ""))
    return out


def main():
    args = parse_args()
    started = time.time()
    if not args.no_build:
        if not common.build(args):
            raise common.Failure("ddl did not build: nothing to compare")
    bins = common.binaries(args.build_dir)
    for name, path in bins.items():
        if not os.access(path, os.X_OK):
            raise common.Failure("%s is not built: %s (drop --no-build, or check --build-dir)" % (name, path))
    results_dir = os.path.join(common.REPO, "bench", "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    summary = []
    for ranks in args.ranks:
        result = measure(ranks, args, bins)
        text = render(result, args)
        print(text, flush=True)
        base = os.path.join(results_dir, "%s-collectives-p%d%s%s" % (
            stamp, ranks, "-R" if args.library_memory else "", "-quick" if args.quick else ""))
        with open(base + ".md", "w") as f:
            f.write(text + "\n" + "\n".join(summary_lines(result)) + "\n")
        with open(base + ".json", "w") as f:
            json.dump(dict(result, args=vars(args)), f, indent=1)
        common.log("written: %s.md and .json" % base)
        summary += summary_lines(result)
    print("## Summary: ddl <= Open MPI at every size\n\n" + "\n".join(summary))
    common.log("done in %.0f s" % (time.time() - started))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except common.Failure as err:
        common.log("collectives_vs_mpi: error: %s" % err)
        sys.exit(1)
    except KeyboardInterrupt:
        common.log("collectives_vs_mpi: interrupted")
        sys.exit(130)

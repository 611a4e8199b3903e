#!/usr/bin/env python3
"""ddl's allreduce next to Open MPI's, on this machine, in one command.

Builds what it needs (ddlrun, ddl_perf, mpi_allreduce, memcpy_bandwidth), then, for each rank
count P of -p in turn, runs `ddlrun -n P ddl_perf` and `mpirun -np P mpi_allreduce` (ob1/vader,
the shared-memory path) alternately for R rounds over the same sizes, with the same flags and
the same timing method (tools/ddl_perf/perf_driver.cc: mean time per iteration, maximum across
ranks). Per size and library it takes the median over the rounds of the out-of-place time and
prints a table: size, ddl time, mpi time, ratio ddl/mpi (<1: ddl faster), both bus bandwidths
(busbw = size / time * 2(P-1)/P, as nccl-tests) and ddl's busbw as a percentage of the
memory-bandwidth bound, then the issue's targets with their verdicts.

The bound is what P ranks on one host cannot beat: every rank reads its n-byte input and
writes its n-byte output, all at once. `memcpy_bandwidth -p P -s 64M` runs P processes that
each copy 64 MiB at the same time (median of 7); with rate = bytes each copied / seconds,
bound time(n) = n / rate and bound busbw = rate * 2(P-1)/P, so %bound = bound time / ddl time.

Results go to bench/results/<timestamp>-p<P>.md and .json (git-ignored).

  python3 bench/allreduce_vs_mpi.py                # 2, 4, 8 ranks; 8 B .. 256 MB (64 MB for 4, 8)
  python3 bench/allreduce_vs_mpi.py --quick -p 2   # a ~30-60 s smoke run
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
BOUND_BYTES = 64 << 20  # each copying process's buffer for the memory-bandwidth bound
BOUND_REPEATS = 7
LARGE = 32 << 20  # the targets on bandwidth hold from here up


class Failure(Exception):
    """Something the user must hear about in one clear message (no traceback)."""


def parse_size(text):
    """'8', '64K', '256M', '1G' (powers of 1024, as ddl_perf's -b/-e) -> bytes."""
    t = text.strip().upper().rstrip("B")
    unit = t[-1] if t and t[-1] in SUFFIXES else ""
    try:
        value = int(t[: len(t) - len(unit)]) * SUFFIXES[unit]
    except ValueError:
        raise argparse.ArgumentTypeError("not a size: %r (use 8, 64K, 256M, 1G)" % text)
    if value <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive: %r" % text)
    return value


def parse_ranks(text):
    """'2,4,8' -> [2, 4, 8]."""
    try:
        ranks = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("not a list of rank counts: %r (use 2 or 2,4,8)" % text)
    if not ranks or min(ranks) < 1:
        raise argparse.ArgumentTypeError("rank counts must be >= 1: %r" % text)
    return ranks


def human(size):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d B" % size


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-p", "--ranks", type=parse_ranks, default=[2, 4, 8],
                   help="rank counts to run in turn, e.g. 2 or 2,4,8 (default 2,4,8)")
    p.add_argument("-b", "--min-bytes", type=parse_size, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--max-bytes", type=parse_size, default=256 << 20, help="largest size (default 256M)")
    p.add_argument("-E", "--max-bytes-many", type=parse_size, default=64 << 20,
                   help="largest size when P > 2, where ranks share the 2 cores and every size takes "
                        "P/2 times longer at least (default 64M; the smaller of -e and -E is used)")
    p.add_argument("-f", "--factor", type=int, default=2, help="size step factor (default 2)")
    p.add_argument("-r", "--rounds", type=int, default=5, help="runs of each library per rank count (default 5)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations for sizes >= --split (default 20)")
    p.add_argument("--small-iters", type=int, default=200,
                   help="timed iterations from --tiny-split to --split (default 200)")
    p.add_argument("--split", type=parse_size, default=1 << 20, help="where --iters takes over (default 1M)")
    p.add_argument("--tiny-iters", type=int, default=5000,
                   help="timed iterations below --tiny-split, where one call takes about a microsecond on 2 "
                        "ranks: 200 of them last 0.1 ms, and one context switch in them moves the mean by "
                        "10%% or more (default 5000)")
    p.add_argument("--tiny-split", type=parse_size, default=64 << 10,
                   help="where --small-iters takes over (default 64K)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warmup iterations (default 5)")
    p.add_argument("-d", "--datatype", default="float", help="ddl_perf -d (default float)")
    p.add_argument("--build-dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build-bench")),
                   help="CMake build directory (default build-bench, or $DDL_BUILD_DIR)")
    p.add_argument("--no-build", action="store_true", help="use the binaries already built")
    p.add_argument("--mpi-only", action="store_true", help="measure only Open MPI (ddl not built or not working)")
    p.add_argument("--timeout", type=int, default=900, help="seconds allowed for one run (default 900)")
    p.add_argument("-R", "--library-memory", action="store_true",
                   help="buffers from each library's allocator (ddl_perf/mpi_allreduce -R 1: ddl_mem_alloc, "
                        "which ddl's ranks map from each other; MPI_Alloc_mem); default: posix_memalign")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 8 B .. 32 MB by x4, 2 rounds, fewer iterations (~30-60 s per rank count)")
    args = p.parse_args()
    if args.quick:
        args.max_bytes = min(args.max_bytes, 32 << 20)
        args.factor, args.rounds, args.iters, args.small_iters, args.warmup = 4, 2, 10, 50, 2
        args.tiny_iters = 500
    if args.rounds < 1 or args.factor < 2 or args.min_bytes > args.max_bytes or args.timeout < 1:
        p.error("need --rounds >= 1, --factor >= 2, --min-bytes <= --max-bytes and --timeout >= 1")
    return args


def log(message):
    print(message, file=sys.stderr, flush=True)


def run_command(cmd, what, timeout):
    """Runs cmd in its own process group; returns its stdout or raises Failure saying why.

    On a timeout the whole group goes (mpirun's ranks too, not only mpirun)."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as err:
        raise Failure("%s: cannot start %s: %s" % (what, cmd[0], err.strerror))
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # the timeout, or ^C: leave no rank behind
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=5)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if isinstance(exc, subprocess.TimeoutExpired):
            raise Failure("%s timed out after %d s (--timeout): %s" % (what, timeout, " ".join(cmd)))
        raise
    if proc.returncode != 0:
        tail = "\n".join(((err or "") + (out or "")).strip().splitlines()[-15:])
        if proc.returncode == 124:
            reason = "timed out: exit status 124, the run went past --timeout"
        elif proc.returncode > 0:
            reason = "exit status %d" % proc.returncode
        else:
            reason = "killed by signal %d" % -proc.returncode
        raise Failure("%s failed (%s): %s\n%s" % (what, reason, " ".join(cmd), tail))
    return out


def binaries(build_dir):
    return {
        "ddlrun": os.path.join(build_dir, "tools", "ddlrun", "ddlrun"),
        "ddl_perf": os.path.join(build_dir, "tools", "ddl_perf", "ddl_perf"),
        "mpi_allreduce": os.path.join(build_dir, "bench", "mpi_allreduce"),
        "memcpy_bandwidth": os.path.join(build_dir, "bench", "memcpy_bandwidth"),
    }


def build(args):
    """Configures (once) and builds the four programs; returns False if ddl's did not build."""
    if not os.path.exists(os.path.join(args.build_dir, "CMakeCache.txt")):
        log("configuring %s" % args.build_dir)
        run_command(["cmake", "-S", REPO, "-B", args.build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                    "configuring", 1800)
    jobs = ["-j", str(min(2, os.cpu_count() or 1))]  # the machine is shared: stay small
    base = ["cmake", "--build", args.build_dir] + jobs + ["--target"]
    log("building in %s" % args.build_dir)
    run_command(base + ["mpi_allreduce", "memcpy_bandwidth"], "building mpi_allreduce and memcpy_bandwidth", 3600)
    if args.mpi_only:
        return False
    try:
        run_command(base + ["ddlrun", "ddl_perf"], "building ddlrun and ddl_perf", 3600)
        return True
    except Failure as err:
        log("warning: %s\nmeasuring Open MPI only" % str(err).splitlines()[0])
        return False


def sizes(args, ranks):
    largest = args.max_bytes if ranks <= 2 else min(args.max_bytes, args.max_bytes_many)
    out, size = [], args.min_bytes
    while size <= largest:
        out.append(size)
        size *= args.factor
    return out


def library_command(library, ranks, args, bins, flags):
    if library == "ddl":
        return [bins["ddlrun"], "-n", str(ranks), "--timeout", str(args.timeout), bins["ddl_perf"]] + flags
    cmd = ["mpirun", "-np", str(ranks), "--mca", "pml", "ob1", "--mca", "btl", "self,vader", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")  # Open MPI refuses root without it
    if ranks > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")  # only then: it makes Open MPI yield when idle
    return cmd + [bins["mpi_allreduce"]] + flags


def run_library(library, ranks, args, bins, run_sizes, extra_flags=()):
    """One run of one library over every size; returns (report, {size: out-of-place time_us}).

    extra_flags go to both programs (collectives_vs_mpi.py passes -C NAME)."""
    times, report = {}, None
    tiny = [s for s in run_sizes if s < min(args.tiny_split, args.split)]
    small = [s for s in run_sizes if min(args.tiny_split, args.split) <= s < args.split]
    large = [s for s in run_sizes if s >= args.split]
    for part, iters in ((tiny, args.tiny_iters), (small, args.small_iters), (large, args.iters)):
        if not part:
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            flags = ["-b", str(part[0]), "-e", str(part[-1]), "-f", str(args.factor), "-n", str(iters),
                     "-w", str(args.warmup), "-c", "0", "-d", args.datatype, "-J", tmp.name,
                     "-R", "1" if args.library_memory else "0"] + list(extra_flags)
            cmd = library_command(library, ranks, args, bins, flags)
            what = "%s %srun with %d ranks" % (library, " ".join(extra_flags) + " " if extra_flags else "", ranks)
            run_command(cmd, what, args.timeout + 30)
            try:
                with open(tmp.name) as f:
                    report = json.load(f)
            except ValueError as err:
                raise Failure("%s run with %d ranks wrote no readable JSON (%s): %s" % (
                    library, ranks, err, " ".join(cmd)))
        for row in report["results"]:
            times[row["size"]] = row["out_of_place"]["time_us"]
    return report, times


def memory_bound(bins, ranks):
    cmd = [bins["memcpy_bandwidth"], "-p", str(ranks), "-s", str(BOUND_BYTES), "-r", str(BOUND_REPEATS)]
    out = run_command(cmd, "memory-bandwidth bound", 600)
    try:
        return json.loads(out)
    except ValueError:
        raise Failure("memcpy_bandwidth printed no JSON: %r" % out[:200])


def measure(ranks, args, bins, libraries):
    """All rounds of every library at one rank count; returns the results as a dict."""
    run_sizes = sizes(args, ranks)
    bus_factor = 2.0 * (ranks - 1) / ranks  # allreduce, as nccl-tests
    load_before = os.getloadavg()[0]
    start = time.time()
    log("%d ranks: memory-bandwidth bound (%d processes copying %s each)" % (
        ranks, ranks, human(BOUND_BYTES)))
    bound = memory_bound(bins, ranks)
    names = {"mpi": "Open MPI"}
    runs = {lib: [] for lib in libraries}
    for rnd in range(args.rounds):
        # Alternate the order too, so that slow drift of the machine hits both alike.
        for lib in libraries if rnd % 2 == 0 else list(reversed(libraries)):
            log("%d ranks, round %d/%d: %s" % (ranks, rnd + 1, args.rounds, lib))
            report, times = run_library(lib, ranks, args, bins, run_sizes)
            names[lib] = report["library"]
            runs[lib].append(times)

    rate = bound["copy_gbs_median"]  # GB/s each process copies while all P copy
    table = []
    for size in run_sizes:
        # busbw comes from the median time (not a median of busbw), so that the columns agree.
        row = {"size": size}
        for lib in ("ddl", "mpi"):
            t = statistics.median([r[size] for r in runs[lib]]) if runs.get(lib) else None
            row[lib + "_time_us"] = t
            row[lib + "_busbw_gbs"] = size / 1e3 / t * bus_factor if t else None
        ddl_t, mpi_t = row["ddl_time_us"], row["mpi_time_us"]
        row["ratio"] = ddl_t / mpi_t if ddl_t and mpi_t else None
        row["bound_time_us"] = size / 1e3 / rate
        row["ddl_pct_of_bound"] = 100.0 * row["bound_time_us"] / ddl_t if ddl_t else None
        table.append(row)
    load = [load_before, os.getloadavg()[0]]
    return {"ranks": ranks, "bus_factor": bus_factor, "libraries": names, "memcpy": bound,
            "bound_busbw_gbs": rate * bus_factor, "table": table, "runs": runs, "load": load,
            "busy": max(load) > (os.cpu_count() or 1) / 2, "seconds": time.time() - start}


def verdicts(result):
    """The issue's targets at this rank count: [(target, MET/MISSED/NOT MEASURED, numbers)]."""
    rows = [r for r in result["table"] if r["ratio"] is not None]
    if not rows:
        return [("ddl measured", "NOT MEASURED", "no ddl times (ddl not built, or --mpi-only)")]

    def target(name, ok, numbers):
        return (name, "MET" if ok else "MISSED", numbers)

    worst = max(rows, key=lambda r: r["ratio"])
    every = target("every size %s..%s: ddl at least as fast (ddl/MPI time <= 1)" % (
                       human(rows[0]["size"]), human(rows[-1]["size"])),
                   worst["ratio"] <= 1.0,
                   "worst ratio %.2f at %s (ddl %.2f us, MPI %.2f us)" % (
                       worst["ratio"], human(worst["size"]), worst["ddl_time_us"], worst["mpi_time_us"]))
    if result["ranks"] != 2:
        return [every]

    out = []
    name = "8 B: ddl time <= MPI time"
    eight = [r for r in rows if r["size"] == 8]
    if eight:
        r = eight[0]
        out.append(target(name, r["ratio"] <= 1.0, "ddl %.2f us, MPI %.2f us, ratio %.2f" % (
            r["ddl_time_us"], r["mpi_time_us"], r["ratio"])))
    else:
        out.append((name, "NOT MEASURED", "8 B is not among the sizes"))
    out.append(every)

    large = [r for r in rows if r["size"] >= LARGE]
    versus_mpi = ">= %s: ddl busbw >= 2.5x MPI busbw" % human(LARGE)
    of_bound = ">= %s: ddl busbw >= 75%% of the bound" % human(LARGE)
    if not large:
        why = "no size >= %s (-e)" % human(LARGE)
        return out + [(versus_mpi, "NOT MEASURED", why), (of_bound, "NOT MEASURED", why)]
    low = min(large, key=lambda r: r["mpi_time_us"] / r["ddl_time_us"])  # = ddl busbw / MPI busbw
    speedup = low["mpi_time_us"] / low["ddl_time_us"]
    out.append(target(versus_mpi, speedup >= 2.5, "lowest %.2fx at %s (ddl %.2f GB/s, MPI %.2f GB/s)" % (
        speedup, human(low["size"]), low["ddl_busbw_gbs"], low["mpi_busbw_gbs"])))
    low = min(large, key=lambda r: r["ddl_pct_of_bound"])
    out.append(target(of_bound, low["ddl_pct_of_bound"] >= 75.0,
                      "lowest %.1f%% at %s (ddl %.2f GB/s, bound %.2f GB/s)" % (
                          low["ddl_pct_of_bound"], human(low["size"]), low["ddl_busbw_gbs"],
                          result["bound_busbw_gbs"])))
    return out


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def render(result, args):
    """The markdown that is printed and written: settings, bound, table, verdicts."""
    ranks, bound = result["ranks"], result["memcpy"]
    names = result["libraries"]
    busy = " (busy machine: not representative)" if result["busy"] else ""
    lines = [
        "## allreduce %s sum, %d ranks%s" % (args.datatype, ranks, " (quick smoke run)" if args.quick else ""),
        "",
        "- ddl: %s via `ddlrun -n %d`; MPI: %s, `mpirun -np %d --mca pml ob1 --mca btl self,vader --bind-to none`"
        % (names.get("ddl", "not measured"), ranks, names["mpi"], ranks),
        "- time: median over %d alternating rounds of the out-of-place time (mean per iteration, max across "
        "ranks); %d iterations below %s, %d below %s, %d from there; %d warmup" % (
            args.rounds, args.tiny_iters, human(args.tiny_split), args.small_iters, human(args.split),
            args.iters, args.warmup),
        "- buffers: %s" % ("each library's allocator (-R 1): ddl_mem_alloc, MPI_Alloc_mem" if args.library_memory
                           else "posix_memalign (-R 0), the same for both"),
        "- ratio = ddl time / MPI time (< 1: ddl faster); busbw = size / time x 2(P-1)/P = size / time x %.3f"
        % result["bus_factor"],
        "- memory-bandwidth bound: %d processes each memcpy %s at once (page-touched, median of %d): "
        "rate = %.2f GB/s per process (best %.2f); bound time(n) = n / rate; bound busbw = rate x 2(P-1)/P "
        "= **%.2f GB/s**; %% bound = ddl busbw / bound busbw = bound time / ddl time" % (
            bound["processes"], human(bound["bytes"]), bound["repeats"], bound["copy_gbs_median"],
            bound["copy_gbs_best"], result["bound_busbw_gbs"]),
        "- machine: %d cores, 1-min load average %.1f before, %.1f after; %.0f s%s" % (
            os.cpu_count() or 1, result["load"][0], result["load"][1], result["seconds"],
            "  \n  **WARNING: busy machine, numbers are not representative**" if busy else ""),
        "",
    ]
    header = ["size", "bytes", "ddl (us)", "MPI (us)", "ratio", "ddl busbw (GB/s)", "MPI busbw (GB/s)", "% bound"]
    body = [[human(r["size"]), str(r["size"]), fmt(r["ddl_time_us"], ".2f"), fmt(r["mpi_time_us"], ".2f"),
             fmt(r["ratio"], ".2f"), fmt(r["ddl_busbw_gbs"], ".3f"), fmt(r["mpi_busbw_gbs"], ".3f"),
             fmt(r["ddl_pct_of_bound"], ".1f")] for r in result["table"]]
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"

    lines += [line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    lines += [line(row) for row in body]
    lines += ["", "### Targets, %d ranks%s" % (ranks, busy), ""]
    lines += ["- %s: **%s** — %s" % target for target in result["verdicts"]]
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    started = time.time()
    have_ddl = (not args.mpi_only) if args.no_build else build(args)
    bins = binaries(args.build_dir)
    for name, path in bins.items():
        if not os.access(path, os.X_OK) and (have_ddl or name not in ("ddlrun", "ddl_perf")):
            raise Failure("%s is not built: %s (drop --no-build, or check --build-dir)" % (name, path))
    libraries = (["ddl"] if have_ddl else []) + ["mpi"]
    results_dir = os.path.join(REPO, "bench", "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    summary = []
    for ranks in args.ranks:
        result = measure(ranks, args, bins, libraries)
        result["verdicts"] = verdicts(result)
        text = render(result, args)
        print(text, flush=True)
        base = os.path.join(results_dir, "%s-p%d%s%s" % (stamp, ranks, "-R" if args.library_memory else "",
                                                         "-quick" if args.quick else ""))
        with open(base + ".md", "w") as f:
            f.write(text)
        with open(base + ".json", "w") as f:
            json.dump(dict(result, args=vars(args)), f, indent=1)
        log("written: %s.md and .json" % base)
        busy = " (busy machine)" if result["busy"] else ""
        summary += ["- %d ranks, %s: **%s** — %s%s" % ((ranks,) + target + (busy,))
                    for target in result["verdicts"]]
    if len(args.ranks) > 1:
        print("## Summary of the targets\n\n" + "\n".join(summary))
    log("done in %.0f s" % (time.time() - started))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as err:
        log("allreduce_vs_mpi: error: %s" % err)
        sys.exit(1)
    except KeyboardInterrupt:
        log("allreduce_vs_mpi: interrupted")
        sys.exit(130)

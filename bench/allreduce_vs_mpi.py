#!/usr/bin/env python3
"""ddl's allreduce next to Open MPI's, on this machine, in one command.

Builds what it needs (ddlrun, ddl_perf, mpi_allreduce, memcpy_bandwidth), then runs
`ddlrun -n P ddl_perf` and `mpirun -np P mpi_allreduce` (ob1/vader, the shared-memory path)
alternately for R rounds over the same sizes, with the same flags and the same timing method
(tools/ddl_perf/perf_driver.cc: mean time per iteration, maximum across ranks). Per size and
library it takes the median over the rounds of the out-of-place time and prints:

  size, ddl time(us), mpi time(us), ratio ddl/mpi time (<1: ddl faster), ddl busbw, mpi busbw,
  and ddl busbw as a percentage of the memory-bandwidth bound,

where the bound is a memcpy of 256 MiB on the same machine (copy GB/s = bytes copied /
seconds / 1e9, median of 7). The table and the raw numbers also go to bench/results/.

  python3 bench/allreduce_vs_mpi.py            # 2 ranks, 8 B .. 256 MB, 5 rounds
  python3 bench/allreduce_vs_mpi.py --quick    # a ~30 s smoke run
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-p", "--ranks", type=int, default=2, help="processes per library (default 2)")
    p.add_argument("-b", "--min-bytes", type=parse_size, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--max-bytes", type=parse_size, default=256 << 20, help="largest size (default 256M)")
    p.add_argument("-f", "--factor", type=int, default=2, help="size step factor (default 2)")
    p.add_argument("-r", "--rounds", type=int, default=5, help="runs of each library (default 5)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations for sizes >= --split (default 20)")
    p.add_argument("--small-iters", type=int, default=200,
                   help="timed iterations below --split, where one call takes microseconds (default 200)")
    p.add_argument("--split", type=parse_size, default=1 << 20, help="where --iters takes over (default 1M)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warmup iterations (default 5)")
    p.add_argument("-d", "--datatype", default="float", help="ddl_perf -d (default float)")
    p.add_argument("--build-dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build-bench")),
                   help="CMake build directory (default build-bench, or $DDL_BUILD_DIR)")
    p.add_argument("--no-build", action="store_true", help="use the binaries already built")
    p.add_argument("--mpi-only", action="store_true", help="measure only Open MPI (ddl not built or not working)")
    p.add_argument("--timeout", type=int, default=900, help="seconds allowed for one run (default 900)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 8 B .. 4 MB by x8, 2 rounds, fewer iterations (~30 s)")
    args = p.parse_args()
    if args.quick:
        args.max_bytes = min(args.max_bytes, 4 << 20)
        args.factor, args.rounds, args.iters, args.small_iters = 8, 2, 10, 50
    if args.ranks < 1 or args.rounds < 1 or args.factor < 2 or args.min_bytes > args.max_bytes:
        p.error("need --ranks >= 1, --rounds >= 1, --factor >= 2 and --min-bytes <= --max-bytes")
    return args


def log(message):
    print(message, file=sys.stderr, flush=True)


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
        subprocess.run(["cmake", "-S", REPO, "-B", args.build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                       check=True, stdout=subprocess.DEVNULL)
    jobs = ["-j", str(min(2, os.cpu_count() or 1))]  # the machine is shared: stay small
    base = ["cmake", "--build", args.build_dir] + jobs + ["--target"]
    subprocess.run(base + ["mpi_allreduce", "memcpy_bandwidth"], check=True, stdout=subprocess.DEVNULL)
    if args.mpi_only:
        return False
    ok = subprocess.run(base + ["ddlrun", "ddl_perf"], stdout=subprocess.DEVNULL).returncode == 0
    if not ok:
        log("warning: ddlrun/ddl_perf did not build; measuring Open MPI only")
    return ok


def sizes(args):
    out, size = [], args.min_bytes
    while size <= args.max_bytes:
        out.append(size)
        size *= args.factor
    return out


def perf_flags(first, last, args, iters, json_path):
    return ["-b", str(first), "-e", str(last), "-f", str(args.factor), "-n", str(iters),
            "-w", str(args.warmup), "-c", "0", "-d", args.datatype, "-J", json_path]


def run_library(library, args, bins, all_sizes):
    """One run of one library over every size; returns {size: out-of-place time_us}."""
    results = {}
    small = [s for s in all_sizes if s < args.split]
    large = [s for s in all_sizes if s >= args.split]
    for part, iters in ((small, args.small_iters), (large, args.iters)):
        if not part:
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            flags = perf_flags(part[0], part[-1], args, iters, tmp.name)
            if library == "ddl":
                cmd = [bins["ddlrun"], "-n", str(args.ranks), "--timeout", str(args.timeout),
                       bins["ddl_perf"]] + flags
            else:
                cmd = ["mpirun", "-np", str(args.ranks), "--allow-run-as-root", "--mca", "pml", "ob1",
                       "--mca", "btl", "self,vader", "--bind-to", "none"]
                if args.ranks > (os.cpu_count() or 1):
                    cmd.append("--oversubscribe")  # only then: it makes Open MPI yield when idle
                cmd += [bins["mpi_allreduce"]] + flags
            try:
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      timeout=args.timeout + 30)
            except subprocess.TimeoutExpired:
                raise RuntimeError("%s run timed out: %s" % (library, " ".join(cmd)))
            if proc.returncode != 0:
                raise RuntimeError("%s run failed (exit %d): %s\n%s" % (
                    library, proc.returncode, " ".join(cmd), (proc.stderr or proc.stdout)[-2000:]))
            with open(tmp.name) as f:
                report = json.load(f)
        for row in report["results"]:
            results[row["size"]] = row["out_of_place"]["time_us"]
        results["_library"] = report["library"]
        results["_bus_factor"] = report["bus_factor"]
    return results


def memory_bound(bins):
    out = subprocess.run([bins["memcpy_bandwidth"], "-s", "256M", "-r", "7"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def median_or_none(values):
    return statistics.median(values) if values else None


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def main():
    args = parse_args()
    if not args.no_build:
        have_ddl = build(args)
    else:
        have_ddl = not args.mpi_only
    bins = binaries(args.build_dir)
    all_sizes = sizes(args)
    load_before = os.getloadavg()[0]
    libraries = (["ddl"] if have_ddl else []) + ["mpi"]
    runs = {lib: [] for lib in libraries}
    bus_factor = 2.0 * (args.ranks - 1) / args.ranks  # allreduce; the reports say it too
    names = {"mpi": "Open MPI"}
    errors = []
    for rnd in range(args.rounds):
        # Alternate the order too, so that slow drift of the machine hits both alike.
        order = libraries if rnd % 2 == 0 else list(reversed(libraries))
        for lib in order:
            log("round %d/%d: %s" % (rnd + 1, args.rounds, lib))
            try:
                result = run_library(lib, args, bins, all_sizes)
                names[lib] = result.pop("_library", lib)
                bus_factor = result.pop("_bus_factor")
                runs[lib].append(result)
            except RuntimeError as err:
                errors.append(str(err))
                log("warning: " + str(err).splitlines()[0])
    bound = memory_bound(bins)
    copy_gbs = bound["copy_gbs_median"]

    lines = []
    lines.append("# allreduce %s sum, %d ranks, median over %d rounds of the out-of-place time "
                 "(mean per iteration, max across ranks)" % (args.datatype, args.ranks, args.rounds))
    lines.append("# ddl: %s; mpi: %s, mpirun --mca pml ob1 --mca btl self,vader --bind-to none"
                 % (names["ddl"] + " via ddlrun" if "ddl" in names else "not measured", names["mpi"]))
    lines.append("# iterations: %d below %d B, %d from there; warmup %d" % (
        args.small_iters, args.split, args.iters, args.warmup))
    lines.append("# memory bound: memcpy of %d B copies %.2f GB/s (median of %d; best %.2f); "
                 "copy GB/s = bytes copied / seconds / 1e9" % (
                     bound["bytes"], copy_gbs, bound["repeats"], bound["copy_gbs_best"]))
    cores = os.cpu_count() or 1
    load_after = os.getloadavg()[0]
    lines.append("# machine: %d cores, 1-min load average %.1f before, %.1f after%s" % (
        cores, load_before, load_after,
        "  WARNING: busy machine, numbers are not representative" if max(load_before, load_after) > cores / 2
        else ""))
    lines.append("# ratio = ddl time / mpi time (<1: ddl faster); %mem = ddl busbw / memcpy GB/s")
    header = "%12s %14s %14s %8s %11s %11s %7s" % ("size(B)", "ddl time(us)", "mpi time(us)", "ratio",
                                                   "ddl busbw", "mpi busbw", "%mem")
    lines.append(header)
    table = []
    for size in all_sizes:
        # busbw comes from the median time (not a median of busbw), so that the columns agree.
        med = {}
        for lib in ("ddl", "mpi"):
            t = median_or_none([r[size] for r in runs.get(lib, []) if size in r])
            med[lib] = (t, size / 1e3 / t * bus_factor if t else None)
        ddl_t, ddl_bw = med["ddl"]
        mpi_t, mpi_bw = med["mpi"]
        ratio = ddl_t / mpi_t if ddl_t and mpi_t else None
        pct = 100.0 * ddl_bw / copy_gbs if ddl_bw is not None and copy_gbs else None
        lines.append("%12d %14s %14s %8s %11s %11s %7s" % (
            size, fmt(ddl_t, ".2f"), fmt(mpi_t, ".2f"), fmt(ratio, ".2f"), fmt(ddl_bw, ".2f"),
            fmt(mpi_bw, ".2f"), fmt(pct, ".1f")))
        table.append({"size": size, "ddl_time_us": ddl_t, "mpi_time_us": mpi_t, "ratio": ratio,
                      "ddl_busbw_gbs": ddl_bw, "mpi_busbw_gbs": mpi_bw, "ddl_pct_of_memcpy": pct})
    for err in errors:
        lines.append("# error: " + err.splitlines()[0])
    text = "\n".join(lines) + "\n"
    print(text, end="")

    results_dir = os.path.join(REPO, "bench", "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(results_dir, "allreduce_vs_mpi-%s%s" % (stamp, "-quick" if args.quick else ""))
    with open(base + ".txt", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items()}, "libraries": names,
                   "memcpy": bound, "table": table, "bus_factor": bus_factor,
                   "runs": {lib: [{str(k): v for k, v in r.items()} for r in rs] for lib, rs in runs.items()},
                   "errors": errors}, f, indent=1)
    log("written: %s.txt and .json" % base)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Charts of bus bandwidth and time against message size, from the project's JSON results.

    python bench/plot.py FILE.json [FILE.json ...] -o out.png     (or out.svg)

Reads, recognising each file by its shape:

- `ddl_perf -J` (and `mpi_allreduce -J`): one line, the library's out-of-place times;
- `bench/allreduce_vs_mpi.py`'s results: ddl and Open MPI, and the memory-bandwidth bound;
- `bench/collectives_vs_mpi.py`'s results: ddl, Open MPI (and the baseline, if any) for
  one collective (`--collective`, default allreduce, else the first in the file);
- `bench/multihost_vs_mpi.py`'s results: every ddl algorithm and Open MPI per setup, and the
  link bound of each setup;
- `bench/torch_vs_gloo.py -J`: the ddl and gloo backends for one case (`--collective`,
  default all_reduce), medians of the samples.

Every library or run is one line; bounds are dashed. The size axis is logarithmic with human
units. Two panels, bus bandwidth and time, unless `--metric` asks for one.
"""

import argparse
import json
import math
import os
import statistics
import sys


class PlotError(Exception):
    """A file that cannot be plotted; the message names the file and what is wrong."""


class Series:
    """One line: label, {size in bytes: time in us}, bus factor (busbw = factor x size / time)."""

    def __init__(self, label, times, factor, bound=False):
        self.label, self.times, self.factor, self.bound = label, times, factor, bound

    def points(self, metric):
        sizes = sorted(s for s, t in self.times.items() if t)
        if metric == "time":
            return sizes, [self.times[s] for s in sizes]
        # bytes per us is MB/s; /1e3 gives GB/s, as the benches print.
        return sizes, [self.factor * s / self.times[s] / 1e3 for s in sizes]


def allreduce_factor(nranks):
    return 2.0 * (nranks - 1) / nranks


# The bus factors of nccl-tests, as tools/ddl_perf/perf_report.cc applies them.
def bus_factor(collective, nranks):
    if collective in ("allreduce", "all_reduce"):
        return allreduce_factor(nranks)
    if collective in ("allgather", "reduce_scatter"):
        return (nranks - 1.0) / nranks
    if collective == "broadcast":
        return 1.0
    return 0.0  # barrier: no bytes


# ---------------------------------------------------------------- one reader per shape

def read_ddl_perf(data, args):
    times = {}
    for row in data["results"]:
        mode = row.get("out_of_place") or {}
        if mode.get("time_us"):
            times[int(row["size"])] = float(mode["time_us"])
    label = "%s, %d ranks" % (data["library"], data["nranks"])
    return data["collective"], [Series(label, times, float(data["bus_factor"]))]


def read_allreduce_vs_mpi(data, args):
    table, ranks = data["table"], data["ranks"]
    names = data.get("libraries", {})
    out = []
    for lib in ("ddl", "mpi"):
        times = {r["size"]: r[lib + "_time_us"] for r in table if r.get(lib + "_time_us")}
        if times:
            out.append(Series("%s, %d ranks" % (names.get(lib, lib), ranks), times, data["bus_factor"]))
    bound = {r["size"]: r["bound_time_us"] for r in table if r.get("bound_time_us")}
    if bound:
        out.append(Series("memory-bandwidth bound, %d ranks" % ranks, bound, data["bus_factor"], bound=True))
    return "allreduce", out


def pick(available, wanted, default, what):
    """The collective or case to draw: the one asked for, else the default, else the first."""
    if wanted:
        if wanted not in available:
            raise PlotError("no %s %r here (it has: %s)" % (what, wanted, ", ".join(available)))
        return wanted
    return default if default in available else available[0]


def read_collectives_vs_mpi(data, args):
    ranks, names = data["ranks"], data.get("libraries", {})
    # The barrier has no message size: nothing to draw against the size axis.
    available = [c for c in data["tables"] if c != "barrier"]
    if not available:
        raise PlotError("only a barrier was measured: no sizes to plot")
    collective = pick(available, args.collective, "allreduce", "collective")
    table = data["tables"][collective]
    out = []
    for lib in ("ddl", "mpi", "base"):
        times = {r["size"]: r[lib + "_time_us"] for r in table if r.get(lib + "_time_us")}
        if times:
            name = names.get(lib, lib) + (" (baseline)" if lib == "base" else "")
            out.append(Series("%s, %d ranks" % (name, ranks), times, bus_factor(collective, ranks)))
    return collective, out


def read_multihost(data, args):
    out = []
    for result in data["results"]:
        setup = result["setup"]
        if args.setup and setup["name"] not in args.setup:
            continue
        nranks = setup["hosts"] * setup["per_host"]
        factor = allreduce_factor(nranks)
        for lib in result["libs"]:
            # The median of the rounds, as the bench's own tables give it.
            times = {int(size): statistics.median(run["times"][size] for run in result["runs"][lib])
                     for size in result["runs"][lib][0]["times"]}
            name = result["names"].get(lib, lib) if lib == "mpi" else lib.replace("ddl:", "ddl ")
            out.append(Series("%s: %s" % (setup["name"], name), times, factor))
        bound = {r["size"]: r["bound_us"] for r in result.get("table", []) if r.get("bound_us")}
        if bound and setup["sizes"] != [8]:  # the latency setup has no meaningful link bound
            out.append(Series("%s: link bound" % setup["name"], bound, factor, bound=True))
    if not out:
        raise PlotError("no setup named %s here" % ", ".join(args.setup))
    return "allreduce", out


def read_torch_vs_gloo(data, args):
    nprocs = data["nprocs"]
    samples = data["samples"]
    available = sorted({s["case"] for s in samples if s["case"] != "ddp step"})
    if not available:
        raise PlotError("no collective samples (only DDP steps)")
    case = pick(available, args.collective and torch_case(args.collective), "all_reduce", "case")
    # The bench sizes all_gather and reduce_scatter by each rank's share and moves (n-1) of
    # them per rank: its own factors, so that the chart agrees with its table.
    factor = {"all_reduce": allreduce_factor(nprocs), "broadcast": 1.0}.get(case, nprocs - 1.0)
    out = []
    # Only the two backends: the other rows (ctypes, floor, ...) measure per-call overheads.
    for who in ("ddl", "gloo"):
        times = {s["bytes"]: statistics.median(s["seconds"]) * 1e6
                 for s in samples if s["case"] == case and s["who"] == who}
        if times:
            out.append(Series("torch %s %s, %d processes" % (data["torch"], who, nprocs), times, factor))
    return case, out


def torch_case(name):
    """Accepts ddl's names for torch_vs_gloo's cases too (allgather -> all_gather_into_tensor)."""
    return {"allreduce": "all_reduce", "allgather": "all_gather_into_tensor",
            "reduce_scatter": "reduce_scatter_tensor"}.get(name, name)


# The key that tells each shape apart, checked in this order.
READERS = [
    ("ddl_perf -J", lambda d: "results" in d and "tool" in d, read_ddl_perf),
    ("multihost_vs_mpi.py", lambda d: "results" in d and "rate_bps" in d, read_multihost),
    ("allreduce_vs_mpi.py", lambda d: "table" in d and "bound_busbw_gbs" in d, read_allreduce_vs_mpi),
    ("collectives_vs_mpi.py", lambda d: "tables" in d and "ranks" in d, read_collectives_vs_mpi),
    ("torch_vs_gloo.py -J", lambda d: "samples" in d and "nprocs" in d, read_torch_vs_gloo),
]


def read(path, args):
    """Returns (collective, [Series]) for one file, or raises PlotError naming it."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as err:
        raise PlotError("%s: cannot read it: %s" % (path, err.strerror))
    except ValueError as err:
        raise PlotError("%s: not JSON (%s)" % (path, err))
    if not isinstance(data, dict):
        raise PlotError("%s: not a result file (a JSON object was expected)" % path)
    for name, matches, reader in READERS:
        if matches(data):
            try:
                collective, series = reader(data, args)
            except PlotError as err:
                raise PlotError("%s (%s output): %s" % (path, name, err))
            except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as err:
                raise PlotError("%s looks like %s output but is malformed (%s: %s)" % (
                    path, name, type(err).__name__, err))
            if not any(s.times for s in series):
                raise PlotError("%s (%s output): no measured sizes" % (path, name))
            return collective, series
    raise PlotError("%s: not a format this knows (ddl_perf -J, allreduce_vs_mpi.py, collectives_vs_mpi.py, "
                    "multihost_vs_mpi.py, torch_vs_gloo.py -J); its keys: %s" % (
                        path, ", ".join(sorted(data)) or "none"))


# ---------------------------------------------------------------- drawing

def human_bytes(value, _pos=None):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if value >= scale:
            return "%g %s" % (value / scale, unit)
    return "%g B" % value


def human_time(value, _pos=None):
    if value >= 1e6:
        return "%g s" % (value / 1e6)
    if value >= 1e3:
        return "%g ms" % (value / 1e3)
    return "%g µs" % value


def unique_labels(per_file):
    """Prefixes a file's name to labels that several files share, so lines stay apart."""
    counts = {}
    for _, series in per_file:
        for s in series:
            counts[s.label] = counts.get(s.label, 0) + 1
    for path, series in per_file:
        stem = os.path.splitext(os.path.basename(path))[0]
        for s in series:
            if counts[s.label] > 1:
                s.label = "%s: %s" % (stem, s.label)


def draw(all_series, metrics, title, output):
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed (or wanted) on build machines
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    fig, axes = plt.subplots(len(metrics), 1, figsize=(8, 3.6 * len(metrics) + 0.6), squeeze=False,
                             sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sizes = sorted({s for series in all_series for s in series.times})
    for ax, metric in zip(axes[:, 0], metrics):
        line, values = 0, []
        for series in all_series:
            if metric == "busbw" and not series.factor:
                continue  # nothing to say about bandwidth (a barrier)
            xs, ys = series.points(metric)
            values += ys
            if series.bound:
                # A marker too: a bound known at one size only is a point, not a line.
                ax.plot(xs, ys, "--", marker="_" if len(xs) == 1 else None, markersize=12,
                        color="0.35", linewidth=1.2, label=series.label)
            else:
                ax.plot(xs, ys, "o-", color=colors[line % len(colors)], markersize=3.5, linewidth=1.5,
                        label=series.label)
                line += 1
        ax.set_xscale("log", base=2)
        # Logarithmic when the values span decades (8 B .. 256 MB does); a few large sizes
        # (the multi-host setups) read better on a linear axis from zero.
        if values and max(values) > 30 * min(values):
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0, top=max(values or [1]) * 1.1)
        ax.grid(True, which="major", alpha=0.3)
        if metric == "busbw":
            ax.set_ylabel("bus bandwidth (GB/s)")
        else:
            ax.set_ylabel("time per call")
            ax.yaxis.set_major_formatter(FuncFormatter(human_time))
            ax.yaxis.set_minor_formatter(NullFormatter())
    # One legend, in the top panel: the lines are the same in both.
    axes[0, 0].legend(fontsize=8, loc="best")
    bottom = axes[-1, 0]
    # Ticks at powers of two from the smallest size, every other one (8 B, 32 B, ... 8 MB) or
    # sparser, so that there are at most 12 and each reads as a round size.
    if sizes:
        low, high = math.floor(math.log2(min(sizes))), math.log2(max(sizes))
        step = 2
        while (high - low) / step >= 12:
            step *= 2
        bottom.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(low, int(high) + 1, step)]))
    bottom.xaxis.set_major_formatter(FuncFormatter(human_bytes))
    bottom.xaxis.set_minor_locator(NullLocator())
    bottom.set_xlabel("message size")
    if sizes:
        bottom.set_xlim(min(sizes) / 1.5, max(sizes) * 1.5)
    for label in bottom.get_xticklabels():
        label.set_rotation(30)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE.json")
    p.add_argument("-o", "--output", required=True, help="the chart: .png or .svg")
    p.add_argument("--metric", choices=["both", "busbw", "time"], default="both",
                   help="the panels to draw (default both: bus bandwidth above, time below)")
    p.add_argument("--title", help="default: the collective and the files' names")
    p.add_argument("--collective", help="which collective of a collectives_vs_mpi.py file (or case of a "
                                        "torch_vs_gloo.py file) to draw")
    p.add_argument("--setup", action="append",
                   help="multihost_vs_mpi.py: draw only this setup (repeatable; default all)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if os.path.splitext(args.output)[1].lower() not in (".png", ".svg"):
        raise PlotError("-o %s: the chart must be a .png or .svg file" % args.output)
    try:
        import matplotlib  # noqa: F401  (checked before the files, so the error is the right one)
    except ImportError:
        raise PlotError("matplotlib is not installed: scripts/python-env.sh installs it in the venv")
    per_file, collectives = [], []
    for path in args.files:
        collective, series = read(path, args)
        per_file.append((path, series))
        collectives.append(collective)
    unique_labels(per_file)
    metrics = ["busbw", "time"] if args.metric == "both" else [args.metric]
    title = args.title or "%s: %s" % (", ".join(sorted(set(collectives))),
                                      ", ".join(os.path.basename(f) for f in args.files))
    draw([s for _, series in per_file for s in series], metrics, title, args.output)
    print("written: %s" % args.output)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as err:
        print("plot.py: error: %s" % err, file=sys.stderr)
        sys.exit(1)

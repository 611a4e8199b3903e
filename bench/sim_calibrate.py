#!/usr/bin/env python3
"""Calibrates ddl_sim (tools/ddl_sim) against real runs: measure, fit, report, in one command.

1. Measure. Each setup "HxL[rK][@RATE]" is H hosts x L ranks per host, K NICs (rails) per
   host (default 1), every NIC shaped to RATE both ways (tc units, default 1gbit). For each
   setup and collective of --collectives it runs ddl_perf once over the sizes --min .. --max
   (times 4, nccl-tests' -b/-e/-f) with -n ITERS -w WARMUP -c 0 and keeps the out-of-place
   time per size:

     one host:  ddlrun -n L -x DDL_SPIN_BEFORE_YIELD=20 -- ddl_perf ... -a ring
                (the ring forces the schedule path ddl_sim models; ddl_sim also gets -a ring)
     H hosts:   emuhosts run --hosts H --rails K --rate RATE -- (this script, inside:)
                ddlrun -H h0:L,..,h<H-1>:L --launch-agent "$EMUHOSTS_AGENT"
                       -x DDL_SPIN_BEFORE_YIELD=20 -- ddl_perf ...   (default algorithm)

   as bench/multihost_vs_mpi.py does (emuhosts run removes the hosts whatever happens); the
   measuring is in bench/sim_measure.py.
   The measurements are kept in --measurements (JSON); --reuse skips the setups and
   collectives already there with the same sizes.

2. Fit. The constants of --keys (default local_rate, local_latency, net_latency,
   net_efficiency, net_cpu_rate, message_overhead, call_overhead, reduce_rate), starting from --cluster
   (default tools/ddl_sim/clusters/emulated-1g.cluster), minimise over the --fit setups

     sum over (setup, collective, size) of w(size) * log(sim / measured)^2

   with w = 1 from --large (64 KB) up and --small-weight below. Coordinate descent in log
   space: each key in turn is multiplied by 0.5, 0.7, 0.85, 1.15, 1.4, 2 (clamped to its
   limits: net_efficiency in (0, 1]) and keeps the best; every round the steps shrink (factor
   f becomes f^(1/2)), for --rounds rounds. One evaluation runs ddl_sim once per setup and
   collective with --set for every key, -N H -g L, --set nics=K --set nic_rate=RATE, in
   parallel (--jobs).

3. Report. Per setup (fitted or held out) and collective: the median and worst |sim/measured
   - 1| over the sizes from --large up, before (the starting constants) and after the fit;
   for held-out setups whether the targets hold (median <= 15 %, worst <= 25 %). Then the
   fitted constants. --out (JSON) gets everything, measured and predicted per size;
   --write-cluster FILE writes a cluster file: --cluster's text (its comment header and every
   other key kept) with the fitted values.

  python3 bench/sim_calibrate.py                       # measure (several minutes), fit, report
  python3 bench/sim_calibrate.py --reuse               # fit and report on what is measured
  python3 bench/sim_calibrate.py --reuse --write-cluster tools/ddl_sim/clusters/emulated-1g.cluster
  python3 bench/sim_calibrate.py --quick               # CI: fit 1x2,2x1, predict 3x1 (~10 s here)

Emulated hosts need root. Timings on a shared machine are noisy: rerun a setup (without
--reuse) when its errors look odd.
"""

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# One way to run a command with a deadline (its whole process group goes on a timeout or ^C)
# and one clear error, shared with the other benches.
from allreduce_vs_mpi import Failure, log, run_command  # noqa: E402
from multihost_vs_mpi import human, rate_bytes  # noqa: E402
# Measuring (ddl_perf on one host or on emulated hosts) lives beside this file.
from sim_measure import SIZE_FACTOR, ladder, measure, write_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
K = 1 << 10
M = 1 << 20

COLLECTIVES = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
DEFAULT_SETUPS = ["1x4", "2x2", "4x1", "2x1@10gbit", "2x4", "3x2", "2x2r2", "2x2@10gbit"]
# 2x1 at 10 Gbit/s is fitted too: at 1 Gbit/s the links hide what the TCP stack costs the
# CPUs (net_cpu_rate), which 10 Gbit/s setups are bound by here.
DEFAULT_FIT = ["1x4", "2x2", "4x1", "2x1@10gbit"]
DEFAULT_KEYS = ["local_rate", "local_latency", "net_latency", "net_efficiency", "net_cpu_rate", "message_overhead",
                "call_overhead", "reduce_rate"]
FACTORS = [0.5, 0.7, 0.85, 1.15, 1.4, 2.0]
TARGET_MEDIAN = 0.15
TARGET_WORST = 0.25
SIG = 5  # significant digits of the constants (on ddl_sim's command line and in the file)

# The kind of each key the fit may touch: how ddl_sim prints and parses it, and its limits.
RATE_KEYS = {"local_rate", "local_bus_rate", "nic_rate", "reduce_rate", "copy_rate", "net_cpu_rate"}
TIME_KEYS = {"local_latency", "net_latency", "message_overhead", "call_overhead"}
LIMITS = {"net_efficiency": (1e-3, 1.0), "oversubscription": (1.0, 1e3)}

QUICK = dict(setups="1x2,2x1,3x1", fit="1x2,2x1", collectives="allreduce,allgather", min="4K", max="1M",
             iters=2, warmup=1, rounds=3,
             measurements=os.path.join(RESULTS, "sim_calibration_quick.json"),
             out=os.path.join(RESULTS, "sim_calibration_quick_report.json"))
FULL = dict(setups=",".join(DEFAULT_SETUPS), fit=",".join(DEFAULT_FIT), collectives=",".join(COLLECTIVES),
            min="4K", max="64M", iters=5, warmup=1, rounds=6,
            measurements=os.path.join(RESULTS, "sim_calibration.json"),
            out=os.path.join(RESULTS, "sim_calibration_report.json"))


# ---------------------------------------------------------------- small helpers

def parse_size(text):
    """'4096', '4K', '64M', '1G' (powers of 1024, as ddl_perf's -b/-e) -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)B?\s*", text.upper())
    if not m or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError("not a size: %r (use 4096, 64K, 64M)" % text)
    return int(m.group(1)) * {"": 1, "K": K, "M": M, "G": 1 << 30}[m.group(2)]


def parse_setup(text):
    """'2x2', '2x2r2', '2x2@10gbit', '1x4' -> dict; its name is the canonical spelling."""
    m = re.fullmatch(r"([0-9]+)x([0-9]+)(?:r([0-9]+))?(?:@([0-9.]+[kmg]?bit))?", text.strip().lower())
    if not m:
        raise Failure("setup %r: expected HxL, HxLrK, HxL@RATE or HxLrK@RATE (e.g. 2x2, 2x2r2, 2x2@10gbit)"
                      % text)
    hosts, per_host = int(m.group(1)), int(m.group(2))
    rails = int(m.group(3) or 1)
    rate = m.group(4) or "1gbit"
    if hosts < 1 or per_host < 1 or rails < 1 or hosts * per_host < 2:
        raise Failure("setup %r: needs at least 2 ranks, 1 rail" % text)
    try:
        rate_bps = rate_bytes(rate)
    except argparse.ArgumentTypeError as err:
        raise Failure("setup %r: %s" % (text, err))
    name = "%dx%d" % (hosts, per_host) + ("r%d" % rails if rails != 1 else "") + \
           ("@%s" % rate if rate != "1gbit" else "")
    return dict(name=name, hosts=hosts, per_host=per_host, rails=rails, rate=rate, rate_bps=rate_bps)


def plain(x):
    """x with SIG significant digits and no exponent: 0.000012345, 4000000000."""
    s = "%.*g" % (SIG, x)
    if "e" in s:
        s = ("%.20f" % float(s)).rstrip("0").rstrip(".")
    return s


def round_sig(x):
    return float("%.*g" % (SIG, x))


def key_text(key, value):
    """A fitted value as ddl_sim's --set and cluster files take it (SI units inside)."""
    if key in RATE_KEYS:
        return plain(value / 1e9) + "GB"
    if key in TIME_KEYS:
        return plain(value * 1e6) + "us"
    return plain(value)


def parse_described(key, text):
    """`ddl_sim --describe`'s value of key -> SI (bytes/s, seconds)."""
    if key in RATE_KEYS:
        if text == "0":
            return 0.0
        m = re.fullmatch(r"([0-9.eE+-]+)Gbit", text)
        if not m:
            raise Failure("ddl_sim --describe printed %s = %r: expected a rate in Gbit" % (key, text))
        return float(m.group(1)) * 1e9 / 8
    if key in TIME_KEYS:
        m = re.fullmatch(r"([0-9.eE+-]+)us", text)
        if not m:
            raise Failure("ddl_sim --describe printed %s = %r: expected a time in us" % (key, text))
        return float(m.group(1)) * 1e-6
    try:
        return float(text)
    except ValueError:
        raise Failure("ddl_sim --describe printed %s = %r: cannot fit a key that is not a number" % (key, text))


def clamp(key, value):
    lo, hi = LIMITS.get(key, (0.0, math.inf))
    return round_sig(min(max(value, lo), hi))


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


# ---------------------------------------------------------------- the model

class Simulator:
    """ddl_sim runs for (setup, collective) under given constants, in parallel, memoised."""

    def __init__(self, args, binary, tmpdir):
        self.args, self.binary, self.tmpdir = args, binary, tmpdir
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
        self.cache = {}
        self.calls = 0
        self.counter = 0
        self.lock = threading.Lock()

    def command(self, setup, collective, rec, constants, json_path):
        cmd = [self.binary, "--cluster", self.args.cluster, "-N", str(setup["hosts"]), "-g", str(setup["per_host"]),
               "-C", collective, "-b", str(rec["min"]), "-e", str(rec["max"]), "-f", str(rec["factor"]),
               "--set", "nics=%d" % setup["rails"], "--set", "nic_rate=%sGbit" % plain(setup["rate_bps"] * 8 / 1e9)]
        for key in sorted(constants):
            cmd += ["--set", "%s=%s" % (key, key_text(key, constants[key]))]
        if setup["hosts"] == 1:
            cmd += ["-a", "ring"]  # as ddl_perf ran there
        return cmd + ["-J", json_path]

    def one(self, setup, collective, rec, constants):
        with self.lock:
            self.counter += 1
            json_path = os.path.join(self.tmpdir, "sim%d.json" % self.counter)
        cmd = self.command(setup, collective, rec, constants, json_path)
        run_command(cmd, "ddl_sim %s on setup %s" % (collective, setup["name"]), self.args.sim_timeout)
        try:
            with open(json_path) as f:
                rows = sorted(json.load(f)["results"], key=lambda r: r["size"])
            os.unlink(json_path)
            times = [float(r["out_of_place"]["time_us"]) for r in rows]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise Failure("ddl_sim %s on setup %s wrote no readable JSON (%s): %s" % (
                collective, setup["name"], err, " ".join(cmd)))
        if len(times) != len(rec["time_us"]):
            raise Failure("ddl_sim %s on setup %s: %d sizes, the measurement has %d: %s" % (
                collective, setup["name"], len(times), len(rec["time_us"]), " ".join(cmd)))
        return dict(time_us=times, algorithm=[r.get("algorithm") for r in rows], sizes=[r["size"] for r in rows])

    def predict_many(self, cases, constant_sets):
        """For each constants dict: {(setup name, collective): prediction}. cases: [(setup,
        collective, rec)]. All the ddl_sim calls of all the sets go to the pool at once."""
        keys = [tuple(sorted((k, key_text(k, v)) for k, v in c.items())) for c in constant_sets]
        futures = {}
        for key, constants in zip(keys, constant_sets):
            for s, c, rec in cases:
                case = (key, s["name"], c)
                if case not in self.cache and case not in futures:
                    futures[case] = self.pool.submit(self.one, s, c, rec, constants)
        for case, future in futures.items():
            self.cache[case] = future.result()
        self.calls += len(futures)
        return [{(s["name"], c): self.cache[(key, s["name"], c)] for s, c, rec in cases} for key in keys]


def weight(size, args):
    return 1.0 if size >= args.large else args.small_weight


def objective(cases, predictions, args):
    total = 0.0
    for setup, collective, rec in cases:
        sim = predictions[(setup["name"], collective)]["time_us"]
        for size, measured, predicted in zip(rec["sizes"], rec["time_us"], sim):
            if measured > 0 and predicted > 0:
                total += weight(size, args) * math.log(predicted / measured) ** 2
    return total


def fit(sim, cases, initial, args):
    x = dict(initial)
    best = objective(cases, sim.predict_many(cases, [x])[0], args)
    start = best
    log("fit: %d setup x collective cases, objective %.4f at the start" % (len(cases), best))
    for rnd in range(args.rounds):
        scale = 0.5 ** rnd
        moved = []
        for key in args.keys:
            cands = []
            for f in FACTORS:
                v = clamp(key, (x[key] if x[key] > 0 else 1e-7 if key in TIME_KEYS else 1e6) * f ** scale)
                if v != x[key] and v not in cands:
                    cands.append(v)
            trials = [dict(x, **{key: v}) for v in cands]
            scores = [objective(cases, p, args) for p in sim.predict_many(cases, trials)]
            i = min(range(len(scores)), key=scores.__getitem__) if scores else None
            if i is not None and scores[i] < best * (1 - 1e-9):
                moved.append("%s %s->%s" % (key, key_text(key, x[key]), key_text(key, cands[i])))
                x, best = trials[i], scores[i]
        log("fit: round %d/%d (steps x%.3g..x%.3g): objective %.4f; %s" % (
            rnd + 1, args.rounds, FACTORS[0] ** scale, FACTORS[-1] ** scale, best,
            "; ".join(moved) if moved else "no key moved"))
    return x, start, best


# ---------------------------------------------------------------- report

def errors_of(rec, pred, args):
    rows = []
    for i, (size, measured) in enumerate(zip(rec["sizes"], rec["time_us"])):
        predicted = pred["time_us"][i]
        err = predicted / measured - 1 if measured > 0 else float("nan")
        rows.append(dict(size=size, sim_size=pred["sizes"][i], measured_us=measured, predicted_us=predicted,
                         error=err, algorithm=pred["algorithm"][i], measured_algorithm=rec["algorithm"][i]))
    return rows


def stats(rows, args):
    large = [abs(r["error"]) for r in rows if r["size"] >= args.large and math.isfinite(r["error"])]
    if not large:  # no size reaches --large: every size counts
        large = [abs(r["error"]) for r in rows if math.isfinite(r["error"])]
    if not large:
        return None, None
    return statistics.median(large), max(large)


def report(setups, fit_names, measured, before, after, constants, initial, objectives, args, seconds):
    setups_out = []
    lines = []
    header = ["setup", "role", "collective", "median |err|", "worst |err|", "start: median", "worst", "target"]
    body = []
    met = missed = 0
    for s in setups:
        role = "fitted" if s["name"] in fit_names else "held out"
        entry = dict(name=s["name"], role=role, hosts=s["hosts"], per_host=s["per_host"], rails=s["rails"],
                     rate=s["rate"], collectives={})
        for c in args.collectives:
            rec = measured[s["name"]][c]
            rows = errors_of(rec, after[(s["name"], c)], args)
            rows0 = errors_of(rec, before[(s["name"], c)], args)
            med, worst = stats(rows, args)
            med0, worst0 = stats(rows0, args)
            for r, r0 in zip(rows, rows0):
                r["initial_predicted_us"], r["initial_error"] = r0["predicted_us"], r0["error"]
            target = None
            if role == "held out" and med is not None:
                target = med <= TARGET_MEDIAN and worst <= TARGET_WORST
                met, missed = met + target, missed + (not target)
            entry["collectives"][c] = dict(median_abs_error=med, worst_abs_error=worst,
                                           initial_median_abs_error=med0, initial_worst_abs_error=worst0,
                                           targets_met=target, iters=rec["iters"], warmup=rec["warmup"],
                                           sizes=rows)
            body.append([s["name"], role, c, pct(med), pct(worst), pct(med0), pct(worst0),
                         "-" if target is None else "MET" if target else "MISSED"])
        setups_out.append(entry)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines.append("  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    lines += ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in body]
    text = ["## ddl_sim calibration", "",
            "errors: |sim / measured - 1| over the sizes from %s up (%s .. %s by %d); 'start': the "
            "constants of %s, before the fit; targets for held-out setups: median <= %d%%, worst <= %d%%" % (
                human(args.large), human(args.min), human(args.max), SIZE_FACTOR, os.path.relpath(args.cluster, REPO)
                if os.path.isabs(args.cluster) else args.cluster, TARGET_MEDIAN * 100, TARGET_WORST * 100),
            ""] + lines + [""]
    if args.details:
        for e in setups_out:
            for c, r in e["collectives"].items():
                text.append("%s %s: %s" % (e["name"], c, ", ".join(
                    "%s %.0f/%.0f us %+.0f%%" % (human(x["size"]), x["predicted_us"], x["measured_us"],
                                                 100 * x["error"]) for x in r["sizes"])))
        text.append("")
    if met + missed:
        text.append("held-out targets: %d of %d setup x collective met" % (met, met + missed))
    else:
        text.append("held-out targets: no held-out setup (every setup was fitted)")
    text.append("objective (sum of w log(sim/measured)^2 over the fitted setups): %.4f at the start, %.4f fitted" % objectives)
    text += ["", "fitted constants (started from):"]
    for k in args.keys:
        text.append("  %-17s = %-12s (%s)" % (k, key_text(k, constants[k]), key_text(k, initial[k])))
    text.append("")
    text.append("%d ddl_sim runs; %.0f s in all" % (args.sim_calls, seconds))
    out = dict(tool="sim_calibrate", when=datetime.datetime.now().isoformat(timespec="seconds"),
               argv=sys.argv[1:], cluster=args.cluster, keys=args.keys, fit=sorted(fit_names),
               collectives=args.collectives, large=args.large, small_weight=args.small_weight,
               targets=dict(median=TARGET_MEDIAN, worst=TARGET_WORST),
               initial={k: key_text(k, initial[k]) for k in args.keys},
               fitted={k: key_text(k, constants[k]) for k in args.keys},
               objective=dict(initial=objectives[0], fitted=objectives[1]),
               held_out_targets=dict(met=met, missed=missed), setups=setups_out, seconds=round(seconds, 1))
    return "\n".join(text), out


def write_cluster(path, base, constants, fit_names, note):
    """base's text with the fitted keys' values replaced (its comments and other keys kept)."""
    with open(base) as f:
        lines = f.read().splitlines()
    mark = "# Fitted by bench/sim_calibrate.py"
    lines = [l for l in lines if not l.startswith(mark)]
    done, out = set(), []
    for line in lines:
        body, hash_, comment = line.partition("#")
        key = body.split("=", 1)[0].strip() if "=" in body else None
        if key in constants:
            line = "%s = %s" % (key, key_text(key, constants[key])) + ("  #" + comment if hash_ else "")
            done.add(key)
        out.append(line)
    out += ["%s = %s" % (k, key_text(k, constants[k])) for k in sorted(constants) if k not in done]
    header = 0
    while header < len(out) and out[header].startswith("#"):
        header += 1
    out.insert(header, "%s on %s from setups %s; %s" % (
        mark, datetime.date.today().isoformat(), ",".join(sorted(fit_names)), note))
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setups", help="setups to measure and report, HxL[rK][@RATE], comma-separated "
                                    "(default %s; --quick: %s)" % (FULL["setups"], QUICK["setups"]))
    p.add_argument("--fit", help="the setups the constants are fitted on; the others are held out "
                                 "(default %s; --quick: %s)" % (FULL["fit"], QUICK["fit"]))
    p.add_argument("--collectives", help="default %s" % FULL["collectives"])
    p.add_argument("--min", type=parse_size, help="smallest size (default 4K)")
    p.add_argument("--max", type=parse_size, help="largest size (default 64M; --quick: 1M); sizes x4")
    p.add_argument("-n", "--iters", type=int, help="ddl_perf -n (default 5; --quick: 2)")
    p.add_argument("-w", "--warmup", type=int, help="ddl_perf -w (default 1)")
    p.add_argument("--measurements", help="the measurements' JSON (default bench/results/sim_calibration.json; "
                                          "--quick: sim_calibration_quick.json)")
    p.add_argument("--reuse", action="store_true",
                   help="skip measuring the setups and collectives already in --measurements with these sizes")
    p.add_argument("--measure-only", action="store_true", help="measure, then stop")
    p.add_argument("--cluster", default=os.path.join(REPO, "tools", "ddl_sim", "clusters", "emulated-1g.cluster"),
                   help="the cluster file the fit starts from (default tools/ddl_sim/clusters/emulated-1g.cluster)")
    p.add_argument("--keys", default=",".join(DEFAULT_KEYS), help="the keys to fit (default %(default)s)")
    p.add_argument("--rounds", type=int, help="coordinate-descent rounds (default 6; --quick: 3)")
    p.add_argument("--large", type=parse_size, default=64 * K,
                   help="errors are reported from this size up, and weigh 1 in the fit (default 64K)")
    p.add_argument("--small-weight", type=float, default=0.2,
                   help="the fit's weight of the sizes below --large (default %(default)s)")
    p.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2),
                   help="ddl_sim runs at once (default %(default)s)")
    p.add_argument("--out", help="the report's JSON (default bench/results/sim_calibration_report.json)")
    p.add_argument("--write-cluster", metavar="FILE", help="write the fitted cluster file there")
    p.add_argument("--details", action="store_true", help="also print predicted/measured per size")
    p.add_argument("--quick", action="store_true",
                   help="CI: fit 1x2,2x1, predict 3x1; allreduce, allgather; 4K..1M; -n 2 -w 1; 3 rounds")
    p.add_argument("--build-dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")),
                   help="build directory with ddlrun, ddl_perf, ddl_sim (default $DDL_BUILD_DIR or build)")
    p.add_argument("--spin", default="20", help="DDL_SPIN_BEFORE_YIELD for the ranks (default 20: the "
                                                "emulated hosts share this machine's cores)")
    p.add_argument("--timeout", type=int, default=300, help="seconds allowed for one ddl_perf run (default 300)")
    p.add_argument("--sim-timeout", type=int, default=120, help="seconds allowed for one ddl_sim run (default 120)")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for name in ("setups", "fit", "collectives", "min", "max", "iters", "warmup", "rounds", "measurements", "out"):
        if getattr(args, name) is None:
            value = defaults[name]
            setattr(args, name, parse_size(value) if name in ("min", "max") else value)
    args.collectives = [c for c in args.collectives.split(",") if c]
    for c in args.collectives:
        if c not in COLLECTIVES:
            p.error("unknown collective %r (known: %s)" % (c, ", ".join(COLLECTIVES)))
    args.keys = [k for k in args.keys.split(",") if k]
    for k in args.keys:
        if k in ("name", "fabric", "single_copy", "hosts", "ranks_per_host", "nics", "nic_rate", "chunk_bytes",
                 "hosts_per_leaf"):
            p.error("--keys: %s is not a constant to fit" % k)
    if args.min > args.max:
        p.error("--min is above --max")
    if args.iters < 1 or args.warmup < 0 or args.rounds < 0 or args.jobs < 1:
        p.error("--iters and --jobs must be >= 1, --warmup and --rounds >= 0")
    args.cluster = os.path.abspath(args.cluster)
    return args


def interrupted(signum, frame):
    raise KeyboardInterrupt  # the same cleanup as ^C: emulated hosts removed, ranks stopped


def main(argv):
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    started = time.time()
    setups = [parse_setup(s) for s in args.setups.split(",") if s]
    fit_setups = [parse_setup(s) for s in args.fit.split(",") if s]
    names = [s["name"] for s in setups]
    if len(set(names)) != len(names):
        raise Failure("--setups names a setup twice: %s" % args.setups)
    for s in fit_setups:  # a fitted setup not in --setups is measured and reported too
        if s["name"] not in names:
            setups.insert(0, s)
            names.insert(0, s["name"])
    fit_names = {s["name"] for s in fit_setups}
    if not fit_names:
        raise Failure("--fit names no setup")
    bins = {b: os.path.join(args.build_dir, "tools", b, b) for b in ("ddlrun", "ddl_perf", "ddl_sim")}
    for b, path in bins.items():
        if not os.access(path, os.X_OK):
            raise Failure("%s is not built in %s (cmake --build %s -j2 --target %s)" % (b, args.build_dir,
                                                                                     args.build_dir, b))
    if not os.path.isfile(args.cluster):
        raise Failure("--cluster %s: no such file" % args.cluster)

    described = run_command([bins["ddl_sim"], "--cluster", args.cluster, "--describe"],
                            "ddl_sim --describe of %s" % args.cluster, args.sim_timeout)
    values = dict(line.split(" = ", 1) for line in described.splitlines() if " = " in line)
    for k in args.keys:
        if k not in values:
            raise Failure("--keys: ddl_sim knows no key %r (it knows %s)" % (k, ", ".join(sorted(values))))
    initial = {k: round_sig(parse_described(k, values[k])) for k in args.keys}

    measured = measure(setups, args, bins)
    if args.measure_only:
        log("measured: %s" % args.measurements)
        return 0

    cases_fit = [(s, c, measured[s["name"]][c]) for s in setups if s["name"] in fit_names for c in args.collectives]
    cases_all = [(s, c, measured[s["name"]][c]) for s in setups for c in args.collectives]
    with tempfile.TemporaryDirectory(prefix="sim_calibrate.") as tmp:
        sim = Simulator(args, bins["ddl_sim"], tmp)
        try:
            t0 = time.time()
            constants, obj0, obj1 = fit(sim, cases_fit, initial, args)
            log("fit: done in %.0f s (%d ddl_sim runs)" % (time.time() - t0, sim.calls))
            before, after = sim.predict_many(cases_all, [initial, constants])
        finally:
            sim.pool.shutdown(wait=True, cancel_futures=True)
        args.sim_calls = sim.calls
    text, out = report(setups, fit_names, measured, before, after, constants, initial, (obj0, obj1),
                       args, time.time() - started)
    print(text, flush=True)
    write_json(args.out, out)
    log("written: %s" % args.out)
    if args.write_cluster:
        note = "held-out targets met: %d of %d" % (out["held_out_targets"]["met"],
                                                  out["held_out_targets"]["met"] + out["held_out_targets"]["missed"])
        write_cluster(args.write_cluster, args.cluster, constants, fit_names, note)
        run_command([bins["ddl_sim"], "--cluster", args.write_cluster, "--describe"],
                    "ddl_sim --describe of the written %s" % args.write_cluster, args.sim_timeout)
        log("written: %s" % args.write_cluster)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as err:
        log("sim_calibrate: error: %s" % err)
        sys.exit(1)
    except KeyboardInterrupt:
        log("sim_calibrate: interrupted")
        sys.exit(130)

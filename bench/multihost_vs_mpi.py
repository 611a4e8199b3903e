#!/usr/bin/env python3
"""ddl's allreduce (and allgather, reduce-scatter, broadcast, alltoall) next to Open MPI's across
emulated hosts, in one command (issue 11, item 9; alltoall: issue 23).

For each setup (hosts x ranks per host x rails, sizes) it makes the hosts with
`tools/emuhosts/emuhosts run` (network namespaces, every NIC shaped to --rate with tc tbf both
ways; everything is removed afterwards, even on ^C), and inside them runs, alternating for R
rounds (the order flips every round):

  ddl:  ddlrun -H h0:P,h1:P --launch-agent "$EMUHOSTS_AGENT" -x DDL_SPIN_BEFORE_YIELD=20 --
        ddl_perf -C COLL -b N -e N -n ITERS -w W -c 0 [-a hier|ring]  (default choice, hier, ring)
        (no DDL_RAILS: with R > 1 NICs ddl drives them all by default)
  MPI:  emuhosts exec h0 -- mpirun --allow-run-as-root --mca plm_rsh_agent "$EMUHOSTS_AGENT"
        --bind-to none -H h0:P,h1:P -np H*P mpi_allreduce (same flags)

Open MPI runs with its own choices (coll tuned, pml ob1, btl tcp between hosts and vader
inside one; the tcp btl uses every NIC it finds). Both programs share ddl_perf's driver: the
time is the mean per iteration over -n iterations, the maximum across ranks; the out-of-place
time is reported. Per setup, size and library: the median over the rounds, the link bound

  bound(N) = f * N / (R * B)      h hosts, R rails, B = rate in bytes/s (1gbit: 125e6)

with f = 2(h-1)/h for an allreduce of N bytes, (h-1)/h for an allgather or reduce-scatter of
N bytes in all (ddl_perf's size: the gathered output, the scattered input), 1 for a
broadcast (every other host receives N) and L(h-1)/h for an alltoall whose ranks send N bytes
each (L ranks per host): each host must send
and receive at least f * N bytes over its R links. Also what plain TCP achieves with that
traffic on the same links in the same rounds (bench/tcp_ring.py: every host sends f * N / R
bytes to the next host and receives as much from the previous one on each rail, all at once; TCP's headers alone keep it below ~95.6% of the nominal bound), the
speedup
over Open MPI (MPI time / ddl time; > 1: ddl faster) and % of the bound (bound / time), the
bytes each host sent on each NIC, and the issue's targets with their verdicts.

DDL_SPIN_BEFORE_YIELD=20: the emulated hosts share this machine's cores, but every "host"
believes it has them to itself, so ddl would spin 2000 polls before yielding and starve the
ranks of the other hosts.

Results: bench/results/<timestamp>-multihost.md and .json (git-ignored).

  python3 bench/multihost_vs_mpi.py                       # every setup, 3 rounds (~6-8 min)
  python3 bench/multihost_vs_mpi.py -s 2x2,lat -r 5
  python3 bench/multihost_vs_mpi.py --list                # the setups
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

# One way to run a command with a deadline and clean up its process group, shared with the
# one-host bench.
from allreduce_vs_mpi import Failure, log, run_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMUHOSTS = os.path.join(REPO, "tools", "emuhosts", "emuhosts")
M = 1 << 20

# name: (hosts, ranks per host, rails, sizes (a geometric series), iterations, warmup,
# description, collective)
SETUPS = {
    "2x2": (2, 2, 1, [16 * M, 64 * M], 3, 1, "2 hosts x 2 ranks, 1 NIC", "allreduce"),
    "2x2mid": (2, 2, 1, [M, 4 * M], 20, 2, "2 hosts x 2 ranks, 1 NIC, 1-4 MB (hier's pieces)",
               "allreduce"),
    "2x4mid": (2, 4, 1, [M, 4 * M], 20, 2, "2 hosts x 4 ranks, 1 NIC, 1-4 MB (hier's pieces)",
               "allreduce"),
    "lat": (2, 1, 1, [8], 2000, 100, "2 hosts x 1 rank, 8 B latency", "allreduce"),
    "2x4": (2, 4, 1, [64 * M], 3, 1, "2 hosts x 4 ranks, 1 NIC", "allreduce"),
    "4x1": (4, 1, 1, [64 * M], 3, 1, "4 hosts x 1 rank, 1 NIC", "allreduce"),
    "2x2r2": (2, 2, 2, [16 * M, 64 * M], 3, 1, "2 hosts x 2 ranks x 2 rails", "allreduce"),
    "2x2ag": (2, 2, 1, [16 * M, 64 * M], 3, 1, "allgather, 2 hosts x 2 ranks, 1 NIC", "allgather"),
    "2x2rs": (2, 2, 1, [16 * M, 64 * M], 3, 1, "reduce-scatter, 2 hosts x 2 ranks, 1 NIC",
              "reduce_scatter"),
    "4x1bc": (4, 1, 1, [4096, M], 200, 20, "broadcast, 4 hosts x 1 rank, 1 NIC", "broadcast"),
    "2x2a2a": (2, 2, 1, [16 * M, 64 * M], 3, 1, "alltoall, 2 hosts x 2 ranks, 1 NIC", "alltoall"),
    "4x1a2a": (4, 1, 1, [16 * M, 64 * M], 3, 1, "alltoall, 4 hosts x 1 rank, 1 NIC", "alltoall"),
    "2x2r2a2a": (2, 2, 2, [64 * M], 3, 1, "alltoall, 2 hosts x 2 ranks x 2 rails", "alltoall"),
    # Not in the default run (8 ranks on this machine's 2 cores: minutes a round); by name.
    "4x2": (4, 2, 1, [64 * M], 3, 1, "4 hosts x 2 ranks, 1 NIC", "allreduce"),
    "2x2r2bc": (2, 2, 2, [16 * M, 64 * M], 3, 1, "broadcast, 2 hosts x 2 ranks x 2 rails",
                "broadcast"),
    "4x2rs": (4, 2, 1, [M, 8 * M, 64 * M], 3, 1, "reduce-scatter, 4 hosts x 2 ranks, 1 NIC",
              "reduce_scatter"),
    "4x2ag": (4, 2, 1, [M, 8 * M, 64 * M], 3, 1, "allgather, 4 hosts x 2 ranks, 1 NIC", "allgather"),
    "4x2r2bc": (4, 2, 2, [16 * M, 64 * M], 3, 1, "broadcast, 4 hosts x 2 ranks x 2 rails",
                "broadcast"),
}
ORDER = ["2x2", "2x2mid", "2x4mid", "lat", "2x4", "4x1", "2x2r2", "2x2ag", "2x2rs", "4x1bc", "2x2a2a", "4x1a2a",
         "2x2r2a2a"]
ALGOS = ["default", "hier", "ring"]


def rate_bytes(text):
    """tc rate '1gbit', '100mbit', '2.5gbit' -> bytes per second."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError("rate must look like 1gbit, 100mbit, 2.5gbit: %r" % text)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def human(size):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d B" % size


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-s", "--setups", default=",".join(ORDER),
                   help="comma-separated setups, in order (default %s; --list)" % ",".join(ORDER))
    p.add_argument("-r", "--rounds", type=int, default=3, help="alternating rounds per setup (default 3)")
    p.add_argument("-n", "--iters", type=int, help="iterations for large sizes (default: the setup's, 3)")
    p.add_argument("--lat-iters", type=int, help="iterations for the 8 B setup (default 2000)")
    p.add_argument("-a", "--algos", default=",".join(ALGOS),
                   help="ddl variants: default (the cost models choose), hier, ring (the chain for a broadcast), ...; "
                        "a variant may add settings for every rank, e.g. hier+DDL_CMA=0 (default %s)"
                        % ",".join(ALGOS))
    p.add_argument("--rate", default="1gbit", help="each NIC's rate, both ways (tc units; default 1gbit)")
    p.add_argument("--build-dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")),
                   help="build directory with ddlrun, ddl_perf, mpi_allreduce (default build)")
    p.add_argument("--no-mpi", action="store_true", help="ddl only")
    p.add_argument("--no-tcp", action="store_true", help="skip the plain-TCP measurement of the links")
    p.add_argument("--mpi-mca", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Open MPI --mca setting (repeatable), e.g. mpi_yield_when_idle=1")
    p.add_argument("--spin", default="20",
                   help="DDL_SPIN_BEFORE_YIELD for ddl's ranks (default 20, see above; 'unset': ddl's own "
                        "default, 2000 polls unless it sees oversubscription)")
    p.add_argument("--timeout", type=int, default=300, help="seconds allowed for one run (default 300)")
    p.add_argument("--list", action="store_true", help="print the setups and exit")
    p.add_argument("--inner", help=argparse.SUPPRESS)  # setup name, run inside emuhosts run
    p.add_argument("--inner-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.setups = [s for s in args.setups.split(",") if s]
    for s in args.setups:
        if s not in SETUPS:
            p.error("unknown setup %r (known: %s)" % (s, ", ".join(ORDER)))
    args.algos = [a for a in args.algos.split(",") if a]
    args.rate_bps = rate_bytes(args.rate)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    return args


def traffic_factor(collective, hosts, per_host=1):
    """The share of N bytes each host must send (and receive) in the collective: a broadcast's
    every other host receives all of it; an alltoall's N is what each rank sends in all, of
    which each of a host's L ranks sends (H-1)/H to the other hosts."""
    if collective == "broadcast":
        return 1.0
    if collective == "alltoall":
        return per_host * (hosts - 1) / hosts
    return (2.0 if collective == "allreduce" else 1.0) * (hosts - 1) / hosts


def setup_params(name, args):
    hosts, per_host, rails, sizes, iters, warmup, what, collective = SETUPS[name]
    if sizes == [8] and args.lat_iters:
        iters = args.lat_iters
    elif sizes != [8] and args.iters:
        iters = args.iters
    return dict(name=name, hosts=hosts, per_host=per_host, rails=rails, sizes=sizes, iters=iters,
                warmup=warmup, what=what, collective=collective)


def nic_tx_bytes(setup):
    """{host: {ethK: tx bytes}} read from each host's /proc/net/dev."""
    out = {}
    for h in range(setup["hosts"]):
        text = run_command([EMUHOSTS, "exec", "h%d" % h, "--", "cat", "/proc/net/dev"], "reading counters", 30)
        nics = {}
        for line in text.splitlines():
            if ":" not in line:
                continue
            name, fields = line.split(":", 1)
            name, fields = name.strip(), fields.split()
            if name.startswith("eth") and len(fields) >= 9:
                nics[name] = int(fields[8])
        out["h%d" % h] = nics
    return out


def tcp_ring_run(setup, ddlrun, agent, timeout):
    """One round of bench/tcp_ring.py per size: the time plain TCP takes to move what each host
    must send for the setup's collective of that size (the slowest host's)."""
    h, rails = setup["hosts"], setup["rails"]
    hostlist = ",".join("h%d:1" % i for i in range(h))
    times = {}
    for size in setup["sizes"]:
        per_rail = int(traffic_factor(setup["collective"], h, setup["per_host"]) * size / rails)
        cmd = [ddlrun, "-H", hostlist, "--launch-agent", agent, "--", sys.executable,
               os.path.join(REPO, "bench", "tcp_ring.py"), "--bytes", str(per_rail), "--rails", str(rails)]
        out = run_command(cmd, "tcp_ring in setup %s" % setup["name"], timeout)
        seconds = [float(x) for x in re.findall(r"tcp_ring host \d+ seconds ([0-9.]+)", out)]
        if len(seconds) != h:
            raise Failure("tcp_ring printed %d of %d hosts' times: %s" % (len(seconds), h, out[-500:]))
        times[str(size)] = max(seconds) * 1e6
    return dict(times=times, in_place=times, tx={}, load=[os.getloadavg()[0]] * 2, seconds=0)


def inner(args):
    setup = setup_params(args.inner, args)
    agent = os.environ["EMUHOSTS_AGENT"]
    hostlist = ",".join("h%d:%d" % (h, setup["per_host"]) for h in range(setup["hosts"]))
    nranks = setup["hosts"] * setup["per_host"]
    sizes = setup["sizes"]
    factor = sizes[1] // sizes[0] if len(sizes) > 1 else 2
    # A broadcast's flat algorithm is the chain, an alltoall's the pairwise exchange.
    flat = {"broadcast": "chain", "alltoall": "pairwise"}.get(setup["collective"])
    algos = [(flat + a[4:]) if flat and a.split("+")[0] == "ring" else a for a in args.algos]
    libs = ["ddl:" + a for a in algos] + ([] if args.no_mpi else ["mpi"])
    # Plain TCP's figure includes setting up its connections: meaningful for large sizes only.
    if not args.no_tcp and min(sizes) >= 16 * M:
        libs.append("tcp")
    bins = dict(ddlrun=os.path.join(args.build_dir, "tools", "ddlrun", "ddlrun"),
                ddl_perf=os.path.join(args.build_dir, "tools", "ddl_perf", "ddl_perf"),
                mpi_allreduce=os.path.join(args.build_dir, "bench", "mpi_allreduce"))
    runs = {lib: [] for lib in libs}
    names = {}
    json_path = "/tmp/multihost_vs_mpi.%d.json" % os.getpid()
    for rnd in range(args.rounds):
        for lib in libs if rnd % 2 == 0 else list(reversed(libs)):
            flags = ["-C", setup["collective"], "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(factor), "-n", str(setup["iters"]),
                     "-w", str(setup["warmup"]), "-c", "0", "-J", json_path]
            if lib == "tcp":
                log("  %s round %d/%d: tcp" % (setup["name"], rnd + 1, args.rounds))
                runs[lib].append(tcp_ring_run(setup, bins["ddlrun"], agent, args.timeout))
                names[lib] = "TCP"
                continue
            if lib == "mpi":
                cmd = [EMUHOSTS, "exec", "h0", "--", "mpirun", "--allow-run-as-root", "--mca", "plm_rsh_agent",
                       agent, "--bind-to", "none", "-H", hostlist, "-np", str(nranks)]
                for kv in args.mpi_mca:
                    k, _, v = kv.partition("=")
                    cmd += ["--mca", k, v]
                cmd += [bins["mpi_allreduce"]] + flags
            else:
                algo, *settings = lib.split(":", 1)[1].split("+")
                cmd = [bins["ddlrun"], "-H", hostlist, "--launch-agent", agent]
                for setting in settings:
                    cmd += ["-x", setting]
                if args.spin != "unset":
                    cmd += ["-x", "DDL_SPIN_BEFORE_YIELD=%s" % args.spin]
                # No DDL_RAILS: with R > 1 NICs per host ddl drives every one by default.
                cmd += ["--", bins["ddl_perf"]] + flags
                if algo != "default":
                    cmd += ["-a", algo]
            if os.path.exists(json_path):
                os.unlink(json_path)
            log("  %s round %d/%d: %s" % (setup["name"], rnd + 1, args.rounds, lib))
            before_tx, load0, t0 = nic_tx_bytes(setup), os.getloadavg()[0], time.time()
            run_command(cmd, "%s in setup %s" % (lib, setup["name"]), args.timeout)
            seconds, load1, after_tx = time.time() - t0, os.getloadavg()[0], nic_tx_bytes(setup)
            try:
                with open(json_path) as f:
                    report = json.load(f)
            except (OSError, ValueError) as err:
                raise Failure("%s wrote no readable JSON (%s): %s" % (lib, err, " ".join(cmd)))
            names[lib] = report.get("library", lib)
            times = {str(r["size"]): r["out_of_place"]["time_us"] for r in report["results"]}
            # Open MPI's reduce-scatter has no in-place form in mpi_allreduce: None there.
            inplace = {str(r["size"]): (r["in_place"] or {}).get("time_us") for r in report["results"]}
            tx = {h: {nic: after_tx[h][nic] - before_tx[h].get(nic, 0) for nic in after_tx[h]}
                  for h in after_tx}
            runs[lib].append(dict(times=times, in_place=inplace, tx=tx, load=[load0, load1], seconds=seconds))
    if os.path.exists(json_path):
        os.unlink(json_path)
    with open(args.inner_out, "w") as f:
        json.dump(dict(setup=setup, runs=runs, names=names, libs=libs), f)
    return 0


# ---------------------------------------------------------------- outside: setups, tables

def run_setup(name, args, argv):
    setup = setup_params(name, args)
    out = "/tmp/multihost_vs_mpi.%d.%s.json" % (os.getpid(), name)
    cmd = [EMUHOSTS, "run", "--name", "mhb%d" % os.getpid(), "--hosts", str(setup["hosts"]),
           "--rails", str(setup["rails"]), "--rate", args.rate, "--",
           sys.executable, os.path.abspath(__file__)] + argv + ["--inner", name, "--inner-out", out]
    log("%s (%s): %d rounds" % (name, setup["what"], args.rounds))
    start = time.time()
    # Its children log to stderr: let that through, keep stdout for the result.
    proc = subprocess.Popen(cmd, start_new_session=True)
    budget = args.timeout * (len(args.algos) + 1) * args.rounds + 120
    try:
        rc = proc.wait(timeout=budget)
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)  # emuhosts run removes the hosts on SIGTERM
        proc.wait(timeout=60)
        raise
    if rc != 0:
        raise Failure("setup %s failed (exit status %d): %s" % (name, rc, " ".join(cmd)))
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    result["seconds"] = time.time() - start
    return result


def summarize(result, args):
    setup = result["setup"]
    h, rails = setup["hosts"], setup["rails"]
    table = []
    for size in setup["sizes"]:
        bound_us = (traffic_factor(setup["collective"], h, setup["per_host"]) * size /
                    (rails * args.rate_bps) * 1e6)
        bound1_us = bound_us * rails
        row = {"size": size, "bound_us": bound_us, "bound_1rail_us": bound1_us, "libs": {}}
        mpi_t = tcp_t = None
        if result["runs"].get("mpi"):
            mpi_t = statistics.median([r["times"][str(size)] for r in result["runs"]["mpi"]])
        if result["runs"].get("tcp"):
            tcp_t = statistics.median([r["times"][str(size)] for r in result["runs"]["tcp"]])
        for lib in result["libs"]:
            ts = [r["times"][str(size)] for r in result["runs"][lib]]
            t = statistics.median(ts)
            row["libs"][lib] = dict(time_us=t, all_us=ts, min_us=min(ts), max_us=max(ts),
                                    speedup_vs_mpi=(mpi_t / t) if mpi_t else None,
                                    pct_bound=100.0 * bound_us / t, pct_bound_1rail=100.0 * bound1_us / t,
                                    pct_tcp=(100.0 * tcp_t / t) if tcp_t else None)
        table.append(row)
    result["table"] = table
    return result


def verdicts(result):
    s = result["setup"]
    rows = {r["size"]: r for r in result["table"]}
    d = "ddl:default"
    out = []

    def get(size):
        r = rows.get(size)
        return r["libs"].get(d) if r else None

    if s["name"] == "2x2":
        for size in (16 * M, 64 * M):
            x = get(size)
            if not x:
                continue
            out.append(("%s: ddl default >= 95%% of the bound" % human(size), x["pct_bound"] >= 95,
                        "%.1f%%" % x["pct_bound"]))
            if x["speedup_vs_mpi"]:
                out.append(("%s: ddl default >= 1.4x Open MPI" % human(size), x["speedup_vs_mpi"] >= 1.4,
                            "%.2fx" % x["speedup_vs_mpi"]))
    elif s["name"] == "2x4":
        x = get(64 * M)
        if x and x["speedup_vs_mpi"]:
            out.append(("64 MB: ddl default >= 1.6x Open MPI", x["speedup_vs_mpi"] >= 1.6,
                        "%.2fx" % x["speedup_vs_mpi"]))
    elif s["name"] == "4x1":
        x = get(64 * M)
        if x:
            out.append(("64 MB: ddl default >= 95% of the bound", x["pct_bound"] >= 95, "%.1f%%" % x["pct_bound"]))
    elif s["name"] == "lat":
        x = get(8)
        if x and x["speedup_vs_mpi"]:
            mpi = rows[8]["libs"]["mpi"]["time_us"]
            out.append(("8 B: ddl default time <= Open MPI's", x["time_us"] <= mpi,
                        "ddl %.1f us, MPI %.1f us" % (x["time_us"], mpi)))
    elif s["name"] == "2x2r2":
        for size in s["sizes"]:
            x = get(size)
            if x:
                out.append(("%s: ddl default >= 90%% of the 2-rail bound" % human(size), x["pct_bound"] >= 90,
                            "%.1f%% (%.1f%% of the 1-rail bound)" % (x["pct_bound"], x["pct_bound_1rail"])))
    elif s["collective"] != "allreduce":
        # Issue 15 asks every collective to be no slower than Open MPI (there on one host).
        for size in s["sizes"]:
            x = get(size)
            if x and x["speedup_vs_mpi"]:
                out.append(("%s %s: ddl default time <= Open MPI's" % (s["collective"], human(size)),
                            x["speedup_vs_mpi"] >= 1, "%.2fx" % x["speedup_vs_mpi"]))
    return [(name, "MET" if ok else "MISSED", numbers) for name, ok, numbers in out]


def render(result, args):
    s = result["setup"]
    lines = ["### %s: %s, %s per NIC" % (s["name"], s["what"], args.rate), ""]
    loads = [l for lib in result["libs"] for r in result["runs"][lib] for l in r["load"]]
    lines.append("- %d alternating rounds, %d iterations (%d warmup) per run; out-of-place time, median of the "
                 "rounds; %s; DDL_SPIN_BEFORE_YIELD %s; %.0f s; 1-min load average %.1f..%.1f during the runs" % (
                     args.rounds, s["iters"], s["warmup"], " vs ".join(sorted(set(result["names"].values()))),
                     args.spin, result["seconds"], min(loads), max(loads)))
    if s["sizes"] != [8]:
        lines.append("- %s float32%s; bound = %s x N / (R x B), h = %d, R = %d, B = %.0f B/s" % (
            s["collective"], " sum" if s["collective"] in ("allreduce", "reduce_scatter") else "",
            {"allreduce": "2(h-1)/h", "broadcast": "1",
             "alltoall": "L(h-1)/h (L = %d ranks per host; N: what each rank sends)" % s["per_host"]}.get(
                s["collective"], "(h-1)/h"), s["hosts"], s["rails"],
            args.rate_bps))
    lines.append("")
    lat = s["sizes"] == [8]
    header = ["size", "library", "median (ms)" if not lat else "median (us)", "min..max",
              "vs MPI (MPI time / time)"] + ([] if lat else ["% of bound"] + (["% of 1-rail bound"] if s["rails"] > 1 else []) + ["% of TCP"])
    body = []
    for row in result["table"]:
        if not lat:
            bound_fmt = "%.3f" if row["bound_us"] < 1000 else "%.1f"
            body.append([human(row["size"]), "bound", bound_fmt % (row["bound_us"] / 1e3), "", "", "100.0"] +
                        (["%.1f" % (100.0 * row["bound_1rail_us"] / row["bound_us"])] if s["rails"] > 1 else []) +
                        [""])
        for lib in result["libs"]:
            x = row["libs"][lib]
            scale = 1.0 if lat else 1e3
            fmt = "%.3f" if not lat and x["time_us"] < 1000 else "%.1f"  # sub-ms sizes in ms
            cells = [human(row["size"]), lib.replace("ddl:", "ddl "), fmt % (x["time_us"] / scale),
                     (fmt % (x["min_us"] / scale)) + ".." + (fmt % (x["max_us"] / scale)),
                     "%.2fx" % x["speedup_vs_mpi"] if x["speedup_vs_mpi"] else "-"]
            if not lat:
                cells.append("%.1f" % x["pct_bound"])
                if s["rails"] > 1:
                    cells.append("%.1f" % x["pct_bound_1rail"])
                cells.append("%.1f" % x["pct_tcp"] if x["pct_tcp"] else "-")
            body.append(cells)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(header, widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |" for r in body]
    if True:
        # Bytes each host sent per NIC (median over the rounds): shows which rails carry the data.
        parts = []
        for lib in result["libs"]:
            if not result["runs"][lib][0]["tx"]:
                continue  # tcp_ring: its bytes are what it was told to send
            per = []
            for host in sorted(result["runs"][lib][0]["tx"]):
                nics = sorted(result["runs"][lib][0]["tx"][host])
                per.append("%s %s" % (host, "/".join(
                    "%.1f" % (statistics.median([r["tx"][host][nic] for r in result["runs"][lib]]) / 1e6)
                    for nic in nics)))
            parts.append("%s: %s" % (lib.replace("ddl:", "ddl "), ", ".join(per)))
        lines += ["", "MB sent per host and run (%s): %s" % (
            "/".join("eth%d" % k for k in range(s["rails"])), "; ".join(parts))]
    lines.append("")
    for name, verdict, numbers in result["verdicts"]:
        lines.append("- target %s: **%s** (%s)" % (name, verdict, numbers))
    return "\n".join(lines) + "\n"


def main(argv):
    args = parse_args(argv)
    if args.list:
        for name in ORDER + [name for name in SETUPS if name not in ORDER]:
            h, p, r, sizes, iters, w, what, collective = SETUPS[name]
            print("%-6s %s; sizes %s; %d iterations" % (name, what, ", ".join(human(x) for x in sizes), iters))
        return 0
    if args.inner:
        return inner(args)
    if os.geteuid() != 0:
        raise Failure("emulated hosts need root")
    for prog in ("tools/ddlrun/ddlrun", "tools/ddl_perf/ddl_perf") + (() if args.no_mpi else ("bench/mpi_allreduce",)):
        if not os.access(os.path.join(args.build_dir, prog), os.X_OK):
            raise Failure("%s is not built in %s (cmake --build %s -j2 --target ddl_perf ddlrun mpi_allreduce)"
                          % (prog, args.build_dir, args.build_dir))
    started = time.time()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results, text = [], ["## collectives across emulated hosts (%s)" % stamp, "",
                         "`python3 bench/multihost_vs_mpi.py %s`" % " ".join(argv), ""]
    for name in args.setups:
        result = summarize(run_setup(name, args, argv), args)
        result["verdicts"] = verdicts(result)
        part = render(result, args)
        print(part, flush=True)
        text.append(part)
        results.append(result)
    summary = ["### Targets", ""] + ["- %s, %s: **%s** (%s)" % ((r["setup"]["name"],) + v)
                                     for r in results for v in r["verdicts"]]
    print("\n".join(summary))
    text += summary
    results_dir = os.path.join(REPO, "bench", "results")
    os.makedirs(results_dir, exist_ok=True)
    base = os.path.join(results_dir, "%s-multihost" % stamp)
    with open(base + ".md", "w") as f:
        f.write("\n".join(text) + "\n")
    with open(base + ".json", "w") as f:
        json.dump(dict(results=results, argv=argv, rate_bps=args.rate_bps), f, indent=1)
    log("written: %s.md and .json; done in %.0f s" % (base, time.time() - started))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as err:
        log("multihost_vs_mpi: error: %s" % err)
        sys.exit(1)
    except KeyboardInterrupt:
        log("multihost_vs_mpi: interrupted")
        sys.exit(130)

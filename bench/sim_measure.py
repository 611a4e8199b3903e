#!/usr/bin/env python3
"""The measuring half of bench/sim_calibrate.py: ddl_perf over the sizes of a plan, for each
collective, on one host (shared memory, `-a ring`: the schedule path ddl_sim models) or on
emulated hosts (`emuhosts run` around `sim_measure.py --inner PLAN`, which runs ddl_perf under
ddlrun -H with the hosts' launch agent). Measurements are kept in a JSON file so that a fit can
reuse them (sim_calibrate.py --reuse).
"""

import collections
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_vs_mpi import Failure, log, run_command  # noqa: E402
from multihost_vs_mpi import human  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMUHOSTS = os.path.join(REPO, "tools", "emuhosts", "emuhosts")
SIZE_FACTOR = 4  # sizes from --min to --max, times 4 (nccl-tests' -f)


def ladder(lo, hi, factor=SIZE_FACTOR):
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- measuring

def perf_flags(collective, plan, json_path):
    return ["-C", collective, "-b", str(plan["min"]), "-e", str(plan["max"]), "-f", str(SIZE_FACTOR),
            "-n", str(plan["iters"]), "-w", str(plan["warmup"]), "-c", "0", "-J", json_path]


def measure_collectives(setup, plan, agent, out):
    """Runs ddl_perf for each collective of plan on setup (inside emuhosts when agent is set),
    filling out = {collective: record}. Raises Failure naming the setup and collective."""
    bins = plan["bins"]
    json_path = os.path.join(tempfile.gettempdir(), "sim_calibrate.%d.json" % os.getpid())
    for collective in plan["collectives"]:
        if agent:
            hostlist = ",".join("h%d:%d" % (h, setup["per_host"]) for h in range(setup["hosts"]))
            cmd = [bins["ddlrun"], "-H", hostlist, "--launch-agent", agent]
        else:
            cmd = [bins["ddlrun"], "-n", str(setup["per_host"])]
        cmd += ["-x", "DDL_SPIN_BEFORE_YIELD=%s" % plan["spin"], "--", bins["ddl_perf"]]
        cmd += perf_flags(collective, plan, json_path)
        if setup["hosts"] == 1:
            cmd += ["-a", "ring"]  # without it one host takes a path ddl_sim does not model
        if os.path.exists(json_path):
            os.unlink(json_path)
        what = "ddl_perf %s on setup %s" % (collective, setup["name"])
        log("  %s: %s" % (setup["name"], collective))
        load0, t0 = os.getloadavg()[0], time.time()
        run_command(cmd, what, plan["timeout"])
        seconds, load1 = time.time() - t0, os.getloadavg()[0]
        try:
            with open(json_path) as f:
                report = json.load(f)
            rows = sorted(report["results"], key=lambda r: r["size"])
            times = [float(r["out_of_place"]["time_us"]) for r in rows]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise Failure("%s wrote no readable JSON (%s): %s" % (what, err, " ".join(cmd)))
        finally:
            if os.path.exists(json_path):
                os.unlink(json_path)
        want = len(ladder(plan["min"], plan["max"]))
        if len(rows) != want:
            raise Failure("%s: %d sizes in its JSON, expected %d (%s .. %s by %d)" % (
                what, len(rows), want, human(plan["min"]), human(plan["max"]), SIZE_FACTOR))
        out[collective] = dict(min=plan["min"], max=plan["max"], factor=SIZE_FACTOR, iters=plan["iters"],
                               warmup=plan["warmup"], sizes=[r["size"] for r in rows], time_us=times,
                               algorithm=[r.get("algorithm") for r in rows], seconds=round(seconds, 2),
                               load=[load0, load1],
                               when=datetime.datetime.now().isoformat(timespec="seconds"))


def inner(plan_path):
    """Inside `emuhosts run`: measure the plan's setup, write the result (or the error)."""
    with open(plan_path) as f:
        plan = json.load(f)
    result = dict(collectives={})
    agent = os.environ.get("EMUHOSTS_AGENT")
    try:
        if not agent:
            raise Failure("EMUHOSTS_AGENT is not set: --inner runs under emuhosts run only")
        measure_collectives(plan["setup"], plan, agent, result["collectives"])
    except Failure as err:
        result["error"] = str(err)
    write_json(plan["out"], result)
    return 0 if "error" not in result else 3


def run_emulated(setup, plan, got):
    """emuhosts run around `this script --inner PLAN`: fills got = {collective: record}."""
    with tempfile.TemporaryDirectory(prefix="sim_calibrate.") as tmp:
        plan = dict(plan, setup=setup, out=os.path.join(tmp, "out.json"))
        plan_path = os.path.join(tmp, "plan.json")
        write_json(plan_path, plan)
        cmd = [EMUHOSTS, "run", "--name", "simcal%d" % os.getpid(), "--hosts", str(setup["hosts"]),
               "--rails", str(setup["rails"]), "--rate", setup["rate"], "--",
               sys.executable, os.path.abspath(__file__), "--inner", plan_path]
        budget = plan["timeout"] * len(plan["collectives"]) + 120
        # Its output goes through to ours as it comes; the last lines are kept for the error.
        tail = collections.deque(maxlen=15)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                sys.stderr.write(line)
                sys.stderr.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=budget)
        except BaseException as exc:
            # emuhosts run removes the hosts on SIGTERM; SIGKILL only if it does not finish.
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
            if isinstance(exc, subprocess.TimeoutExpired):
                raise Failure("setup %s: timed out after %d s (--timeout x collectives + 120): %s\n%s" % (
                    setup["name"], budget, " ".join(cmd), "\n".join(tail)))
            raise
        reader.join(timeout=10)
        result = None
        if os.path.exists(plan["out"]):
            with open(plan["out"]) as f:
                result = json.load(f)
        if result:
            got.update(result["collectives"])
        if result and "error" in result:
            raise Failure(result["error"])
        if rc != 0 or not result:
            raise Failure("setup %s: emuhosts run failed (exit status %d): %s\n%s" % (
                setup["name"], rc, " ".join(cmd), "\n".join(tail)))


def measure(setups, args, bins):
    """Fills args.measurements' file with what is missing; returns {setup name: {coll: rec}}."""
    data = {"version": 1, "setups": {}}
    if os.path.exists(args.measurements):
        try:
            with open(args.measurements) as f:
                data = json.load(f)
            data.setdefault("setups", {})
        except (OSError, ValueError) as err:
            raise Failure("cannot read --measurements %s (%s): remove it or name another" % (args.measurements, err))
    want = ladder(args.min, args.max)
    plan = dict(collectives=None, min=args.min, max=args.max, iters=args.iters, warmup=args.warmup,
                timeout=args.timeout, spin=args.spin, bins=bins)
    for setup in setups:
        stored = data["setups"].get(setup["name"], {}).get("collectives", {})
        todo = [c for c in args.collectives
                if not (args.reuse and c in stored and len(stored[c]["sizes"]) == len(want)
                        and stored[c]["min"] == args.min and stored[c]["max"] == args.max)]
        if not todo:
            log("%s: reusing the measurements in %s" % (setup["name"], args.measurements))
            continue
        if setup["hosts"] > 1 and os.geteuid() != 0:
            raise Failure("setup %s: emulated hosts need root (or --reuse with measurements of it in %s)"
                          % (setup["name"], args.measurements))
        log("%s: measuring %s (%s .. %s, -n %d -w %d)" % (setup["name"], ",".join(todo), human(args.min),
                                                          human(args.max), args.iters, args.warmup))
        t0 = time.time()
        step = dict(plan, collectives=todo)
        got = {}
        try:
            if setup["hosts"] == 1:
                measure_collectives(setup, step, None, got)
            else:
                run_emulated(setup, step, got)
        finally:  # after every setup, even a failed one: what was measured stays
            if got:
                entry = data["setups"].setdefault(setup["name"], {})
                entry.update({k: setup[k] for k in ("hosts", "per_host", "rails", "rate")})
                entry.setdefault("collectives", {}).update(got)
                write_json(args.measurements, data)
        log("%s: measured in %.0f s" % (setup["name"], time.time() - t0))
    return {s["name"]: data["setups"][s["name"]]["collectives"] for s in setups}


if __name__ == "__main__":
    # Only as `sim_measure.py --inner PLAN`, inside `emuhosts run` (run_emulated).
    if len(sys.argv) != 3 or sys.argv[1] != "--inner":
        sys.exit("usage: sim_measure.py --inner PLAN (bench/sim_calibrate.py runs it)")
    sys.exit(inner(sys.argv[2]))

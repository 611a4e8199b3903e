#!/usr/bin/env python3
"""The chaos runs behind scripts/chaos.sh (see there for the what and why).

Each run: `ddlrun -n RANKS` of ddl_chaos_driver (allreduces of random sizes, 1 B .. 8 MB,
until something fails), SIGKILL of one random rank at a random moment from its start
(during init too), then checks that
  - every survivor exits by itself, non-zero (10: init failed, 11: a collective failed), with
    an error message (ddl_comm_last_error) that names the killed rank;
  - nothing hangs: every survivor is gone within --deadline seconds of the kill;
  - no rank process and no new /dev/shm entry is left behind.
Prints one line per run, the failures in detail, time-to-exit percentiles and the pass count.
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purpose (its parent reaps it).
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def parse_result(path):
    try:
        with open(path) as f:
            line = f.read().rstrip("\n")
    except OSError:
        return None
    head, _, msg = line.partition(" msg=")
    fields = dict(kv.split("=", 1) for kv in head.split(" ") if "=" in kv)
    fields["msg"] = msg
    return fields


RANK_LIST = re.compile(r"\branks? (\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)")


def mentioned_ranks(msg, self_rank):
    """Ranks a message talks about, leaving out the rank's own "rank N:" prefixes."""
    text = re.sub(r"\brank %d:" % self_rank, "", msg)
    ranks = set()
    for m in RANK_LIST.finditer(text):
        for part in m.group(1).split(", "):
            a, _, b = part.partition("-")
            ranks.update(range(int(a), int(b or a) + 1))
    return ranks


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def shm_in_use():
    """/dev/shm names some live process has open or mapped."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/maps" % pid) as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        used.add(line[i + 9:].split(" (deleted)")[0].strip())
            for fd in os.listdir("/proc/%s/fd" % pid):
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if target.startswith("/dev/shm/"):
                    used.add(target[9:].split(" (deleted)")[0])
        except OSError:
            continue
    return used


def one_run(args, run, rng):
    rundir = tempfile.mkdtemp(prefix="ddl-chaos-")
    victim = rng.randrange(args.ranks)
    # A third of the kills land in the first 120 ms (init takes ~80 ms here: bootstrap,
    # placements, UCX), the rest anywhere in the next few seconds of allreduces.
    delay = rng.uniform(0, 0.12) if rng.random() < 0.33 else rng.uniform(0.12, args.max_delay)
    seed = rng.randrange(1 << 30)
    shm_before = shm_entries()
    cmd = [args.ddlrun, "-n", str(args.ranks), "--tag-output", "--grace-ms", "60000",
           "--timeout", str(args.deadline + args.max_delay + 30),
           "-x", "DDL_TIMEOUT_MS=%d" % args.timeout_ms, "-x", "CHAOS_DIR=" + rundir,
           "-x", "CHAOS_SEED=%d" % seed, "-x", "CHAOS_MAX_SECONDS=%d" % (args.max_delay + 60),
           "--", args.driver]
    out = open(os.path.join(rundir, "out.txt"), "wb")
    job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    t_start = time.time()
    res = {"run": run, "victim": victim, "delay_ms": delay * 1000, "dir": rundir, "problems": []}

    # The clock starts when every rank is up (its SIGTERM handler installed), before any of
    # them has finished ddl_comm_init_from_env (~80 ms here).
    pid_files = [os.path.join(rundir, "pid.%d" % r) for r in range(args.ranks)]
    while (not all(os.path.exists(f) for f in pid_files) and time.time() - t_start < 20 and
           job.poll() is None):
        time.sleep(0.0005)
    res["ready_at_start"] = sum(os.path.exists(os.path.join(rundir, "ready.%d" % r))
                                for r in range(args.ranks))
    vpid = read_pid(pid_files[victim])
    if vpid is None:
        res["problems"].append("victim rank %d never started" % victim)
    else:
        time.sleep(delay)
        ready = [r for r in range(args.ranks)
                 if os.path.exists(os.path.join(rundir, "ready.%d" % r))]
        res["phase"] = "run" if len(ready) == args.ranks else "init"
        res["ready"] = ready
        t_kill = time.time_ns()
        try:
            os.kill(vpid, signal.SIGKILL)
        except ProcessLookupError:
            res["problems"].append("victim rank %d had already exited" % victim)
        res["t_kill"] = t_kill

    # Every survivor must be gone by the deadline; then ddlrun ends too.
    deadline = time.time() + args.deadline
    while job.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    pids = {r: read_pid(os.path.join(rundir, "pid.%d" % r)) for r in range(args.ranks)}
    hung = []
    if job.poll() is None:
        hung = [r for r, p in pids.items() if p and r != victim and alive(p)]
        res["problems"].append("HANG: ranks %s still running %d s after the kill"
                               % (hung, args.deadline))
        for r in hung:  # the stacks say where they wait
            try:
                res.setdefault("stacks", {})[r] = subprocess.run(
                    ["gdb", "-p", str(pids[r]), "-batch", "-ex", "thread apply all bt 12"],
                    capture_output=True, text=True, timeout=60).stdout[-3000:]
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in pids.values():
            if p and alive(p):
                os.kill(p, signal.SIGKILL)
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait()
    out.close()
    res["ddlrun_rc"] = job.returncode

    # How each survivor ended.
    res["survivors"] = {}
    for r in range(args.ranks):
        if r == victim:
            continue
        info = parse_result(os.path.join(rundir, "result.%d" % r))
        s = {"code": None, "named": False, "mentioned": set(), "ms": None}
        res["survivors"][r] = s
        if r in hung:
            s["what"] = "hung"
            continue
        if info is None:
            res["problems"].append("rank %d left no result (crashed or was killed)" % r)
            s["what"] = "no result"
            continue
        s.update(code=int(info["code"]), what=info["what"], result=info["result"],
                 msg=info["msg"], iter=int(info["iter"]))
        if "t_kill" in res:
            s["ms"] = (int(info["t_exit_ns"]) - res["t_kill"]) / 1e6
            if int(info["t_error_ns"]) > 0:
                s["err_ms"] = (int(info["t_error_ns"]) - res["t_kill"]) / 1e6
        s["mentioned"] = mentioned_ranks(info["msg"], r)
        s["named"] = victim in s["mentioned"]
        if s["code"] not in (10, 11):
            res["problems"].append("rank %d exited with code %s (%s): %s"
                                   % (r, s["code"], s["what"], info["msg"][:300]))
        elif not s["named"]:
            res["problems"].append("rank %d does not name rank %d (names %s): %s"
                                   % (r, victim, sorted(s["mentioned"]) or "none",
                                      info["msg"][:400]))

    time.sleep(0.2)
    left = [r for r, p in pids.items() if p and alive(p)]
    if left:
        res["problems"].append("processes left behind: ranks %s" % left)
        for r in left:
            os.kill(pids[r], signal.SIGKILL)
    # New entries that no live process holds: left behind (by this job, unless another job
    # on the machine leaked one at the same moment).
    new_shm = shm_entries() - shm_before
    orphans = sorted(new_shm - shm_in_use()) if new_shm else []
    if orphans:
        res["problems"].append("/dev/shm entries left behind: %s" % orphans[:10])
    res["ok"] = not res["problems"]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddlrun", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--deadline", type=float, default=40.0,
                    help="seconds after the kill by which every survivor must have exited")
    ap.add_argument("--max-delay", type=float, default=3.0,
                    help="latest kill, in seconds after the victim started")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("chaos: %d runs of %d ranks, DDL_TIMEOUT_MS=%d, deadline %.0f s after the kill, seed %d"
          % (args.runs, args.ranks, args.timeout_ms, args.deadline, seed), flush=True)
    print("%4s %6s %5s %8s  %s" % ("run", "victim", "phase", "kill_ms", "survivors: rank code ms named"),
          flush=True)
    results = []
    for run in range(1, args.runs + 1):
        res = one_run(args, run, rng)
        results.append(res)
        cells = []
        for r, s in sorted(res["survivors"].items()):
            ms = "%.0f" % s["ms"] if s["ms"] is not None else "-"
            cells.append("%d:%s/%s/%s" % (r, s["code"], ms, "y" if s["named"] else "N"))
        print("%4d %6d %5s %8.0f  %s%s" % (run, res["victim"], res.get("phase", "?"),
                                          res["delay_ms"], " ".join(cells),
                                          "" if res["ok"] else "  FAIL"), flush=True)
        for p in res["problems"]:
            print("%26s %s" % ("-", p[:300]), flush=True)
        if not args.keep and res["ok"]:
            subprocess.run(["rm", "-rf", res["dir"]])

    # Summary.
    passed = sum(r["ok"] for r in results)
    print()
    print("== failures")
    for res in results:
        if res["ok"]:
            continue
        print("run %d: victim rank %d, phase %s, kill at %.0f ms, ddlrun rc %s, dir %s"
              % (res["run"], res["victim"], res.get("phase"), res["delay_ms"], res["ddlrun_rc"],
                 res["dir"]))
        for p in res["problems"]:
            print("   - " + p)
        for r, st in res.get("stacks", {}).items():
            print("   stack of rank %d:\n%s" % (r, "\n".join("      " + l for l in st.splitlines())))
    if passed == len(results):
        print("none")

    def table(title, pick):
        ms = [s["ms"] for r in results if pick(r) for s in r["survivors"].values()
              if s["ms"] is not None]
        if not ms:
            return
        print("%-34s %5d %8.0f %8.0f %8.0f %8.0f" % (title, len(ms), percentile(ms, 50),
                                                     percentile(ms, 90), percentile(ms, 99),
                                                     max(ms)))
    print()
    print("== time from the kill to each survivor's exit (ms)")
    print("%-34s %5s %8s %8s %8s %8s" % ("", "n", "p50", "p90", "p99", "max"))
    table("all survivors", lambda r: True)
    table("killed during init", lambda r: r.get("phase") == "init")
    table("killed during allreduces", lambda r: r.get("phase") == "run")
    for v in range(args.ranks):
        table("victim rank %d" % v, lambda r, v=v: r["victim"] == v)
    err = [s["err_ms"] for r in results for s in r["survivors"].values() if "err_ms" in s]
    if err:
        print("%-34s %5d %8.0f %8.0f %8.0f %8.0f" % ("(kill -> error returned)", len(err),
                                                     percentile(err, 50), percentile(err, 90),
                                                     percentile(err, 99), max(err)))
    kinds = {}
    for r in results:
        for s in r["survivors"].values():
            k = "%s %s" % (s.get("what"), s.get("result", ""))
            kinds[k] = kinds.get(k, 0) + 1
    print()
    print("== how survivors ended")
    for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print("%5d  %s" % (n, k))
    named = sum(s["named"] for r in results for s in r["survivors"].values())
    total = sum(len(r["survivors"]) for r in results)
    print()
    print("survivors naming the killed rank: %d of %d" % (named, total))
    print("PASSED %d of %d runs" % (passed, len(results)))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Kill -> first collective on the shrunk communicator, on one host, settings side by side.

    python3 bench/recovery_one_host.py --build-dir build-gpu --rounds 3 \\
        --setting keep: --setting new:DDL_SHRINK_KEEP_CONNECTIONS=0

Runs test_elastic's kill tests (4 ranks, rank 2 killed mid-allreduce; 8 ranks, rank 5; 16
ranks, rank 9), each setting in turn within every round (alternating, so that the machine's
load falls on all alike), and prints, per test and setting, the median over rounds of the
survivors' median and slowest kill -> first collective, and the shrink itself (rank 0's,
from its log line). Settings are NAME:VAR=VALUE[,VAR=VALUE...]; an empty list is the default.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

TESTS = {
    "4 ranks, rank 2 killed": "elastic/a_rank_killed_mid_allreduce_is_shrunk_away",
    "8 ranks, rank 5 killed": "elastic/a_rank_killed_among_8_is_shrunk_away",
    "16 ranks, rank 9 killed": "elastic/a_rank_killed_among_16_is_shrunk_away",
}
KILL_LINE = re.compile(r"kill -> first collective on the shrunk communicator ([0-9.]+) s")
SHRINK_LINE = re.compile(r"ddl\[0\] info: shrink: rank 0 of .*\), ([0-9.]+) s")


def parse_setting(text):
    name, _, assignments = text.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        key, _, value = item.partition("=")
        env[key] = value
    return name, env


def run_once(binary, test_filter, env):
    full_env = dict(os.environ, DDL_LOG_LEVEL="info", **env)
    out = subprocess.run([binary, "--jobs", "1", "--verbose", "--filter", test_filter],
                         env=full_env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    if "Failing: 0" not in text or "Crashing: 0" not in text:
        sys.exit(f"{test_filter} failed with {env}:\n{text[-3000:]}")
    kills = [float(t) for t in KILL_LINE.findall(text)]
    shrinks = [float(t) for t in SHRINK_LINE.findall(text)]
    return kills, shrinks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default="build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--setting", action="append", default=[])
    args = p.parse_args()
    settings = [parse_setting(s) for s in (args.setting or ["default:"])]
    binary = os.path.join(args.build_dir, "tests", "multiproc", "test_elastic")
    results = {(t, name): [] for t in TESTS for name, _ in settings}
    for _ in range(args.rounds):
        for test, test_filter in TESTS.items():
            for name, env in settings:
                results[(test, name)].append(run_once(binary, test_filter, env))
    print("| test | setting | kill -> first collective, survivors' median | slowest survivor "
          "| rank 0's shrink |")
    print("|---|---|---:|---:|---:|")
    for test in TESTS:
        for name, _ in settings:
            rounds = results[(test, name)]
            medians = [statistics.median(k) for k, _ in rounds]
            slowest = [max(k) for k, _ in rounds]
            shrinks = [s[0] for _, s in rounds if s]
            shrink = f"{statistics.median(shrinks):.3f} s" if shrinks else "-"
            print(f"| {test} | {name} | {statistics.median(medians):.3f} s "
                  f"({min(medians):.3f}-{max(medians):.3f}) | {statistics.median(slowest):.3f} s "
                  f"| {shrink} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ddl.jax against JAX's own multi-process CPU collectives (gloo), side by side in one run
(issue 36, item 4): an allreduce of 4 KB, 1 MB and 25 MB inside a jit-compiled function, and
examples/jax_train.py's step, on 2 and 4 processes of this machine, the two alternating for
--rounds rounds (the order flips every round); medians, and the ratio gloo / ddl (> 1: ddl
faster).

    python3 bench/jax_vs_gloo.py                    # writes bench/results/<date>-jax.md
    python3 bench/jax_vs_gloo.py -n 2 -r 3

  ddl:  ddlrun -n P python bench/jax_vs_gloo.py --rank ddl   (ddl.jax.allreduce in jax.jit)
  jax:  ddlrun -n P python bench/jax_vs_gloo.py --rank jax   (jax.distributed with gloo, psum
        under shard_map over every process's CPU device; ddlrun only starts the processes)

Both time the call from Python, dispatch included (y = f(x); y.block_until_ready()), the
median over --iters calls after warming up, the largest across processes.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [4 << 10, 1 << 20, 25 << 20]


def rank_main(backend, iters, coordinator, out):
    import numpy as np
    import jax
    import jax.numpy as jnp

    rank, size = int(os.environ["DDL_RANK"]), int(os.environ["DDL_WORLD_SIZE"])
    if backend == "ddl":
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        import ddl.jax
        comm = ddl.jax.init()
        f = jax.jit(lambda x: ddl.jax.allreduce(x))

        def place(x):
            return jnp.asarray(x)  # on JAX's CPU device, as the gloo run's array is
    else:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator, num_processes=size, process_id=rank)
        try:
            from jax import shard_map
        except ImportError:
            from jax.experimental.shard_map import shard_map
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        mesh = Mesh(np.array(jax.devices()), ("dp",))
        kw = {"check_vma": False}
        try:
            summed = shard_map(lambda x: jax.lax.psum(x, "dp"), mesh=mesh, in_specs=P("dp"),
                               out_specs=P("dp"), **kw)
        except TypeError:
            summed = shard_map(lambda x: jax.lax.psum(x, "dp"), mesh=mesh, in_specs=P("dp"),
                               out_specs=P("dp"), check_rep=False)
        f = jax.jit(summed)

        def place(x):
            return jax.make_array_from_process_local_data(NamedSharding(mesh, P("dp")), x)
    medians = {}
    for nbytes in SIZES:
        x = place(np.full(nbytes // 4, float(rank + 1), np.float32))
        want = size * (size + 1) / 2
        for _ in range(3):
            y = f(x)
        y.block_until_ready()
        got = float(np.asarray(y.addressable_data(0) if hasattr(y, "addressable_data") else y)[0])
        if got != want:
            sys.exit(f"rank {rank}: {backend} allreduce of {nbytes} B gave {got}, not {want}")
        n = max(5, iters if nbytes < (1 << 20) else iters // 10)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            f(x).block_until_ready()
            times.append(time.perf_counter() - t0)
        medians[nbytes] = statistics.median(times) * 1e6
    with open(f"{out}.{rank}", "w") as f:
        json.dump(medians, f)


def launch(nprocs, command, timeout=300):
    ddlrun = os.path.join(os.environ.get("DDL_BUILD_DIR") or os.path.join(REPO, "build"), "bin",
                          "ddlrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([ddlrun, "-n", str(nprocs), "--", sys.executable] + command, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{' '.join(command)} on {nprocs} processes failed:\n{p.stdout}")
    return p.stdout


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(nprocs, backend, iters):
    """{size: slowest rank's median us}, and the example's median step in ms."""
    path = f"/tmp/ddl-jax-bench-{os.getpid()}.json"
    launch(nprocs, [os.path.abspath(__file__), "--rank", backend, "--iters", str(iters),
                    "--coordinator", f"127.0.0.1:{free_port()}", "--out", path])
    rows = []
    for r in range(nprocs):
        with open(f"{path}.{r}") as f:
            rows.append(json.load(f))
        os.unlink(f"{path}.{r}")
    calls = {s: max(row[str(s)] for row in rows) for s in SIZES}
    launch(nprocs, [os.path.join(REPO, "examples", "jax_train.py"), "--backend", backend,
                    "--steps", "60", "--json", path, "--coordinator",
                    f"127.0.0.1:{free_port()}"])
    with open(path) as f:
        step = statistics.median(json.load(f)["step_ms"][20:])
    os.unlink(path)
    return calls, step


def human(nbytes):
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", choices=["ddl", "jax"], help=argparse.SUPPRESS)
    p.add_argument("--coordinator", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("-n", "--procs", default="2,4", help="process counts (default 2,4)")
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=200, help="calls per size (large sizes: /10)")
    p.add_argument("-o", "--output", help="the markdown table (default bench/results/...)")
    args = p.parse_args()
    if args.rank:
        return rank_main(args.rank, args.iters, args.coordinator, args.out)

    lines = [f"# ddl.jax vs JAX's gloo collectives, {datetime.date.today()}", "",
             f"`python3 bench/jax_vs_gloo.py -n {args.procs} -r {args.rounds}` on "
             f"{os.cpu_count()} cores; medians over {args.rounds} rounds (alternating), each "
             "round's figure the slowest process's median call.", "",
             "| processes | what | ddl | JAX (gloo) | gloo / ddl |", "|---:|---|---:|---:|---:|"]
    for nprocs in [int(x) for x in args.procs.split(",")]:
        got = {"ddl": [], "jax": []}
        for r in range(args.rounds):
            for backend in (["ddl", "jax"] if r % 2 == 0 else ["jax", "ddl"]):
                print(f"{nprocs} processes, round {r + 1}/{args.rounds}: {backend}", flush=True)
                got[backend].append(one_round(nprocs, backend, args.iters))
        for s in SIZES:
            d = statistics.median(c[s] for c, _ in got["ddl"])
            j = statistics.median(c[s] for c, _ in got["jax"])
            lines.append(f"| {nprocs} | allreduce {human(s)} in jit | {d:.1f} us | {j:.1f} us "
                         f"| {j / d:.2f} |")
        d = statistics.median(step for _, step in got["ddl"])
        j = statistics.median(step for _, step in got["jax"])
        lines.append(f"| {nprocs} | examples/jax_train.py step | {d:.3f} ms | {j:.3f} ms "
                     f"| {j / d:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.output or os.path.join(
        REPO, "bench", "results", datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + "-jax.md")
    with open(out, "w") as f:
        f.write(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()

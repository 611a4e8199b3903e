#!/usr/bin/env python3
"""ddl inside JAX and TensorFlow programs against each framework's own multi-process CPU
collectives, side by side in one run (issue 36, item 4): an allreduce of 4 KB, 1 MB and 25 MB
inside a compiled function (`jax.jit`, `tf.function`), of the function's argument, of a
value the function computes (x * 2, as a step's gradients are) and (JAX) of an argument the
caller donates, and the examples' training step
(examples/jax_train.py, examples/keras_train.py), on 2 and 4 processes of this machine, the
two alternating for --rounds rounds (the order flips every round); medians, and the ratio
own / ddl (> 1: ddl faster).

    python3 bench/frameworks_vs_own.py                 # writes bench/results/<date>-frameworks.md
    python3 bench/frameworks_vs_own.py -F jax -n 2 -r 3

  JAX:  ddl.jax.allreduce in jax.jit, against jax.distributed with gloo (psum under shard_map
        over every process's CPU device)
  TF:   ddl.tensorflow.allreduce in tf.function, against MultiWorkerMirroredStrategy (its
        replica context's all_reduce: collective ops over gRPC)

ddlrun starts the processes in both cases. Each call is timed from Python, dispatch included,
the median over --iters calls after warming up, the largest across processes.
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
# The operand of the compiled allreduce: the function's argument; a value it computes (the
# argument times the factor), whose buffer XLA and TensorFlow may reuse in place; or (JAX
# only) an argument the caller donates (`donate_argnums`), made afresh before every call.
FORMS = {"argument": 1, "computed": 2, "donated": 1}


def jit_form(jax, fn, form):
    return jax.jit(fn, donate_argnums=(0,) if form == "donated" else ())
# framework: (ddl's backend name, the framework's own, its label, the example)
FRAMEWORKS = {
    "jax": ("ddl", "jax", "JAX (gloo)", "jax_train.py"),
    "tensorflow": ("ddl", "mwms", "TF (MultiWorkerMirrored)", "keras_train.py"),
}


def jax_allreduce(backend, coordinator, rank, size):
    """({form: the jitted allreduce}, how an array of this process's values becomes its
    input)."""
    import numpy as np
    import jax
    import jax.numpy as jnp

    if backend == "ddl":
        import ddl.jax
        ddl.jax.init()
        return {form: jit_form(jax, lambda x, k=k: ddl.jax.allreduce(x * k) if k != 1 else
                               ddl.jax.allreduce(x), form) for form, k in FORMS.items()}, \
            jnp.asarray
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes=size, process_id=rank)
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("dp",))

    def summed(k):
        body = (lambda x: jax.lax.psum(x * k, "dp")) if k != 1 else \
            (lambda x: jax.lax.psum(x, "dp"))
        try:
            return shard_map(body, mesh=mesh, in_specs=P("dp"), out_specs=P("dp"),
                             check_vma=False)
        except TypeError:
            return shard_map(body, mesh=mesh, in_specs=P("dp"), out_specs=P("dp"),
                             check_rep=False)

    return {form: jit_form(jax, summed(k), form) for form, k in FORMS.items()}, \
        lambda x: jax.make_array_from_process_local_data(NamedSharding(mesh, P("dp")), x)


def tf_allreduce(backend, port, rank, size):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if backend == "ddl":
        import ddl.tensorflow as ddl_tf
        ddl_tf.init()
        return {form: tf.function(lambda x, k=k: ddl_tf.allreduce(x * k) if k != 1 else
                                  ddl_tf.allreduce(x))
                for form, k in FORMS.items() if form != "donated"}, tf.constant
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port + k}" for k in range(size)]},
        "task": {"type": "worker", "index": rank}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # The value is made on the replica's device (tf.identity there): a tensor from outside
    # the replica function has no device the strategy's all_reduce can send to.
    def summed(k):
        return tf.function(lambda x: strategy.run(
            lambda v: tf.distribute.get_replica_context().all_reduce(
                "sum", v * k if k != 1 else tf.identity(v)), args=(x,)))

    return {form: summed(k) for form, k in FORMS.items() if form != "donated"}, tf.constant


def rank_main(framework, backend, iters, port, out):
    import numpy as np

    sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
    rank, size = int(os.environ["DDL_RANK"]), int(os.environ["DDL_WORLD_SIZE"])
    if framework == "jax":
        functions, place = jax_allreduce(backend, f"127.0.0.1:{port}", rank, size)
    else:
        functions, place = tf_allreduce(backend, port, rank, size)
    medians = {}
    for form, f in functions.items():
        fresh = form == "donated"  # a donated input is gone once the call took it
        for nbytes in SIZES:
            host = np.full(nbytes // 4, float(rank + 1), np.float32)
            x = place(host)
            want = FORMS[form] * size * (size + 1) / 2

            def check(y):
                y = np.asarray(y.addressable_data(0) if hasattr(y, "addressable_data") else y)
                if float(y.reshape(-1)[0]) != want or float(y.reshape(-1)[-1]) != want:
                    sys.exit(f"rank {rank}: {backend} allreduce of {nbytes} B ({form}) gave "
                             f"{y.reshape(-1)[0]}, not {want}")

            for _ in range(3):
                y = f(x)
                x = place(host) if fresh else x
            check(y)
            n = max(5, iters if nbytes < (1 << 20) else iters // 10)
            times = []
            for _ in range(n):
                if fresh:
                    x = place(host)
                    x.block_until_ready()
                t0 = time.perf_counter()
                y = f(x)
                if hasattr(y, "block_until_ready"):
                    y.block_until_ready()
                else:
                    y.numpy()
                times.append(time.perf_counter() - t0)
            check(y)  # the last call too: a donated input must not have been the host's array
            medians[f"{form} {nbytes}"] = statistics.median(times) * 1e6
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


def one_round(framework, nprocs, backend, iters):
    """{size: slowest rank's median us}, and the example's median step in ms."""
    path = f"/tmp/ddl-frameworks-bench-{os.getpid()}.json"
    launch(nprocs, [os.path.abspath(__file__), "--rank", framework, backend, "--iters",
                    str(iters), "--port", str(free_port()), "--out", path])
    rows = []
    for r in range(nprocs):
        with open(f"{path}.{r}") as f:
            rows.append(json.load(f))
        os.unlink(f"{path}.{r}")
    calls = {key: max(row[key] for row in rows) for key in rows[0]}
    example = FRAMEWORKS[framework][3]
    port = ["--coordinator", f"127.0.0.1:{free_port()}"] if framework == "jax" else \
        ["--port", str(free_port())]
    launch(nprocs, [os.path.join(REPO, "examples", example), "--backend", backend, "--steps",
                    "60", "--json", path] + port)
    with open(path) as f:
        step = statistics.median(json.load(f)["step_ms"][20:])
    os.unlink(path)
    return calls, step


def human(nbytes):
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("-F", "--frameworks", default="jax,tensorflow")
    p.add_argument("-n", "--procs", default="2,4", help="process counts (default 2,4)")
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=200, help="calls per size (large sizes: /10)")
    p.add_argument("-o", "--output", help="the markdown table (default bench/results/...)")
    args = p.parse_args()
    if args.rank:
        return rank_main(args.rank[0], args.rank[1], args.iters, args.port, args.out)

    lines = [f"# ddl vs the frameworks' own CPU collectives, {datetime.date.today()}", "",
             f"`python3 bench/frameworks_vs_own.py -F {args.frameworks} -n {args.procs} -r "
             f"{args.rounds}` on {os.cpu_count()} cores; medians over {args.rounds} rounds "
             "(alternating), each round's figure the slowest process's median call.", "",
             "| framework | processes | what | ddl | own | own / ddl |",
             "|---|---:|---|---:|---:|---:|"]
    for framework in args.frameworks.split(","):
        mine, theirs, label, example = FRAMEWORKS[framework]
        for nprocs in [int(x) for x in args.procs.split(",")]:
            got = {mine: [], theirs: []}
            for r in range(args.rounds):
                for backend in ([mine, theirs] if r % 2 == 0 else [theirs, mine]):
                    print(f"{framework}, {nprocs} processes, round {r + 1}/{args.rounds}: "
                          f"{backend}", flush=True)
                    got[backend].append(one_round(framework, nprocs, backend, args.iters))
            for form in [f for f in FORMS if f"{f} {SIZES[0]}" in got[mine][0][0]]:
                for s in SIZES:
                    d = statistics.median(c[f"{form} {s}"] for c, _ in got[mine])
                    o = statistics.median(c[f"{form} {s}"] for c, _ in got[theirs])
                    lines.append(f"| {label} | {nprocs} | allreduce {human(s)} compiled, "
                                 f"{form} | {d:.1f} us | {o:.1f} us | {o / d:.2f} |")
            d = statistics.median(step for _, step in got[mine])
            o = statistics.median(step for _, step in got[theirs])
            lines.append(f"| {label} | {nprocs} | examples/{example} step | {d:.3f} ms | "
                         f"{o:.3f} ms | {o / d:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.output or os.path.join(
        REPO, "bench", "results",
        datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + "-frameworks.md")
    with open(out, "w") as f:
        f.write(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()

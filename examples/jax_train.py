"""Data-parallel training of a small MLP with JAX: each process computes the gradients of its
share of the global batch in a `jax.jit`-compiled step, and the step averages them across the
processes with ddl (`ddl.jax.allreduce`, an XLA custom call inside the compiled step) or, to
compare, with JAX's own multi-process CPU collectives (`jax.lax.pmean` under `shard_map`
over every process's CPU device, gloo underneath).

    ddlrun -n 4 -- python examples/jax_train.py                      # ddl
    ddlrun -n 4 -- python examples/jax_train.py --backend jax        # JAX's gloo collectives
    mpirun -np 2 python examples/jax_train.py
    python examples/jax_train.py                                     # one process

Every run sees the same data and global batch (--global-batch samples per step, split evenly
across the processes), so the parameters it ends with do not depend on the number of
processes, up to float rounding: --check trains the same steps in this process alone on the
whole batch and prints how far apart the two are (tests/python/test_jax.py checks it).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

try:
    import ddl.jax
except ImportError:  # run from a checkout without installing: the package next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bindings", "python"))
    import ddl.jax


def make_dataset(n, features, seed):
    """A fixed regression task: Gaussian inputs, targets from a random 'teacher' network."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(np.float32)
    w = rng.standard_normal((features, 1)).astype(np.float32) / features ** 0.5
    y = np.tanh(x @ w) + 0.1 * rng.standard_normal((n, 1)).astype(np.float32)
    return x, y.astype(np.float32)


def init_params(features, hidden, seed):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w1": jax.random.normal(k1, (features, hidden)) / features ** 0.5,
            "b1": jnp.zeros(hidden),
            "w2": jax.random.normal(k2, (hidden, 1)) / hidden ** 0.5,
            "b2": jnp.zeros(1)}


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def sgd(params, grads, lr):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def ddl_step(lr):
    """One compiled step: local gradients, averaged across the processes by ddl."""
    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads, loss = ddl.jax.allreduce((grads, loss), op="avg")  # one call for all
        return sgd(params, grads, lr), loss
    return step


def jax_step(lr):
    """One compiled step: the same, averaged by JAX's own collectives (pmean over a mesh of
    every process's CPU device)."""
    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("dp",))

    def local(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return sgd(params, jax.lax.pmean(grads, "dp"), lr), jax.lax.pmean(loss, "dp")

    # Without replication checks: with them, the gradient of a replicated parameter comes
    # out of jax.grad already summed across the devices, and pmean would then double it.
    try:
        sharded = shard_map(local, mesh=mesh, in_specs=(P(), P("dp"), P("dp")),
                            out_specs=(P(), P()), check_vma=False)
    except TypeError:  # older JAX
        sharded = shard_map(local, mesh=mesh, in_specs=(P(), P("dp"), P("dp")),
                            out_specs=(P(), P()), check_rep=False)
    step = jax.jit(sharded)

    def run(params, x, y):
        # Each process holds its own share of the batch: a global array from the shares.
        gx = jax.make_array_from_process_local_data(
            jax.sharding.NamedSharding(mesh, P("dp")), x)
        gy = jax.make_array_from_process_local_data(
            jax.sharding.NamedSharding(mesh, P("dp")), y)
        return step(params, gx, gy)
    return run


def launcher_rank():
    """(rank, size) from ddlrun, mpirun, srun or torchrun; (0, 1) alone."""
    for rank, size in (("DDL_RANK", "DDL_WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                       ("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def train(args, rank, size, step, x, y):
    params = init_params(x.shape[1], args.hidden, args.seed)
    share = args.global_batch // size
    times, losses = [], []
    for s in range(args.steps):
        at = (s * args.global_batch) % (len(x) - args.global_batch + 1)
        xs = x[at + rank * share: at + (rank + 1) * share]
        ys = y[at + rank * share: at + (rank + 1) * share]
        t0 = time.perf_counter()
        params, loss = step(params, xs, ys)
        loss = float(loss)  # waits for the step
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    return params, losses, times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["ddl", "jax"], default="ddl")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--coordinator", default="127.0.0.1:29517",
                   help="--backend jax: jax.distributed's coordinator (host:port)")
    p.add_argument("--check", action="store_true",
                   help="also train alone on the whole batch and print the largest difference")
    p.add_argument("--json", help="write rank 0's losses, step times and params digest here")
    args = p.parse_args()

    rank, size = launcher_rank()
    if args.global_batch % size:
        sys.exit(f"--global-batch {args.global_batch} does not split into {size} processes")
    x, y = make_dataset(4096, args.features, args.seed)
    if args.backend == "ddl":
        if size > 1:
            ddl.jax.init()
        step = ddl_step(args.lr) if size > 1 else jax.jit(
            lambda pr, xs, ys: (sgd(pr, jax.grad(loss_fn)(pr, xs, ys), args.lr),
                                loss_fn(pr, xs, ys)))
    else:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if size > 1:
            jax.distributed.initialize(args.coordinator, num_processes=size, process_id=rank)
        step = jax_step(args.lr)
    params, losses, times = train(args, rank, size, step, x, y)

    steady = times[len(times) // 2:]  # after compiling and warming up
    if rank == 0:
        print(f"{args.backend}, {size} process(es): loss {losses[0]:.5f} -> {losses[-1]:.5f}, "
              f"median step {statistics.median(steady) * 1e3:.3f} ms")
    result = {"backend": args.backend, "processes": size, "losses": losses,
              "step_ms": [t * 1e3 for t in times]}
    if args.check:
        alone = jax.jit(lambda pr, xs, ys: (sgd(pr, jax.grad(loss_fn)(pr, xs, ys), args.lr),
                                            loss_fn(pr, xs, ys)))
        reference, _, _ = train(args, 0, 1, alone, x, y)
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
            jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(reference)))
        result["max_param_diff"] = diff
        print(f"rank {rank}: largest difference from one process on the whole batch: {diff:.3g}")
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()

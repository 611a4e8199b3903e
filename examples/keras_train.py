"""Data-parallel training of a small Keras MLP with `model.fit` on TensorFlow: each process fits
its share of every global batch, and ddl averages the gradients (ddl.tensorflow's
DistributedOptimizer) or, to compare, TensorFlow's own MultiWorkerMirroredStrategy does
(collective ops over gRPC between the processes).

    ddlrun -n 4 -- python examples/keras_train.py                    # ddl
    ddlrun -n 2 -- python examples/keras_train.py --backend mwms     # TensorFlow's strategy
    python examples/keras_train.py                                   # one process

Every run sees the same data and global batch (--global-batch samples per step, split evenly
across the processes), so the weights it ends with do not depend on the number of processes,
up to float rounding: --check fits the same steps in this process alone on whole batches and
prints how far apart the two are (tests/python/test_tensorflow.py checks it).
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

try:
    import ddl.tensorflow as ddl_tf  # noqa: E402
except ImportError:  # run from a checkout without installing: the package next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bindings", "python"))
    import ddl.tensorflow as ddl_tf  # noqa: E402


def make_dataset(n, features, seed):
    """A fixed regression task: Gaussian inputs, targets from a random 'teacher' network."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(np.float32)
    w = rng.standard_normal((features, 1)).astype(np.float32) / features ** 0.5
    return x, (np.tanh(x @ w) + 0.1 * rng.standard_normal((n, 1))).astype(np.float32)


def make_model(features, hidden, seed):
    keras.utils.set_random_seed(seed)  # the same initial weights on every process
    return keras.Sequential([keras.Input((features,)),
                             keras.layers.Dense(hidden, activation="tanh"),
                             keras.layers.Dense(1)])


def shard(x, steps, global_batch, rank, size):
    """This process's share of each of the first `steps` global batches, in order."""
    share = global_batch // size
    rows = np.concatenate([np.arange(s * global_batch + rank * share,
                                     s * global_batch + (rank + 1) * share)
                           for s in range(steps)])
    return x[rows]


class StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.t0)


def fit(model, optimizer, x, y, batch, callbacks=()):
    model.compile(optimizer=optimizer, loss="mse")
    times = StepTimes()
    history = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0,
                        callbacks=[times, *callbacks])
    return history.history["loss"][-1], times.times


def fit_mwms(strategy, args, x, y, share):
    """The same steps with TensorFlow's own collectives: a custom loop (Keras 3's fit does not
    take a multi-worker strategy's per-replica batches here), each worker's gradients of its
    share averaged by the strategy's all_reduce (one replica per worker), SGD by hand."""
    model = make_model(args.features, args.hidden, args.seed)
    weights = model.trainable_variables

    @tf.function
    def step(xb, yb):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xb) - yb) ** 2)
            grads = tape.gradient(loss, weights)
            grads = tf.distribute.get_replica_context().all_reduce("mean", grads)
            for w, g in zip(weights, grads):
                w.assign_sub(args.lr * g)
            return tf.distribute.get_replica_context().all_reduce("mean", loss)
        return strategy.run(replica, args=(xb, yb))

    times = []
    for s in range(args.steps):
        t0 = time.perf_counter()
        loss = float(step(x[s * share:(s + 1) * share], y[s * share:(s + 1) * share]))
        times.append(time.perf_counter() - t0)
    return loss, times, model


def launcher_rank():
    """(rank, size) from ddlrun, mpirun, srun or torchrun; (0, 1) alone."""
    for rank, size in (("DDL_RANK", "DDL_WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
                       ("RANK", "WORLD_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["ddl", "mwms"], default="ddl")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=29617,
                   help="--backend mwms: worker k listens on 127.0.0.1:PORT+k")
    p.add_argument("--check", action="store_true",
                   help="also fit alone on whole batches and print the largest difference")
    p.add_argument("--json", help="write rank 0's step times here")
    args = p.parse_args()

    rank, size = launcher_rank()
    if args.global_batch % size:
        sys.exit(f"--global-batch {args.global_batch} does not split into {size} processes")
    x, y = make_dataset(args.steps * args.global_batch, args.features, args.seed)
    share = args.global_batch // size
    if args.backend == "ddl":
        if size > 1:
            ddl_tf.init()
        model = make_model(args.features, args.hidden, args.seed)
        optimizer = keras.optimizers.SGD(args.lr)
        callbacks = []
        if size > 1:
            optimizer = ddl_tf.DistributedOptimizer(optimizer)
            callbacks = [ddl_tf.BroadcastInitialVariables()]
        loss, times = fit(model, optimizer, shard(x, args.steps, args.global_batch, rank, size),
                          shard(y, args.steps, args.global_batch, rank, size), share, callbacks)
    else:
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"127.0.0.1:{args.port + k}" for k in range(size)]},
            "task": {"type": "worker", "index": rank}})
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        loss, times, model = fit_mwms(strategy, args, shard(x, args.steps, args.global_batch,
                                                            rank, size),
                                      shard(y, args.steps, args.global_batch, rank, size), share)

    steady = times[len(times) // 2:]
    if rank == 0:
        print(f"{args.backend}, {size} process(es): loss {loss:.5f}, median step "
              f"{statistics.median(steady) * 1e3:.3f} ms")
    if args.check:
        alone = make_model(args.features, args.hidden, args.seed)
        fit(alone, keras.optimizers.SGD(args.lr), x, y, args.global_batch)
        diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                   for a, b in zip(model.get_weights(), alone.get_weights()))
        print(f"rank {rank}: largest difference from one process on whole batches: {diff:.3g}")
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "processes": size,
                       "step_ms": [t * 1e3 for t in times]}, f)


if __name__ == "__main__":
    main()

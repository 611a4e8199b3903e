"""One rank of ddl.tensorflow's tests: `python tf_rank.py SCENARIO`, started by
conftest.run_ranks. Every rank knows what every other rank contributes, so each checks its
own results exactly (integer-valued data, float64 references)."""

import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ddl.tensorflow as ddl_tf  # noqa: E402
from framework_checks import raises, reference  # noqa: E402

DTYPES = [tf.int8, tf.uint8, tf.int32, tf.uint32, tf.int64, tf.uint64, tf.float16,
          tf.bfloat16, tf.float32, tf.float64]


def data(rank, n, dtype):
    return tf.cast(reference(rank, n), dtype)


def close(got, want):
    np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(), want)


def check_collectives(comm):
    r, n = comm.rank, comm.size
    total = sum(reference(k, 6 * n) for k in range(n))
    in_function = tf.function(lambda x: ddl_tf.allreduce(x))
    # Operands computed in the step: allreduce and broadcast may run in their buffers.
    in_step = tf.function(lambda x: (ddl_tf.allreduce(x + 1), ddl_tf.broadcast(x + 1, root=0)))
    for dtype in DTYPES:
        x = data(r, 6 * n, dtype)
        close(ddl_tf.allreduce(x), total)
        close(in_function(x), total)
        summed, broadcast = in_step(x)
        close(summed, total + n)
        close(broadcast, reference(0, 6 * n) + 1)
        close(x, reference(r, 6 * n))  # reduced in place, never in the caller's tensor
        close(ddl_tf.allreduce(x, op="max"), np.max([reference(k, 6 * n) for k in range(n)], 0))
        close(ddl_tf.allgather(x), np.concatenate([reference(k, 6 * n) for k in range(n)]))
        close(ddl_tf.reduce_scatter(x), total[6 * r:6 * r + 6])
        close(ddl_tf.broadcast(x, root=n - 1), reference(n - 1, 6 * n))
        close(ddl_tf.alltoall(x), np.concatenate(
            [reference(k, 6 * n)[6 * r:6 * r + 6] for k in range(n)]))
    # Shapes follow axis 0, also as a graph knows them.
    m = tf.ones((2 * n, 3)) * r
    assert ddl_tf.allgather(m).shape == (2 * n * n, 3)
    assert ddl_tf.reduce_scatter(m).shape == (2, 3)
    spec = tf.TensorSpec((2 * n, 3), tf.float32)
    graph = tf.function(lambda t: ddl_tf.allgather(t)).get_concrete_function(spec)
    assert graph.output_shapes == (2 * n * n, 3), graph.output_shapes
    # A nest, one call per dtype, and many calls of one function in program order.
    nest = {"a": tf.ones((2, 3)) * r, "b": [tf.range(4.0), tf.fill([5], r)]}
    out = tf.function(lambda t: ddl_tf.allreduce(t))(nest)
    s = n * (n - 1) / 2
    close(out["a"], np.full((2, 3), s))
    close(out["b"][0], np.arange(4.0) * n)
    close(out["b"][1], np.full(5, s))
    sizes = [1, 7, 3, 64, 2, 1000, 5, 9]
    many = tf.function(lambda xs: [ddl_tf.allgather(x) if i % 3 == 0 else ddl_tf.allreduce(x)
                                   for i, x in enumerate(xs)])
    xs = [tf.fill([k], float(r)) for k in sizes]
    for _ in range(10):
        outs = many(xs)
    for i, (k, got) in enumerate(zip(sizes, outs)):
        close(got, np.repeat(np.arange(n, dtype=np.float64), k) if i % 3 == 0
              else np.full(k, s))
    print(f"rank {r}: every collective and dtype right")


def gradient(f, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x)


def check_gradients(comm):
    r, n = comm.rank, comm.size
    x = tf.range(4.0) + r
    s = sum(np.arange(4.0) + k for k in range(n))
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.allreduce(a) ** 2), x), 2 * n * s)
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.allreduce(a, op="avg") ** 2), x), 2 * s / n)
    w = tf.range(4.0 * n)
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.allgather(a) * w), x),
          n * np.arange(4.0 * n)[4 * r:4 * r + 4])
    ones = tf.ones(2 * n)
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.reduce_scatter(a) * (r + 1)), ones),
          np.repeat(np.arange(1, n + 1, dtype=np.float64), 2))
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.alltoall(a) * (r + 1)), ones),
          np.repeat(np.arange(1, n + 1, dtype=np.float64), 2))
    close(gradient(lambda a: tf.reduce_sum(ddl_tf.broadcast(a, root=0)), x),
          np.full(4, n if r == 0 else 0))
    print(f"rank {r}: gradients right")


def check_errors(comm):
    r, n = comm.rank, comm.size


    raises(tf.errors.InternalError, ["reduce_scatter", f"rank {r}", "equal blocks"],
           lambda: ddl_tf.reduce_scatter(tf.ones(2 * n + 1)))
    raises(ValueError, ["op", "mean"], lambda: ddl_tf.allreduce(tf.ones(2), op="mean"))
    raises(ValueError, ["root"], lambda: ddl_tf.broadcast(tf.ones(2), root=n))
    other = comm.split(0, r)
    f = tf.function(lambda a: ddl_tf.allreduce(a, comm=other))
    close(f(tf.ones(3)), np.full(3, n))
    other.destroy()
    raises(tf.errors.InternalError, ["allreduce", f"rank {r}", "destroyed"],
           lambda: f(tf.ones(3)))
    close(ddl_tf.allreduce(tf.ones(3)), np.full(3, n))  # the default one still works
    print(f"rank {r}: errors clear")


def check_mismatch(comm):
    """Ranks whose calls disagree (counts): every rank gets an error in ddl's words."""
    try:
        tf.function(lambda a: ddl_tf.allreduce(a))(tf.ones(10 + comm.rank))
    except tf.errors.InternalError as e:
        assert "DDL_ERR_INVALID_USAGE" in str(e) and "allreduce" in str(e), str(e)
        print(f"rank {comm.rank}: {str(e).splitlines()[0]}")
        return
    raise AssertionError("mismatched allreduces did not fail")


def check_killed(comm):
    """The last rank dies mid-job: every survivor gets an error naming it, not a hang."""
    n = comm.size
    f = tf.function(lambda a: ddl_tf.allreduce(a))
    f(tf.ones(1000))
    if comm.rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            f(tf.ones(1000))
    except tf.errors.InternalError as e:
        assert f"rank {n - 1}" in str(e), str(e)
        print(f"rank {comm.rank}: {str(e).splitlines()[0]}")
        return
    raise AssertionError("allreduces went on without the killed rank")


def main():
    comm = ddl_tf.init()
    scenario = sys.argv[1]
    checks = {"collectives": check_collectives, "gradients": check_gradients,
              "errors": check_errors}
    if scenario in ("mismatch", "killed"):  # each leaves the communicator failed
        checks = {"mismatch": check_mismatch, "killed": check_killed}
    for name, check in checks.items():
        if scenario in (name, "all"):
            check(comm)


if __name__ == "__main__":
    main()

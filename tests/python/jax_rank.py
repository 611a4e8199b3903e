"""One rank of ddl.jax's tests: `python jax_rank.py SCENARIO`, started by conftest.run_ranks.
Every rank knows what every other rank contributes, so each checks its own results exactly
(integer-valued data, float64 references)."""

import os
import re
import signal
import sys

import numpy as np
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)  # int64, uint64 and float64 arrays stay so

import ddl  # noqa: E402
import ddl.jax  # noqa: E402
from framework_checks import raises, reference  # noqa: E402

DTYPES = [jnp.int8, jnp.uint8, jnp.int32, jnp.uint32, jnp.int64, jnp.uint64, jnp.float16,
          jnp.bfloat16, jnp.float32, jnp.float64]


def data(rank, n, dtype):
    return jnp.asarray(reference(rank, n), dtype=dtype)


def close(got, want):
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want)


def check_collectives(comm):
    r, n = comm.rank, comm.size
    total = sum(reference(k, 6 * n) for k in range(n))
    jit_allreduce = jax.jit(lambda x: ddl.jax.allreduce(x))
    # Operands computed in the step: allreduce and broadcast run in their buffers.
    in_step = jax.jit(lambda x: (ddl.jax.allreduce(x + 1), ddl.jax.broadcast(x + 1, root=0)))
    for dtype in DTYPES:
        x = data(r, 6 * n, dtype)
        close(ddl.jax.allreduce(x), total)
        close(jit_allreduce(x), total)
        assert jit_allreduce(x).dtype == dtype
        summed, broadcast = in_step(x)
        close(summed, total + n)
        close(broadcast, reference(0, 6 * n) + 1)
        close(x, reference(r, 6 * n))  # reduced in place, never in the caller's array
        close(ddl.jax.allreduce(x, op="max"), np.max([reference(k, 6 * n) for k in range(n)], 0))
        close(ddl.jax.allgather(x), np.concatenate([reference(k, 6 * n) for k in range(n)]))
        close(ddl.jax.reduce_scatter(x), total[6 * r:6 * r + 6])
        close(ddl.jax.broadcast(x, root=n - 1), reference(n - 1, 6 * n))
        close(ddl.jax.alltoall(x), np.concatenate(
            [reference(k, 6 * n)[6 * r:6 * r + 6] for k in range(n)]))
    # Shapes follow axis 0; a 0-d allgather is a vector of one per rank.
    m = jnp.ones((2 * n, 3)) * r
    assert ddl.jax.allgather(m).shape == (2 * n * n, 3)
    assert ddl.jax.reduce_scatter(m).shape == (2, 3)
    close(ddl.jax.allgather(jnp.float32(r)), np.arange(n))
    print(f"rank {r}: every collective and dtype right")


def check_pytrees_and_order(comm):
    r, n = comm.rank, comm.size
    tree = {"a": jnp.ones((2, 3)) * r, "b": [jnp.arange(4.0), jnp.full((5,), r, jnp.int32)]}
    out = jax.jit(lambda t: ddl.jax.allreduce(t, op="sum"))(tree)
    s = n * (n - 1) / 2
    close(out["a"], np.full((2, 3), s))
    close(out["b"][0], np.arange(4.0) * n)
    close(out["b"][1], np.full(5, s))
    assert out["b"][1].dtype == jnp.int32
    # Many calls of one jitted function that do not depend on each other: every rank runs
    # them in program order (or the sizes would disagree: ddl names a mismatch).
    sizes = [1, 7, 3, 64, 2, 1000, 5, 9]

    def many(xs):
        return [ddl.jax.allgather(x) if i % 3 == 0 else ddl.jax.allreduce(x)
                for i, x in enumerate(xs)]

    xs = [jnp.full((k,), float(r)) for k in sizes]
    # ... because each call takes the one before it as an operand (ddl.jax's _Order).
    calls = re.findall(r"%(\w+) = stablehlo.custom_call @ddl_\w+\(%\w+, %(\w+)\)",
                       jax.jit(many).lower(xs).as_text())
    assert len(calls) == len(sizes), calls
    for (before, _), (_, after) in zip(calls, calls[1:]):
        assert after == before, f"a call does not wait for the one before it: {calls}"
    for _ in range(20):
        outs = jax.jit(many)(xs)
    for i, (k, got) in enumerate(zip(sizes, outs)):
        want = np.repeat(np.arange(n, dtype=np.float64), k) if i % 3 == 0 else np.full(k, s)
        close(got, want)
    print(f"rank {r}: pytrees and order right")


def check_gradients(comm):
    r, n = comm.rank, comm.size
    x = jnp.arange(4.0) + r
    s = sum(np.arange(4.0) + k for k in range(n))
    # The SPMD convention of jax.lax.psum: every rank's loss counts.
    g = jax.jit(jax.grad(lambda a: jnp.sum(ddl.jax.allreduce(a) ** 2)))(x)
    close(g, 2 * n * s)
    g = jax.grad(lambda a: jnp.sum(ddl.jax.allreduce(a, op="avg") ** 2))(x)
    close(g, 2 * s / n)
    w = jnp.arange(4.0 * n)
    g = jax.grad(lambda a: jnp.sum(ddl.jax.allgather(a) * w))(x)
    close(g, n * np.arange(4.0 * n)[4 * r:4 * r + 4])
    g = jax.grad(lambda a: jnp.sum(ddl.jax.reduce_scatter(a) * (r + 1)))(jnp.ones(2 * n))
    close(g, np.repeat(np.arange(1, n + 1, dtype=np.float64), 2))
    g = jax.grad(lambda a: jnp.sum(ddl.jax.alltoall(a) * (r + 1)))(jnp.ones(2 * n))
    close(g, np.repeat(np.arange(1, n + 1, dtype=np.float64), 2))
    g = jax.grad(lambda a: jnp.sum(ddl.jax.broadcast(a, root=0)))(x)
    close(g, np.full(4, n if r == 0 else 0))
    print(f"rank {r}: gradients right")


def check_errors(comm):
    r, n = comm.rank, comm.size


    raises(ValueError, ["reduce_scatter", "equal blocks"],
           lambda: ddl.jax.reduce_scatter(jnp.ones(2 * n + 1)))
    raises(ValueError, ["op", "mean"], lambda: ddl.jax.allreduce(jnp.ones(2), op="mean"))
    raises(Exception, ["allreduce", f"rank {r}", "no type"],
           lambda: ddl.jax.allreduce(jnp.ones(2, jnp.complex64)).block_until_ready())
    raises(NotImplementedError, ["no gradient", "MAX"],
           lambda: jax.grad(lambda a: jnp.sum(ddl.jax.allreduce(a, op="max")))(jnp.ones(2)))
    # A jitted function keeps its communicator: once that is destroyed, a clear error.
    other = comm.split(0, r)
    f = jax.jit(lambda a: ddl.jax.allreduce(a, comm=other))
    close(f(jnp.ones(3)), np.full(3, n))
    other.destroy()
    raises(Exception, ["allreduce", f"rank {r}", "destroyed"],
           lambda: f(jnp.ones(3)).block_until_ready())
    close(ddl.jax.allreduce(jnp.ones(3)), np.full(3, n))  # the default one still works
    print(f"rank {r}: errors clear")


def check_mismatch(comm):
    """Ranks whose calls disagree (counts): every rank gets an error in ddl's words."""
    try:
        jax.jit(lambda a: ddl.jax.allreduce(a))(jnp.ones(10 + comm.rank)).block_until_ready()
    except Exception as e:  # JAX's runtime error, carrying ddl's
        assert "DDL_ERR_INVALID_USAGE" in str(e) and "allreduce" in str(e), str(e)
        print(f"rank {comm.rank}: {str(e).splitlines()[0]}")
        return
    raise AssertionError("mismatched allreduces did not fail")


def check_killed(comm):
    """The last rank dies mid-job: every survivor gets an error naming it, not a hang."""
    n = comm.size
    f = jax.jit(lambda a: ddl.jax.allreduce(a))
    f(jnp.ones(1000)).block_until_ready()
    if comm.rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            f(jnp.ones(1000)).block_until_ready()
    except Exception as e:
        assert f"rank {n - 1}" in str(e), str(e)
        print(f"rank {comm.rank}: {str(e).splitlines()[0]}")
        return
    raise AssertionError("allreduces went on without the killed rank")


def main():
    comm = ddl.jax.init()
    scenario = sys.argv[1]
    checks = {"collectives": check_collectives, "pytrees": check_pytrees_and_order,
              "gradients": check_gradients, "errors": check_errors}
    if scenario in ("mismatch", "killed"):  # each leaves the communicator failed
        checks = {"mismatch": check_mismatch, "killed": check_killed}
    for name, check in checks.items():
        if scenario in (name, "all"):
            check(comm)


if __name__ == "__main__":
    main()

"""One rank of a test job: `python rank_main.py SCENARIO [ARGS...]`, started by
conftest.run_ranks (or ddlrun) with DDL_RANK, DDL_WORLD_SIZE, DDL_ROOT, DDL_JOB_TOKEN set.

Every rank derives every other rank's input from (rank, call) seeds, so each checks its own
results against a float64 numpy reference. A failed check raises (exit status 1, with the
traceback); exit status 77 means "skip" with the reason on the last output line.
"""

import array
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import ddl

SKIP = 77

INT_TYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64"]
FLOAT_TYPES = ["float16", "float32", "float64"]
OPS = ["sum", "prod", "min", "max", "avg"]

# Machine epsilon of each floating type (bfloat16 has 8 significant bits).
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def numpy_dtypes():
    names = INT_TYPES + FLOAT_TYPES
    try:
        import ml_dtypes  # noqa: F401  (registers numpy's bfloat16)
        names.append("bfloat16")
    except ImportError:
        pass
    return names


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def inputs(name, count, rank, op, call):
    """Rank `rank`'s input of a call: values whose reduction over <= 4 ranks fits the type
    (no wrap-around), as a float64 array; the caller casts it."""
    rng = np.random.default_rng([call, rank, count])
    if name in INT_TYPES:
        signed = name.startswith("int")
        if op == "prod":
            choices = [-2, -1, 1, 2] if signed else [1, 2, 3]
            return rng.choice(choices, count).astype(np.float64)
        lo, hi = (-20, 20) if signed else (0, 40)
        return rng.integers(lo, hi + 1, count).astype(np.float64)
    if op == "prod":
        return rng.uniform(0.5, 1.5, count)
    return rng.uniform(-1.0, 1.0, count)


def reference(name, contributions, op):
    """(expected values, tolerance per element) in float64 for the reduction of the given
    per-rank arrays (already rounded to the type)."""
    x = np.stack(contributions)
    n = len(contributions)
    if op == "sum" or op == "avg":
        result = x.sum(axis=0)
    elif op == "prod":
        result = x.prod(axis=0)
    elif op == "min":
        result = x.min(axis=0)
    else:
        result = x.max(axis=0)
    if name in INT_TYPES:
        if op == "avg":
            result = np.trunc(result / n)  # C's truncating division
        return result, np.zeros_like(result)
    eps = EPS[name]
    if op in ("sum", "avg"):
        # Each of the n - 1 additions rounds once (float16/bfloat16: in float32, then to the
        # type), plus the final rounding to the type.
        tol = (n + 1) * eps * np.abs(x).sum(axis=0)
        if op == "avg":
            result = result / n
            tol = tol / n + eps * np.abs(result)
    elif op == "prod":
        tol = (n + 1) * eps * np.abs(result)
    else:
        tol = np.zeros_like(result)
    return result, tol


def check(what, got, expected, tol):
    got = np.asarray(got, dtype=np.float64)
    bad = np.nonzero(np.abs(got - expected) > tol)[0]
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{what}: {bad.size} of {got.size} elements wrong; first at "
                             f"[{i}]: got {got[i]!r}, expected {expected[i]!r} (tolerance "
                             f"{tol[i]!r})")


def as_f64(a):
    return np.asarray(a).astype(np.float64)


# ---- scenarios -----------------------------------------------------------------------------


def scenario_collectives(comm):
    """Every numpy dtype and op: allreduce in place and out of place, reduce_scatter,
    allgather, broadcast from every root, barrier; odd and larger counts."""
    n, me = comm.size, comm.rank
    call = 0
    for name in numpy_dtypes():
        dt = np_dtype(name)
        # 1 and 7: a few elements; 1001: odd; 100003: past the small-message paths.
        for count in (1, 7, 1001, 100003) if name in ("float32", "int32") else (1, 7, 1001):
            for op in OPS:
                call += 1
                mine = [inputs(name, count, r, op, call).astype(dt) for r in range(n)]
                expected, tol = reference(name, [as_f64(m) for m in mine], op)
                what = f"allreduce {name} {op} count {count}"

                send = mine[me].copy()
                recv = np.full(count, 99, dtype=dt)
                out = comm.allreduce(send, recv, op=op)
                assert out is recv, f"{what}: allreduce did not return recv"
                check(what + " (out of place)", as_f64(recv), expected, tol)
                assert np.array_equal(as_f64(send), as_f64(mine[me])), \
                    f"{what}: send changed out of place"

                inplace = mine[me].copy()
                out = comm.allreduce(inplace, op=getattr(ddl, op.upper()))
                assert out is inplace
                check(what + " (in place)", as_f64(inplace), expected, tol)

                # reduce_scatter: block r of the reduction of n * count elements.
                call += 1
                full = [inputs(name, n * count, r, op, call).astype(dt) for r in range(n)]
                expected, tol = reference(name, [as_f64(f) for f in full], op)
                block = slice(me * count, (me + 1) * count)
                recv = np.zeros(count, dtype=dt)
                comm.reduce_scatter(full[me], recv, op=op)
                check(f"reduce_scatter {name} {op} count {count}", as_f64(recv),
                      expected[block], tol[block])

            call += 1
            parts = [inputs(name, count, r, "sum", call).astype(dt) for r in range(n)]
            gathered = np.zeros(n * count, dtype=dt)
            comm.allgather(parts[me], gathered)
            expected = np.concatenate([as_f64(p) for p in parts])
            check(f"allgather {name} count {count}", as_f64(gathered), expected,
                  np.zeros(n * count))

            for root in range(n):
                call += 1
                data = inputs(name, count, root, "sum", call).astype(dt)
                buf = data.copy() if me == root else np.zeros(count, dtype=dt)
                comm.broadcast(buf, root=root)
                check(f"broadcast {name} count {count} root {root}", as_f64(buf),
                      as_f64(data), np.zeros(count))
    # Multi-dimensional arrays are taken as their elements in C order.
    grid = np.arange(12, dtype=np.float64).reshape(3, 4) * (me + 1)
    comm.allreduce(grid)
    assert np.array_equal(grid, np.arange(12).reshape(3, 4) * (n * (n + 1) / 2))
    # Empty buffers are fine.
    comm.allreduce(np.zeros(0, dtype=np.float32))
    comm.barrier()
    print(f"rank {me}: {call} checked calls")


def scenario_buffers(comm):
    """The buffer protocol: bytearray (uint8), array.array (typed by its format code),
    memoryview, and read-only bytes as an input."""
    n, me = comm.size, comm.rank
    b = bytearray([me + 1] * 5)
    assert comm.allreduce(b) is b
    assert list(b) == [n * (n + 1) // 2] * 5, list(b)

    for code, values in (("i", [1, -2, 3]), ("l", [5, -6]), ("d", [0.5, 1.5, -2.0]),
                         ("f", [0.25]), ("B", [7, 8]), ("Q", [2**40, 3])):
        a = array.array(code, [v * (me + 1) for v in values])
        out = array.array(code, [0] * len(values))
        comm.allreduce(a, out)
        expected = [v * n * (n + 1) // 2 if code not in "df" else v * n * (n + 1) / 2
                    for v in values]
        assert list(out) == expected, (code, list(out), expected)

    m = memoryview(bytearray(8)).cast("i")
    m[0], m[1] = me, 10 * me
    comm.allreduce(m, op=ddl.MAX)
    assert list(m) == [n - 1, 10 * (n - 1)], list(m)

    src = bytes([me] * 4)  # read-only: allowed as send, copied
    dst = bytearray(4 * n)
    comm.allgather(src, dst)
    assert list(dst) == [r for r in range(n) for _ in range(4)], list(dst)

    half = np.array([me + 0.5] * 3, dtype=np.float16)
    comm.allreduce(memoryview(half))  # format 'e'
    assert list(half) == [sum(r + 0.5 for r in range(n))] * 3, half
    print("ok")


def torch_or_skip():
    """The torch module; a scenario that needs it ends as skipped where it is missing."""
    try:
        import torch
    except ImportError:
        print("torch is not importable")
        sys.exit(SKIP)
    return torch


def scenario_torch(comm):
    torch = torch_or_skip()
    n, me = comm.size, comm.rank
    names = INT_TYPES + FLOAT_TYPES + ["bfloat16"]
    call = 0
    for name in names:
        tdt = getattr(torch, name)
        for count in (1, 7, 1001):
            for op in OPS:
                call += 1
                if name in ("uint32", "uint64") and op in ("prod",):
                    pass
                raw = [inputs(name, count, r, op, call) for r in range(n)]
                mine = [torch.tensor(x).to(tdt) for x in raw]
                # float64 view of what each rank really contributed (after rounding).
                contrib = [t.to(torch.float64).numpy() if name not in ("uint32", "uint64")
                           else np.array(t.tolist(), dtype=np.float64) for t in mine]
                expected, tol = reference(name, contrib, op)
                what = f"torch allreduce {name} {op} count {count}"
                t = mine[me].clone()
                assert comm.allreduce(t, op=op) is t
                check(what + " (in place)", tensor_f64(t), expected, tol)
                out = torch.zeros(count, dtype=tdt)
                comm.allreduce(mine[me], out, op=op)
                check(what + " (out of place)", tensor_f64(out), expected, tol)
        # allgather, reduce_scatter and broadcast on tensors, 2-D shapes.
        call += 1
        parts = [torch.tensor(inputs(name, 6, r, "sum", call)).to(tdt).reshape(2, 3)
                 for r in range(n)]
        out = torch.zeros(n, 2, 3, dtype=tdt)
        comm.allgather(parts[me], out)
        for r in range(n):
            assert torch.equal(out[r], parts[r]), f"torch allgather {name}: block {r}"
        call += 1
        full = [torch.tensor(inputs(name, 5 * n, r, "sum", call)).to(tdt) for r in range(n)]
        expected, tol = reference(name, [tensor_f64(f) for f in full], "sum")
        rs = torch.zeros(5, dtype=tdt)
        comm.reduce_scatter(full[me], rs)
        block = slice(5 * me, 5 * me + 5)
        check(f"torch reduce_scatter {name}", tensor_f64(rs), expected[block], tol[block])
        b = torch.full((4,), 3, dtype=tdt) if me == n - 1 else torch.zeros(4, dtype=tdt)
        comm.broadcast(b, root=n - 1)
        assert torch.equal(b, torch.full((4,), 3, dtype=tdt)), f"torch broadcast {name}"

    # A tensor that requires grad is written in place like any other (no autograd).
    w = torch.ones(3, requires_grad=True)
    comm.allreduce(w.data)
    assert torch.equal(w.detach(), torch.full((3,), float(n)))
    # A non-contiguous view is refused before any communication.
    try:
        comm.allreduce(torch.zeros(4, 4).t())
        raise AssertionError("a transposed tensor was accepted")
    except ValueError as e:
        assert "contiguous" in str(e)
    # Async on tensors.
    t = torch.full((1000,), float(me))
    req = comm.allreduce(t, async_=True) if ddl_has_async() else None
    if req is not None:
        req.wait()
        assert torch.equal(t, torch.full((1000,), float(sum(range(n)))))
    print("ok")


def tensor_f64(t):
    import torch
    if t.dtype in (torch.uint32, torch.uint64):
        return np.array(t.tolist(), dtype=np.float64)
    return t.to(torch.float64).numpy()


def ddl_has_async():
    from ddl import _library
    return _library.lib().ddl_iallreduce is not None


def scenario_async(comm):
    """Several nonblocking collectives in flight, completed by wait() and test() in an
    order other than the call order; requests hold their buffers."""
    n, me = comm.size, comm.rank
    if not ddl_has_async():
        try:
            comm.allreduce(np.zeros(4), async_=True)
        except ddl.LibraryTooOldError as e:
            assert isinstance(e, NotImplementedError) and "ddl_iallreduce" in str(e), str(e)
            print(f"{ddl.library_path()} has no nonblocking collectives: {e}")
            sys.exit(SKIP)
        raise AssertionError("async_=True on a library without ddl_iallreduce did not raise")

    a = np.full(100003, float(me + 1))
    b = np.zeros(64, dtype=np.int32) + me
    bcast = np.arange(10, dtype=np.float32) if me == 0 else np.zeros(10, dtype=np.float32)
    gathered = np.zeros(3 * n, dtype=np.int64)
    rs_send = np.arange(4 * n, dtype=np.float64) * (me + 1)
    rs_recv = np.zeros(4)
    reqs = [
        comm.allreduce(a, async_=True),
        comm.allreduce(b, op=ddl.MAX, async_=True),
        comm.broadcast(bcast, root=0, async_=True),
        comm.allgather(np.full(3, me, dtype=np.int64), gathered, async_=True),  # temporary send
        comm.reduce_scatter(rs_send, rs_recv, async_=True),
        comm.barrier(async_=True),
    ]
    gc.collect()  # the temporary send above must survive: its Request holds it
    assert all(isinstance(r, ddl.Request) for r in reqs)
    reqs[3].wait()
    assert np.array_equal(gathered, np.repeat(np.arange(n), 3)), gathered
    for r in reversed(reqs):
        deadline = time.monotonic() + 30
        while not r.test():
            assert time.monotonic() < deadline, f"{r} still pending after 30 s"
            time.sleep(0.001)
        assert r.done
        r.wait()  # after completion: returns at once, no error
    assert np.all(a == n * (n + 1) / 2), a[:4]
    assert np.all(b == n - 1)
    assert np.array_equal(bcast, np.arange(10, dtype=np.float32))
    total = np.arange(4 * n, dtype=np.float64) * (n * (n + 1) / 2)
    assert np.array_equal(rs_recv, total[4 * me:4 * me + 4]), rs_recv

    # Blocking and nonblocking calls interleave in call order.
    x = np.ones(5)
    req = comm.allreduce(x, async_=True)
    y = comm.allreduce(np.ones(3))
    req.wait()
    assert np.all(x == n) and np.all(y == n)

    # A request dropped before completion keeps its buffers alive until it finishes.
    for _ in range(20):
        comm.allreduce(np.ones(50000), async_=True)
    gc.collect()
    z = comm.allreduce(np.ones(2))
    assert np.all(z == n)
    print("ok")


def scenario_group(comm):
    """ddl.group(): blocking calls inside are only recorded; their (temporary) buffers are
    kept and the results are there after the with-block."""
    n, me = comm.size, comm.rank
    try:
        ctx = ddl.group()
        ctx.__enter__()
    except ddl.LibraryTooOldError as e:
        print(f"no groups in {ddl.library_path()}: {e}")
        sys.exit(SKIP)
    outs = []
    try:
        for i in range(10):
            out = np.zeros(i + 1, dtype=np.float32)
            comm.allreduce(np.full(i + 1, me + i, dtype=np.float32), out)  # temporary send
            outs.append(out)
        mixed = np.full(3, me, dtype=np.int64)
        comm.allreduce(mixed, op=ddl.MAX)
        req = comm.allreduce(np.ones(7), async_=True) if ddl_has_async() else None
    finally:
        ctx.__exit__(None, None, None)
    gc.collect()
    for i, out in enumerate(outs):
        expected = sum(r + i for r in range(n))
        assert np.all(out == expected), (i, out, expected)
    assert np.all(mixed == n - 1)
    if req is not None:
        req.wait()
    # Nested groups issue at the outermost end; the plain form.
    v = np.full(4, 1.0)
    with ddl.group():
        with ddl.group():
            comm.allreduce(v)
        comm.barrier()
    assert np.all(v == n)
    print("ok")


def scenario_split(comm):
    n, me = comm.size, comm.rank
    # Two groups (even and odd ranks), ranked in reverse by key.
    sub = comm.split(me % 2, key=-me)
    members = [r for r in range(n) if r % 2 == me % 2]
    assert sub.size == len(members), (sub.size, members)
    assert sub.rank == list(reversed(members)).index(me), (sub.rank, members)
    x = np.array([me], dtype=np.int64)
    sub.allreduce(x)
    assert x[0] == sum(members), (x, members)
    sub.destroy()
    sub.destroy()  # idempotent
    # The last rank stays out.
    sub = comm.split(ddl.SPLIT_NOCOLOR if me == n - 1 else 0)
    if me == n - 1:
        assert sub is None
    else:
        with sub:
            assert sub.size == n - 1
            y = np.ones(3)
            sub.allreduce(y)
            assert np.all(y == n - 1)
    comm.barrier()
    print("ok")


def scenario_mismatch(comm, kind):
    """Ranks that call different things: every rank gets ddl.Error naming the collective."""
    me = comm.rank
    try:
        if kind == "count":
            comm.allreduce(np.ones(10 + me, dtype=np.float32))
        elif kind == "dtype":
            comm.allreduce(np.ones(16, dtype=np.float32 if me == 0 else np.int32))
        elif kind == "collective":
            if me == 0:
                comm.allreduce(np.ones(16))
            else:
                comm.broadcast(np.ones(16))
        elif kind == "async":
            req = comm.allreduce(np.ones(10 + me, dtype=np.float32), async_=True)
            try:
                req.wait()
            finally:
                assert req.done
            raise AssertionError("mismatched counts: wait() did not raise")
        raise AssertionError(f"mismatched {kind} did not raise")
    except ddl.Error as e:
        assert e.code == 2 and e.name == "DDL_ERR_INVALID_USAGE", (e.code, e.name, str(e))
        assert "allreduce" in e.message or "broadcast" in e.message, e.message
        assert str(e).startswith("DDL_ERR_INVALID_USAGE: "), str(e)
        print(f"rank {me}: {e}")
        if kind == "async":  # the error stays with the request
            try:
                req.test()
                raise AssertionError("test() after a failure did not raise")
            except ddl.Error as again:
                assert again.code == e.code
    # The communicator only answers with errors now; it can still be destroyed.
    try:
        comm.barrier()
        raise AssertionError("a failed communicator ran a barrier")
    except ddl.Error:
        pass
    print("ok")


def scenario_killed(comm):
    """The last rank dies (SIGKILL) mid-job: every survivor gets ddl.Error naming it."""
    n, me = comm.size, comm.rank
    comm.barrier()
    if me == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(1000):
            comm.allreduce(np.ones(1000))
        raise AssertionError("allreduces went on without the killed rank")
    except ddl.Error as e:
        elapsed = time.monotonic() - start
        assert e.name in ("DDL_ERR_REMOTE", "DDL_ERR_TIMEOUT"), str(e)
        assert f"rank {n - 1}" in e.message, e.message
        print(f"rank {me} after {elapsed:.2f} s: {e}")
    print("ok")


def scenario_elastic(comm, grow_port):
    """3 ranks: rank 1 dies; the others agree on it, shrink to 2, and grow back to 3 with a
    new process (this script's "joiner", started by the shrunk group's rank 0)."""
    me = comm.rank
    assert comm.agree(0b110 | me, op="and") == 0b110 & 0b111 & 0b110  # AND of 6, 7, 6
    assert comm.agree(1 << me, op="or") == 0b111
    assert comm.failed_ranks() == []
    comm.barrier()
    if me == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            comm.allreduce(np.ones(10))
        raise AssertionError("allreduces went on without the killed rank")
    except ddl.Error as e:
        assert "rank 1" in e.message, e.message
    assert comm.agree(1 << me, op="or") == 0b101
    assert comm.failed_ranks() == [1]
    small = comm.shrink()
    assert (small.size, small.rank) == (2, {0: 0, 2: 1}[me])
    root = f"127.0.0.1:{grow_port}"
    joiner = None
    if small.rank == 0:
        joiner = subprocess.Popen([sys.executable, __file__, "joiner", root],
                                  env=dict(os.environ), stdin=subprocess.DEVNULL)
    grown = small.grow(3, root)
    assert (grown.size, grown.rank) == (3, small.rank)
    total = grown.allreduce(np.array([float(grown.rank + 1)]))
    assert total[0] == 6, total
    grown.destroy()
    small.destroy()
    if joiner:
        assert joiner.wait(timeout=60) == 0, "the joiner failed"
    print("ok")


def scenario_abort(comm):
    """abort() from another thread ends a blocked call at once (the call released the GIL:
    the aborting thread ran meanwhile)."""
    me = comm.rank
    if me == 1:
        time.sleep(4)  # never joins the allreduce; leaves after rank 0 has aborted
        return
    timer = threading.Timer(0.5, comm.abort)
    timer.start()
    start = time.monotonic()
    try:
        comm.allreduce(np.ones(8))
        raise AssertionError("allreduce returned although rank 1 never called it")
    except ddl.Error as e:
        elapsed = time.monotonic() - start
        assert elapsed < 3, f"abort took {elapsed:.2f} s to end the call"
        print(f"aborted after {elapsed:.2f} s: {e}")
    timer.join()
    print("ok")


def scenario_gil(comm):
    """While rank 0 waits in a barrier for 1 s, its other Python threads keep running."""
    me = comm.rank
    if me == 1:
        time.sleep(1.0)
        comm.barrier()
        return
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = counter[0]
    comm.barrier()
    during = counter[0] - before
    stop.set()
    t.join()
    # Held GIL: the thread would get no turn at all while the barrier waits.
    assert during > 10000, f"only {during} iterations in another thread during a 1 s barrier"
    print(f"ok: {during} iterations")


def scenario_explicit(comm_unused):
    """ddl.Communicator(size, rank, root_addr, ...) with a config."""
    size, rank = int(os.environ["DDL_WORLD_SIZE"]), int(os.environ["DDL_RANK"])
    with ddl.Communicator(size, rank, os.environ["DDL_ROOT"],
                          job_token=os.environ["DDL_JOB_TOKEN"], timeout_ms=15000,
                          chunk_bytes=64 * 1024, log_level="warn") as comm:
        assert (comm.size, comm.rank) == (size, rank)
        x = np.ones(200000, dtype=np.float32)
        comm.allreduce(x, op="avg")
        assert np.all(x == 1.0)
    try:
        comm.barrier()
        raise AssertionError("a destroyed communicator ran a barrier")
    except ddl.Error as e:
        assert "destroyed" in str(e)
    print("ok")


def scenario_smoke(comm):
    x = np.array([comm.rank + 1.0])
    comm.allreduce(x)
    assert x[0] == comm.size * (comm.size + 1) / 2
    print(f"ok rank {comm.rank} of {comm.size}")


def main():
    name, args = sys.argv[1], sys.argv[2:]
    if name == "joiner":  # joins a grown communicator as its last rank (scenario_elastic)
        comm = ddl.Communicator(3, 2, args[0], job_token=os.environ["DDL_JOB_TOKEN"])
        total = comm.allreduce(np.array([3.0]))
        assert total[0] == 6, total
        comm.destroy()
        return
    fn = globals()["scenario_" + name]
    if name == "explicit":
        fn(None)
        return
    comm = ddl.init()
    try:
        fn(comm, *args)
    finally:
        comm.destroy()


if __name__ == "__main__":
    main()

"""One rank of a ddl.fusion test job: `python fusion_rank.py SCENARIO [ARGS...]`, started by
conftest.run_ranks(..., main=FUSION_MAIN) with the launcher's variables set.

Inputs and references come from rank_main (every rank derives every rank's input from
seeds). Scenarios that need the ranks to be at a given point use the user's communicator
(barriers), never sleeps alone, so that a slow machine changes timings, not outcomes.
"""

import os
import signal
import sys
import threading
import time

import numpy as np

import ddl
from rank_main import as_f64, check, inputs, np_dtype, reference, torch_or_skip


def expect_error(fn, *words, code=None):
    """Runs fn, which must raise ddl.Error containing every one of `words`."""
    try:
        fn()
    except ddl.Error as e:
        for w in words:
            assert w in str(e), f"{w!r} is not in the error: {e}"
        if code is not None:
            assert e.name == code, f"expected {code}, got {e}"
        return e
    raise AssertionError(f"no ddl.Error (expected one with {words})")


# Mixed dtypes, ops and sizes; one tensor bigger than the fusion buffer (reduced alone).
MIXED = [  # (dtype, op, count)
    ("float32", "sum", 1), ("float64", "max", 7), ("int32", "sum", 100), ("float32", "avg", 33),
    ("int64", "min", 1001), ("float16", "sum", 64), ("uint8", "max", 5), ("float32", "sum", 20000),
    ("float64", "prod", 9), ("int32", "avg", 17), ("float32", "sum", 0), ("uint64", "sum", 3),
]


def scenario_mixed(comm):
    """Every rank submits the same 3 x len(MIXED) tensors (named and unnamed, in place and
    out of place); each result is checked against a float64 reference."""
    n, me = comm.size, comm.rank
    fuser = ddl.Fuser(comm, fusion_bytes=64 * 1024)
    jobs = []
    for rep in range(3):
        for i, (name, op, count) in enumerate(MIXED):
            call = 100 * rep + i
            dt = np_dtype(name)
            mine = [inputs(name, count, r, op, call).astype(dt) for r in range(n)]
            expected, tol = reference(name, [as_f64(m) for m in mine], op)
            x = mine[me].copy()
            label = f"rep {rep} {name} {op} [{count}]"
            tensor_name = f"mixed.{rep}.{i}" if i % 2 else None
            if i % 3 == 0:
                out = np.full(count, 7, dtype=dt)
                h = fuser.allreduce_async(x, op=op, name=tensor_name, out=out)
                jobs.append((h, out, expected, tol, label, (x, mine[me])))
            else:
                h = fuser.allreduce_async(x, op=op, name=tensor_name)
                jobs.append((h, x, expected, tol, label, None))
    for h, result, expected, tol, label, unchanged in jobs:
        assert h.wait() is result, f"{label}: wait() did not return the output"
        assert h.done and h.test()
        check(label, as_f64(result), expected, tol)
        if unchanged is not None:
            assert np.array_equal(as_f64(unchanged[0]), as_f64(unchanged[1])), \
                f"{label}: input changed by an out-of-place allreduce"
    stats = dict(fuser.stats)
    fuser.close()
    assert stats["tensors"] == len(jobs), stats
    # Fused: far fewer allreduces than tensors (per cycle: one per dtype/op at most, plus
    # the 80 KB tensors alone).
    assert stats["fused_allreduces"] >= 1 and stats["allreduces"] < len(jobs), stats
    print(f"ok {stats}")


def scenario_orders(comm):
    """Named tensors submitted in a different order on every rank (and from two threads on
    each) still meet by name; three steps reuse the names' slots without exchanging the
    names again."""
    n, me = comm.size, comm.rank
    fuser = ddl.Fuser(comm)
    names = [f"layer{i}.{part}" for i in range(20) for part in ("weight", "bias")]
    rng = np.random.default_rng(1000 + me)
    for step in range(3):
        order = list(rng.permutation(len(names)))
        tensors = {}
        for k in range(len(names)):
            dt = np.float64 if k % 3 else np.int32
            tensors[k] = np.full(k + 1, (k + 1) * (me + 1) + step, dtype=dt)
        handles = {}

        def submit(ks):
            for k in ks:
                handles[k] = fuser.allreduce_async(tensors[k], name=names[k])

        helper = threading.Thread(target=submit, args=(order[1::2],))
        helper.start()
        submit(order[0::2])
        helper.join()
        for k, h in handles.items():
            h.wait()
            expected = (k + 1) * n * (n + 1) // 2 + n * step
            assert np.all(tensors[k] == expected), (step, names[k], tensors[k][:3], expected)
    exchanged = fuser.stats["names_exchanged"]
    fuser.close()
    assert exchanged == len(names), f"{exchanged} names exchanged over 3 steps of {len(names)}"
    print("ok")


def scenario_many(comm):
    """3,000 tiny tensors: all reduced, in far fewer allreduces."""
    n, me = comm.size, comm.rank
    with ddl.Fuser(comm) as fuser:
        xs = [np.full(4, i + me, dtype=np.float32) for i in range(3000)]
        handles = [fuser.allreduce_async(x) for x in xs]
        for h in handles:
            h.wait()
        for i, x in enumerate(xs):
            assert np.all(x == n * i + n * (n - 1) / 2), (i, x)
        stats = dict(fuser.stats)
    assert stats["allreduces"] <= 300, stats
    print(f"ok {stats}")


def scenario_late(comm):
    """Rank 0 submits first; the others only after rank 0 has seen, over many cycles, that
    its tensors stay pending. Then all complete."""
    n, me = comm.size, comm.rank
    fuser = ddl.Fuser(comm, cycle_ms=2)
    x = np.full(10, float(me + 1))
    y = np.full(3, me + 1, dtype=np.int64)
    if me == 0:
        hx = fuser.allreduce_async(x, name="x")
        hy = fuser.allreduce_async(y)
        before = fuser.stats["cycles"]
        time.sleep(0.2)
        assert not hx.done and not hy.done, "reduced before the other ranks submitted"
        assert not hx.test()
        expect_error(lambda: hx.wait(timeout=0.05), "'x'", "not every rank has submitted",
                     code="DDL_ERR_TIMEOUT")
        assert fuser.stats["cycles"] > before, "no cycles ran while waiting"
        comm.barrier()
    else:
        comm.barrier()
        hy = fuser.allreduce_async(y)
        hx = fuser.allreduce_async(x, name="x")
    hx.wait()
    hy.wait()
    assert np.all(x == n * (n + 1) / 2) and np.all(y == n * (n + 1) // 2), (x, y)
    fuser.close()
    print("ok")


def scenario_mismatch(comm):
    """A named tensor with another size on one rank, an unnamed one with another dtype:
    both fail on every rank, naming the tensor and what each rank submitted; the tensors
    beside them are reduced, and the Fuser goes on working."""
    n, me = comm.size, comm.rank
    last = n - 1
    fuser = ddl.Fuser(comm)
    a = np.ones(10 + (2 if me == last else 0), dtype=np.float32)
    b = np.ones(5, dtype=np.float32)
    u = np.ones(4, dtype=np.float64 if me == last else np.float32)
    ha = fuser.allreduce_async(a, name="a")
    hb = fuser.allreduce_async(b, name="b")
    hu = fuser.allreduce_async(u)
    e = expect_error(ha.wait, "'a'", "submitted differently", "rank 0: float32[10] sum",
                     f"rank {last}: float32[12] sum", f"fusion on rank {me}",
                     code="DDL_ERR_INVALID_USAGE")
    print(f"rank {me}: {e}")
    expect_error(hu.wait, "unnamed #0", "rank 0: float32[4] sum", f"rank {last}: float64[4] sum")
    expect_error(hu.test, "unnamed #0")  # the error stays with the handle
    hb.wait()
    assert np.all(b == n)
    c = np.ones(6)
    fuser.allreduce(c, name="a")  # the name is free again
    assert np.all(c == n)
    fuser.close()
    print("ok")


def scenario_close(comm):
    """Closing: ranks closing at different moments with nothing pending stop cleanly; a
    tensor only one rank submitted times out in wait(), then fails when close() gives up
    (on every rank, within its deadline); submissions after close() are refused."""
    n, me = comm.size, comm.rank
    # Clean: rank 0 closes first and waits for the others, which close 0.2 s later.
    fuser = ddl.Fuser(comm)
    fuser.allreduce(np.ones(3))
    if me != 0:
        time.sleep(0.2)
    start = time.monotonic()
    fuser.close()
    took = time.monotonic() - start
    assert took < 5, f"a clean close took {took:.2f} s"
    assert fuser.closed
    fuser.close()  # again: nothing
    expect_error(lambda: fuser.allreduce_async(np.ones(2)), "closed")

    # A tensor only rank 0 submits.
    fuser = ddl.Fuser(comm)
    lonely = None
    if me == 0:
        lonely = fuser.allreduce_async(np.ones(8), name="only-on-rank-0")
        expect_error(lambda: lonely.wait(timeout=0.3), "'only-on-rank-0'",
                     "not every rank has submitted it", code="DDL_ERR_TIMEOUT")
    comm.barrier()
    start = time.monotonic()
    fuser.close(timeout=0.5)
    took = time.monotonic() - start
    assert took < 5, f"close(timeout=0.5) took {took:.2f} s"
    if lonely is not None:
        e = expect_error(lonely.wait, "before this tensor was submitted by every rank")
        print(f"rank {me}: {e}")
    print(f"ok (close gave up after {took:.2f} s)")


def scenario_killed(comm):
    """The last rank dies: every survivor's pending handles fail with ddl.Error naming it;
    close() then returns at once."""
    n, me = comm.size, comm.rank
    fuser = ddl.Fuser(comm)
    fuser.allreduce(np.ones(4))
    comm.barrier()
    if me == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    h = fuser.allreduce_async(np.ones(1000), name="after-the-kill")
    e = expect_error(h.wait, f"rank {n - 1}", f"fusion on rank {me}")
    assert e.name in ("DDL_ERR_REMOTE", "DDL_ERR_TIMEOUT"), str(e)
    expect_error(lambda: fuser.allreduce_async(np.ones(2)), f"rank {n - 1}")
    start = time.monotonic()
    fuser.close()
    assert time.monotonic() - start < 2, "close() after a failure was slow"
    print(f"rank {me}: {e}\nok")


def scenario_stopped(comm):
    """Rank 1 is frozen (SIGSTOP), so its Fuser stops cycling without any error to see:
    rank 0's close() must still return (by aborting its private communicator), failing the
    pending handle; rank 0 then kills rank 1."""
    n, me = comm.size, comm.rank
    fuser = ddl.Fuser(comm)
    pids = np.zeros(n, dtype=np.int64)
    comm.allgather(np.array([os.getpid()], dtype=np.int64), pids)
    fuser.allreduce(np.ones(2))
    comm.barrier()
    if me == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)  # never reached: rank 0 kills this process
        return
    time.sleep(0.1)
    h = fuser.allreduce_async(np.ones(4), name="never")
    start = time.monotonic()
    fuser.close(timeout=0.5)
    took = time.monotonic() - start
    os.kill(int(pids[1]), signal.SIGKILL)
    assert took < 8, f"close() with a frozen peer took {took:.2f} s"
    e = expect_error(h.wait, "fusion on rank 0")
    print(f"close took {took:.2f} s; the handle: {e}\nok")


def scenario_api(comm):
    """comm.enable_fusion(): async allreduces go through the Fuser (by name), blocking calls
    on comm interleave freely; argument errors are raised at submission."""
    n, me = comm.size, comm.rank
    fuser = comm.enable_fusion(cycle_ms=1)
    assert comm.enable_fusion() is fuser
    xs = [np.full(100, float(i + me)) for i in range(20)]
    order = range(20) if me % 2 == 0 else reversed(range(20))
    handles = {i: comm.allreduce(xs[i], async_=True, name=f"g{i}") for i in order}
    assert all(isinstance(h, ddl.fusion.Handle) for h in handles.values())
    z = comm.allreduce(np.ones(3))  # on comm itself, not ordered with the fused ones
    assert np.all(z == n)
    out = np.zeros(5, dtype=np.int32)
    ho = comm.allreduce(np.full(5, me, dtype=np.int32), out, op="max", async_=True)
    for i, h in handles.items():
        assert ddl.fusion.synchronize(h) is xs[i]
        assert np.all(xs[i] == n * i + n * (n - 1) / 2), (i, xs[i][:2])
    assert ho.wait() is out and np.all(out == n - 1)
    with ddl.group():  # inside a group, async calls stay ddl's own requests
        req = comm.allreduce(np.ones(2), async_=True)
    assert isinstance(req, ddl.Request)
    req.wait()

    # Errors at submission, on this rank only (nothing reaches the other ranks).
    x = np.ones(4)
    h = fuser.allreduce_async(x, name="dup")
    try:
        fuser.allreduce_async(np.ones(4), name="dup")
        raise AssertionError("a second pending tensor named 'dup' was accepted")
    except ValueError as e:
        assert "still pending" in str(e) and f"rank {me}" in str(e), str(e)
    for bad, words in ((lambda: fuser.allreduce_async(x, name=""), "name"),
                       (lambda: fuser.allreduce_async(x, name="a\0b"), "name"),
                       (lambda: fuser.allreduce_async(x, op="xor"), "xor"),
                       (lambda: fuser.allreduce_async(x, out=np.ones(3)), "3 elements"),
                       (lambda: fuser.allreduce_async(np.ones((4, 4)).T), "contiguous")):
        try:
            bad()
            raise AssertionError(f"accepted: {words}")
        except (ValueError, TypeError) as e:
            assert words in str(e), str(e)
    ro = np.ones(3)
    ro.flags.writeable = False
    try:
        fuser.allreduce_async(ro)
        raise AssertionError("a read-only array was accepted in place")
    except ValueError as e:
        assert "read-only" in str(e)
    for kwargs, words in (({"fusion_bytes": -1}, "fusion_bytes"), ({"cycle_ms": 0}, "cycle_ms")):
        try:
            ddl.Fuser(comm, **kwargs)
            raise AssertionError(f"accepted {kwargs}")
        except ValueError as e:
            assert words in str(e)
    try:
        ddl.Fuser("not a communicator")
        raise AssertionError("a string was accepted as comm")
    except TypeError:
        pass
    os.environ["DDL_FUSION_BYTES"] = "lots"
    try:
        ddl.Fuser(comm)
        raise AssertionError("DDL_FUSION_BYTES=lots was accepted")
    except ValueError as e:
        assert "DDL_FUSION_BYTES" in str(e)
    os.environ["DDL_FUSION_BYTES"] = "1K"
    os.environ["DDL_CYCLE_TIME_MS"] = "3"
    with ddl.Fuser(comm) as small:  # from the environment
        assert small.fusion_bytes == 1024 and small.cycle_ms == 3.0, small
        ys = [np.full(100, 1.0) for _ in range(10)]  # 800 B each: one per buffer
        for hy in [small.allreduce_async(y) for y in ys]:
            hy.wait()
        assert all(np.all(y == n) for y in ys)
        assert small.stats["fused_allreduces"] == 0, small.stats
    h.wait()
    assert np.all(x == n)
    comm.destroy()  # closes the Fuser first
    assert fuser.closed
    print("ok")


def scenario_torch(comm):
    """PyTorch CPU tensors through comm.enable_fusion(): several dtypes, ops, out of place."""
    torch = torch_or_skip()
    n, me = comm.size, comm.rank
    comm.enable_fusion()
    cases = [(torch.float32, "sum", 1000), (torch.bfloat16, "sum", 64), (torch.int64, "max", 7),
             (torch.float64, "avg", 33), (torch.float16, "min", 12)]
    jobs = []
    for i, (dt, op, count) in enumerate(cases):
        t = (torch.arange(count, dtype=torch.float64) % 8 + me).to(dt)
        parts = [(torch.arange(count, dtype=torch.float64) % 8 + r).to(dt).to(torch.float64)
                 for r in range(n)]
        stacked = torch.stack(parts)
        expected = {"sum": stacked.sum(0), "max": stacked.max(0).values,
                    "min": stacked.min(0).values, "avg": stacked.mean(0)}[op]
        out = torch.zeros(count, dtype=dt) if i % 2 else None
        h = comm.allreduce(t, out, op=op, async_=True, name=f"p{i}")
        jobs.append((h, out if out is not None else t, expected.to(dt), f"{dt} {op}"))
    for h, result, expected, what in jobs:
        assert h.wait() is result, what
        assert torch.equal(result, expected), (what, result[:4], expected[:4])
    comm.disable_fusion()
    print("ok")


def main():
    name, args = sys.argv[1], sys.argv[2:]
    comm = ddl.init()
    try:
        globals()["scenario_" + name](comm, *args)
    finally:
        comm.destroy()


if __name__ == "__main__":
    main()

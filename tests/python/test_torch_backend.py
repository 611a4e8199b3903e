"""The torch.distributed backend "ddl" (ddl.torch), in real processes.

pytest starts jobs of 2 and 4 processes with torchrun (python -m torch.distributed.run) and
with ddlrun; each process runs this file as a script with a scenario name (or several, "a+b",
one after another). Results are checked against float64 references that every rank computes
for every rank's input, and against gloo where it offers the same collective. Every job runs
under a timeout: a hang fails the test.

Run: DDL_BUILD_DIR=build-py /root/.cache/ddl/venv/bin/python -m pytest tests/python/test_torch_backend.py
"""

import os
import subprocess
import sys
import time


# ---- the processes' side ---------------------------------------------------------------------

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]
SIZES = [1, 7, 1000, 300_001]  # 300,001 floats: over 1 MB, pipelined in chunks


def _tol(dtype, torch):
    return {torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2),
            torch.float32: (1e-5, 1e-5)}.get(dtype, (1e-12, 0))


def _input(torch, rank, n, dtype, salt=0):
    """Rank's data: small values so that sums and products are exact or well within
    tolerance in every dtype (products of up to 4 values in 1..3)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.5).to(dtype)
    return torch.randint(1, 4, (n,), generator=g, dtype=torch.int64).to(dtype)


def _reference(torch, op, inputs):
    x = torch.stack([t.to(torch.float64) for t in inputs])
    R = torch.distributed.ReduceOp
    if op == R.SUM:
        return x.sum(0)
    if op == R.PRODUCT:
        return x.prod(0)
    if op == R.MIN:
        return x.min(0).values
    if op == R.MAX:
        return x.max(0).values
    if op == R.AVG:
        return x.sum(0) / len(inputs)
    raise ValueError(op)


def _check(torch, got, want, what):
    rtol, atol = _tol(got.dtype, torch)
    if got.dtype.is_floating_point:
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=rtol, atol=atol)
    else:
        ok = torch.equal(got.to(torch.float64), want.to(torch.float64))
    if not ok:
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
        raise AssertionError(f"{what}: wrong result (max abs diff {diff.max().item()}, "
                             f"first got {got.flatten()[:4].tolist()}, "
                             f"want {want.flatten()[:4].tolist()})")


def _ops_for(torch, dtype):
    R = torch.distributed.ReduceOp
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype.is_floating_point:  # torch's AVG on integers is not defined the same everywhere
        ops.append(R.AVG)
    return ops


def scenario_collectives(torch, dist, rank, size, group=None, ranks=None):
    """Every collective, dtype, op and root on `group` (whole world when None); `ranks` are
    the group's global ranks (for the inputs: each is made from the global rank)."""
    ranks = ranks or list(range(size))
    me = ranks.index(rank)
    n_members = len(ranks)
    R = dist.ReduceOp
    for name in DTYPES:
        dtype = getattr(torch, name)
        for n in SIZES:
            inputs = [_input(torch, r, n, dtype) for r in ranks]
            for op in _ops_for(torch, dtype):
                if op == R.PRODUCT and n > 1000:
                    continue  # products of big vectors only test overflow
                t = inputs[me].clone()
                dist.all_reduce(t, op=op, group=group)
                want = _reference(torch, op, inputs)
                if not dtype.is_floating_point:
                    want = want.to(dtype)  # same wrap-around as the integer result
                _check(torch, t, want, f"all_reduce {name} n={n} op={op}")
            for root in range(n_members):
                t = inputs[me].clone() if me == root else torch.zeros(n, dtype=dtype)
                dist.broadcast(t, src=ranks[root], group=group)
                _check(torch, t, inputs[root], f"broadcast {name} n={n} root={root}")
            if n > 1000:
                continue
            # all_gather (list) and all_gather_into_tensor
            outs = [torch.zeros(n, dtype=dtype) for _ in ranks]
            dist.all_gather(outs, inputs[me], group=group)
            for r in range(n_members):
                _check(torch, outs[r], inputs[r], f"all_gather {name} n={n} from {r}")
            flat = torch.zeros(n * n_members, dtype=dtype)
            dist.all_gather_into_tensor(flat, inputs[me], group=group)
            _check(torch, flat, torch.cat(inputs), f"all_gather_into_tensor {name} n={n}")
            # all_gather_coalesced, the list of lists: [rank][i], tensors of two shapes
            second = [_input(torch, r, 3, dtype, salt=7).reshape(3, 1) for r in ranks]
            lists = [[torch.zeros(n, dtype=dtype), torch.zeros(3, 1, dtype=dtype)]
                     for _ in ranks]
            dist.all_gather_coalesced(lists, [inputs[me], second[me]], group=group)
            for r in range(n_members):
                _check(torch, lists[r][0], inputs[r], f"all_gather_coalesced {name} n={n} [{r}][0]")
                _check(torch, lists[r][1], second[r], f"all_gather_coalesced {name} [{r}][1]")
            # reduce_scatter (list) and reduce_scatter_tensor: rank r gets block r
            blocks = [[_input(torch, r, n, dtype, salt=b) for b in range(n_members)]
                      for r in ranks]
            for op in _ops_for(torch, dtype):
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, [b.clone() for b in blocks[me]], op=op, group=group)
                want = _reference(torch, op, [blocks[r][me] for r in range(n_members)])
                if not dtype.is_floating_point:
                    want = want.to(dtype)
                _check(torch, out, want, f"reduce_scatter {name} n={n} op={op}")
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, torch.cat(blocks[me]), op=op, group=group)
                _check(torch, out, want, f"reduce_scatter_tensor {name} n={n} op={op}")
    # PREMUL_SUM (what FSDP uses to pre-divide): sum of factor * x
    x = _input(torch, rank, 100, torch.float32)
    t = x.clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=group)
    _check(torch, t, 0.5 * _reference(torch, R.SUM, [_input(torch, r, 100, torch.float32)
                                                      for r in ranks]), "PREMUL_SUM")
    # A non-contiguous tensor: ddl works on a contiguous copy that is copied back.
    m = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    want = m * n_members
    dist.all_reduce(m, group=group)
    _check(torch, m, want, "all_reduce of a transposed tensor")
    dist.barrier(group=group)


def scenario_ops(torch, dist, rank, size):
    scenario_collectives(torch, dist, rank, size)
    # Against gloo, in the same processes.
    gloo = dist.new_group(backend="gloo")
    for name in ("float32", "float64", "int32"):
        dtype = getattr(torch, name)
        a = _input(torch, rank, 513, dtype)
        b = a.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        _check(torch, a, b.to(torch.float64), f"all_reduce {name} vs gloo")


def scenario_async(torch, dist, rank, size):
    """Several collectives in flight at once, completed by wait(), is_completed() or their
    Future (what DDP's hooks use)."""
    tensors = [torch.full((1000 * (i + 1),), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futs = [w.get_future() for w in works[::2]]
    for w in works[1::2]:
        w.wait()
    torch.futures.wait_all(futs)
    for i, t in enumerate(tensors):
        want = sum(float(r + i) for r in range(size))
        assert torch.all(t == want), f"async all_reduce {i}: {t[:3]} != {want}"
    for f in futs:
        v = f.value()
        assert isinstance(v, list) and isinstance(v[0], torch.Tensor), f"future value {v!r}"
    # is_completed turns true without wait()
    t = torch.ones(10)
    w = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + 30
    while not w.is_completed():
        assert time.monotonic() < deadline, "is_completed() never became true"
        time.sleep(0.001)
    assert torch.all(t == size)
    # async of every kind, then one wait each
    g = torch.zeros(size * 5)
    w1 = dist.all_gather_into_tensor(g, torch.full((5,), float(rank)), async_op=True)
    out = torch.zeros(5)
    w2 = dist.reduce_scatter_tensor(out, torch.ones(5 * size), async_op=True)
    b = torch.full((7,), float(rank))
    w3 = dist.broadcast(b, src=size - 1, async_op=True)
    w4 = dist.barrier(async_op=True)
    for w in (w1, w2, w3, w4):
        w.wait()
    assert torch.equal(g, torch.arange(size, dtype=torch.float32).repeat_interleave(5))
    assert torch.all(out == size) and torch.all(b == size - 1)
    # _coalescing_manager: the coalesced forms (allreduce_coalesced and friends)
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [torch.full((n,), float(rank)) for n in (3, 100, 5000)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for t in ts:
        assert torch.all(t == sum(range(size))), "coalesced all_reduce"
    outs = [torch.zeros(n * size) for n in (2, 50)]
    with _coalescing_manager():
        for o in outs:
            dist.all_gather_into_tensor(o, torch.full((o.numel() // size,), float(rank)))
    for o in outs:
        want = torch.arange(size, dtype=torch.float32).repeat_interleave(o.numel() // size)
        assert torch.equal(o, want), "coalesced all_gather_into_tensor"
    outs = [torch.zeros(n) for n in (2, 50)]
    with _coalescing_manager():
        for o in outs:
            dist.reduce_scatter_tensor(o, torch.full((o.numel() * size,), float(rank + 1)))
    for o in outs:
        assert torch.all(o == sum(r + 1 for r in range(size))), "coalesced reduce_scatter"
    # A Work dropped without wait(): its temporaries must outlive the collective, and the
    # outputs are filled all the same (the list form copies out of a flat buffer).
    outs = [torch.zeros(1000) for _ in range(size)]
    dist.all_gather(outs, torch.full((1000,), float(rank)), async_op=True)  # dropped at once
    dist.barrier()
    for r in range(size):
        assert torch.all(outs[r] == r), f"dropped all_gather: block {r} is {outs[r][:3]}"
    _ddp_with_hooks(torch, dist, rank, size)


def _ddp_with_hooks(torch, dist, rank, size):
    """DDP with small buckets (several allreduces in flight during backward, completed through
    their Futures), with a Python comm hook that chains on the Future (fp16 compression), and
    with its buckets in ddl's memory:
    after a few steps on different data, every rank holds the same parameters, and they equal
    one process's training on the whole batch."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 4))

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(3, 8 * size, 16, generator=g), torch.randint(0, 4, (3, 8 * size),
                                                                     generator=g)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    # The third: buckets in ddl's memory (torch's Reducer asks the backend for them).
    for hook, ddl_memory in ((None, False), (default_hooks.fp16_compress_hook, False),
                             (None, True)):
        made = backend.tensors_allocated
        os.environ["DDP_DISABLE_COMM_MEM"] = "0" if ddl_memory else "1"
        ddp = DDP(model(), bucket_cap_mb=0.01)  # ~10 KB buckets: 3+ allreduces per backward
        del os.environ["DDP_DISABLE_COMM_MEM"]
        assert (backend.tensors_allocated > made) == ddl_memory, (made, ddl_memory)
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        ref = model()
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(3):
            mine = slice(rank * 8, rank * 8 + 8)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x[step][mine]), y[step][mine]).backward()
            opt.step()
            ref_opt.zero_grad()
            torch.nn.functional.cross_entropy(ref(x[step]), y[step]).backward()
            ref_opt.step()
        flat = torch.cat([p.detach().flatten() for p in ddp.parameters()])
        every = [torch.zeros_like(flat) for _ in range(size)]
        dist.all_gather(every, flat)
        for r in range(size):
            assert torch.equal(every[r], flat), f"DDP ({hook}): rank {r}'s parameters differ"
        want = torch.cat([p.detach().flatten() for p in ref.parameters()])
        tol = 1e-5 if hook is None else 1e-2  # fp16 gradients
        assert torch.allclose(flat, want, rtol=tol, atol=tol), \
            f"DDP ({hook}) differs from one process: {(flat - want).abs().max()}"


def scenario_groups(torch, dist, rank, size):
    """new_group: a subset, overlapping groups, and one this rank is not in."""
    if size == 4:
        layouts = [[0, 1], [1, 2, 3], [0, 2], [3]]
    else:
        layouts = [[0], [0, 1], [1]]
    groups = [dist.new_group(ranks) for ranks in layouts]  # collective: every rank calls it
    for ranks, g in zip(layouts, groups):
        if rank in ranks:
            assert dist.get_backend(g) == "ddl", dist.get_backend(g)
            scenario_collectives(torch, dist, rank, size, group=g, ranks=ranks)
    # The world group still works after its subgroups ran.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == size)


def scenario_smoke(torch, dist, rank, size):
    """One collective of each kind, for the tests of how processes meet."""
    t = torch.full((5,), float(rank))
    dist.all_reduce(t)
    assert torch.all(t == sum(range(size))), t
    w = dist.broadcast(t, src=size - 1, async_op=True)
    w.get_future().wait()
    dist.barrier()


def scenario_direct(torch, dist, rank, size):
    """ddl.torch.all_reduce_ and torch.ops.ddl.all_reduce_ (in place, no Work), also inside
    torch.compile, against dist.all_reduce on the same inputs; bad inputs raise."""
    import ddl.torch
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for op, reduce_op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX),
                              ("avg", dist.ReduceOp.AVG)):
            if op == "avg" and dtype == torch.int64:
                continue
            x = _input(torch, rank, 1001, dtype)
            want = x.clone()
            dist.all_reduce(want, op=reduce_op)
            got = ddl.torch.all_reduce_(x, op=op)
            assert got is x
            _check(torch, got, want, f"all_reduce_ {op} {dtype}")
    handle = ddl.torch.direct_handle()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(a):
        b = a * 2
        torch.ops.ddl.all_reduce_(b, handle, 0)
        return b + 1
    out = step(torch.full((7,), float(rank)))
    assert torch.equal(out, torch.full((7,), 2.0 * sum(range(size)) + 1)), out

    @torch.compile(backend="aot_eager")  # the wrapper itself, in a compiled function
    def wrapped(a):
        return ddl.torch.all_reduce_(a * 2, op="max") + 1
    out = wrapped(torch.full((5,), float(rank)))
    assert torch.equal(out, torch.full((5,), 2.0 * (size - 1) + 1)), out
    for bad, words in ((lambda: ddl.torch.all_reduce_(torch.ones(4, 2).t()), "contiguous"),
                       (lambda: ddl.torch.all_reduce_(torch.ones(2), op="xor"), "xor"),
                       (lambda: torch.ops.ddl.all_reduce_(torch.ones(2), 12345, 0),
                        "not a live communicator"),
                       (lambda: ddl.torch.extension().all_reduce_(torch.ones(2), 12345, 0),
                        "not a live communicator")):
        try:
            bad()
        except (RuntimeError, ValueError) as e:
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"no error for {words}")
    dist.barrier()


def scenario_mismatch(torch, dist, rank, size):
    """Ranks disagree on the size of an all_reduce: every rank must raise, not hang."""
    t = torch.ones(10 if rank == 0 else 20)
    try:
        dist.all_reduce(t)
    except Exception as e:  # DistBackendError, from ddl's mismatch detection or deadline
        print(f"rank {rank}: raised {type(e).__name__}: {e}", flush=True)
        os._exit(0)  # not an error exit: the launcher would kill the others
    print(f"rank {rank}: no error", flush=True)
    os._exit(0)


def scenario_dead(torch, dist, rank, size):
    """The last rank leaves after a first collective; the others' next one must raise."""
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == size - 1:
        os._exit(0)
    time.sleep(0.5)
    try:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        w.wait()
    except Exception as e:
        print(f"rank {rank}: raised {type(e).__name__}: {e}", flush=True)
        os._exit(0)  # not an error exit: the launcher would kill the others
    print(f"rank {rank}: no error", flush=True)
    os._exit(0)


def _main(scenario):
    import datetime

    import torch
    import torch.distributed as dist

    import ddl.torch  # noqa: F401  registers "ddl"

    # A short deadline for the failure scenarios: an error must come well before pytest's.
    # (smoke's is below pytest's limit for it, so that a stall ends in an error that says where)
    scenarios = scenario.split("+")  # several, one after another in one process group
    seconds = {"mismatch": 15, "dead": 15, "smoke": 60}.get(scenario, 120)
    timeout = datetime.timedelta(seconds=seconds)
    init = os.environ.get("DDL_TEST_INIT_METHOD")  # tcp://... or file://...; else env://
    if init:
        dist.init_process_group("ddl", init_method=init, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    else:
        dist.init_process_group("ddl", timeout=timeout)
    rank, size = dist.get_rank(), dist.get_world_size()
    for one in scenarios:
        globals()["scenario_" + one](torch, dist, rank, size)
        print(f"rank {rank}: {one} ok", flush=True)
    dist.destroy_process_group()


# ---- pytest's side ---------------------------------------------------------------------------

if __name__ != "__main__":
    import pytest

    from conftest import DDLRUN, package_env

    def _env():
        env = package_env(dict(os.environ))
        env.pop("RANK", None)
        env.pop("WORLD_SIZE", None)
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def _run(launcher, nranks, scenario, timeout, env=None):
        script = os.path.abspath(__file__)
        if launcher == "torchrun":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                   str(nranks), "--master-port", str(_free_port()), script, scenario]
        else:
            if not os.access(DDLRUN, os.X_OK):
                pytest.skip(f"no ddlrun at {DDLRUN} (build ddl first)")
            cmd = [DDLRUN, "-n", str(nranks), "--tag-output", "--", sys.executable, script,
                   scenario]
        try:
            p = subprocess.run(cmd, env=dict(_env(), **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            pytest.fail(f"{scenario} under {launcher} -n {nranks} hung for {timeout} s:\n{out}")
        return p.returncode, p.stdout

    def _free_port():
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    @pytest.fixture(scope="module", autouse=True)
    def _torch_and_extension():
        pytest.importorskip("torch", reason="torch is not installed in this Python")
        # conftest put the package under test on the path. Build the extension (in a checkout)
        # once here, not in every rank at once.
        import ddl.torch
        ddl.torch.extension()

    LAUNCHERS = ["torchrun", "ddlrun"]

    # Every scenario at 2 and 4 ranks under torchrun; under ddlrun (which only changes how the
    # processes meet) some per rank count. A job runs its scenarios ("a+b") one after another
    # in one process group: each start of torch costs seconds of the suite's 2 cores.
    CASES = [("torchrun", 2, "ops+async+groups"), ("torchrun", 4, "ops+async+groups"),
             ("ddlrun", 2, "ops+async"), ("ddlrun", 4, "groups"), ("ddlrun", 3, "direct")]

    @pytest.mark.parametrize("launcher,nranks,scenarios", CASES)
    def test_collectives(launcher, nranks, scenarios):
        rc, out = _run(launcher, nranks, scenarios, timeout=300)
        assert rc == 0, f"{scenarios} under {launcher} -n {nranks} failed:\n{out}"
        for scenario in scenarios.split("+"):
            assert out.count(f"{scenario} ok") == nranks, out

    @pytest.mark.parametrize("how", ["tcp", "file"])
    def test_init_methods(tmp_path, how):
        """init_method tcp:// and file:// (env:// is every other test's)."""
        if how == "tcp":
            init = f"tcp://127.0.0.1:{_free_port()}"
        else:
            init = f"file://{tmp_path / 'store'}"
        rc, out = _run("torchrun", 2, "smoke", timeout=180,
                       env={"DDL_TEST_INIT_METHOD": init})
        assert rc == 0 and out.count("smoke ok") == 2, out

    @pytest.mark.parametrize("launcher", LAUNCHERS)
    @pytest.mark.parametrize("scenario", ["mismatch", "dead"])
    def test_failure_raises(launcher, scenario):
        nranks = 2 if scenario == "mismatch" else 3
        rc, out = _run(launcher, nranks, scenario, timeout=90)
        raised = out.count("raised")
        expected = nranks if scenario == "mismatch" else nranks - 1
        assert raised == expected, f"{scenario}: {raised} of {expected} ranks raised:\n{out}"
        assert "no error" not in out, out


if __name__ == "__main__":
    _main(sys.argv[1])

"""The ddl torch backend's alltoall, send/recv (tags, from any source), reduce, gather and
scatter, in real processes, each result compared with gloo's for the same inputs (a gloo group
of the same ranks in the same job). Run as a script by torchrun/ddlrun; pytest's side below."""

import os
import subprocess
import sys


# ---- the processes' side ---------------------------------------------------------------------

def _data(torch, rank, n, dtype, salt=0):
    g = torch.Generator().manual_seed(7919 * rank + 31 * n + salt)
    return torch.randint(0, 50, (n,), generator=g, dtype=torch.int64).to(dtype)


def _same(torch, got, want, what):
    if not torch.equal(got, want):
        raise AssertionError(f"{what}: ddl {got.flatten()[:6].tolist()} != gloo "
                             f"{want.flatten()[:6].tolist()}")


def _both(dist, gloo, call):
    """call(group) under ddl (the default group) and under gloo; their outputs."""
    return call(None), call(gloo)


def scenario_alltoall(torch, dist, rank, size, gloo):
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        # Even splits, a 2-d tensor (rows split along dim 0), async.
        x = _data(torch, rank, 6 * size, dtype).view(3 * size, 2)

        def even(group):
            out = torch.empty_like(x)
            dist.all_to_all_single(out, x, group=group, async_op=True).wait()
            return out
        a, b = _both(dist, gloo, even)
        _same(torch, a, b, f"all_to_all_single even {dtype}")
        # Uneven splits with zeros: rank r sends (r + 2 j) % 3 rows to rank j.
        send_splits = [(rank + 2 * j) % 3 for j in range(size)]
        recv_splits = [(j + 2 * rank) % 3 for j in range(size)]
        y = _data(torch, rank, sum(send_splits), dtype, 1)

        def uneven(group):
            out = torch.full((sum(recv_splits),), -1).to(dtype)
            dist.all_to_all_single(out, y, recv_splits, send_splits, group=group)
            return out
        a, b = _both(dist, gloo, uneven)
        _same(torch, a, b, f"all_to_all_single uneven {dtype}")
    ins = [_data(torch, rank, 3, torch.float32, 2 + j) for j in range(size)]

    def as_list(group):
        outs = [torch.empty(3) for _ in range(size)]
        dist.all_to_all(outs, ins, group=group)
        return torch.cat(outs)
    a, b = _both(dist, gloo, as_list)
    _same(torch, a, b, "all_to_all (list)")
    # Tensors of different sizes (gloo's list form wants one size): against the inputs.
    ins = [_data(torch, rank, j + 1, torch.float32, 2 + j) for j in range(size)]
    outs = [torch.empty(rank + 1) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for j in range(size):
        _same(torch, outs[j], _data(torch, j, rank + 1, torch.float32, 2 + rank),
              f"all_to_all (list, uneven) from {j}")


def scenario_p2p(torch, dist, rank, size, gloo):
    to, frm = (rank + 1) % size, (rank - 1) % size
    for n in (1, 1000, 300_001):
        out = _data(torch, rank, n, torch.float32, n)
        got = torch.empty(n)
        if rank % 2 == 0:  # blocking, ordered so that it cannot deadlock with an odd size
            dist.send(out, to)
            dist.recv(got, frm)
        else:
            dist.recv(got, frm)
            dist.send(out, to)
        _same(torch, got, _data(torch, frm, n, torch.float32, n), f"send/recv {n}")
        got = torch.empty(n)
        reqs = [dist.isend(out, to), dist.irecv(got, frm)]
        for r in reqs:
            r.wait()
        _same(torch, got, _data(torch, frm, n, torch.float32, n), f"isend/irecv {n}")
    # batch_isend_irecv both ways around the ring at once, twice (ddl groups them).
    for _ in range(2):
        left, right = torch.empty(4096), torch.empty(4096)
        ops = [dist.P2POp(dist.isend, _data(torch, rank, 4096, torch.float32), to),
               dist.P2POp(dist.isend, _data(torch, rank, 4096, torch.float32, 5), frm),
               dist.P2POp(dist.irecv, left, frm), dist.P2POp(dist.irecv, right, to)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        _same(torch, left, _data(torch, frm, 4096, torch.float32), "batch_isend_irecv left")
        _same(torch, right, _data(torch, to, 4096, torch.float32, 5), "batch_isend_irecv right")
    try:
        dist.send(torch.empty(1), to, tag=-2)
    except Exception as e:  # torch wraps the backend's error
        assert "tags are 0.." in str(e), str(e)
    else:
        raise AssertionError("no error for a negative tag")
    dist.barrier()


def scenario_tags(torch, dist, rank, size, gloo):
    """Tags and receives from any source, under ddl and gloo alike."""
    to, frm = (rank + 1) % size, (rank - 1) % size

    def reversed_tags(group):
        # Two messages to the next rank, tag 5 then tag 3; received tag 3 first.
        outs = [_data(torch, rank, 1000, torch.float32, 5), _data(torch, rank, 1000,
                                                                  torch.float32, 3)]
        works = [dist.isend(outs[0], to, group=group, tag=5),
                 dist.isend(outs[1], to, group=group, tag=3)]
        three, five = torch.empty(1000), torch.empty(1000)
        dist.recv(three, frm, group=group, tag=3)
        dist.recv(five, frm, group=group, tag=5)
        for w in works:
            w.wait()
        return torch.cat([three, five])
    a, b = _both(dist, gloo, reversed_tags)
    _same(torch, a, b, "tags received in another order")
    _same(torch, a, torch.cat([_data(torch, frm, 1000, torch.float32, 3),
                               _data(torch, frm, 1000, torch.float32, 5)]), "tags, by content")

    def mixed_batch(group):
        # batch_isend_irecv with two tags each way; receives posted in the other tag order.
        got = {t: torch.empty(64) for t in (1, 2)}
        ops = [dist.P2POp(dist.isend, _data(torch, rank, 64, torch.float32, t), to, group, tag=t)
               for t in (1, 2)]
        ops += [dist.P2POp(dist.irecv, got[t], frm, group, tag=t) for t in (2, 1)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return torch.cat([got[1], got[2]])
    a, b = _both(dist, gloo, mixed_batch)
    _same(torch, a, b, "batch_isend_irecv mixing tags")

    def any_source(group):
        # Every other rank sends rank 0 its rank, twice (tag 7); rank 0 receives them from
        # any source: the (source, value) pairs, sorted, and each sender's two in order.
        if rank != 0:
            for k in range(2):
                dist.send(torch.tensor([rank * 10 + k]), 0, group=group, tag=7)
            return torch.empty(0, dtype=torch.int64)
        pairs = []
        for _ in range(2 * (size - 1)):
            t = torch.empty(1, dtype=torch.int64)
            src = dist.recv(t, group=group, tag=7)
            assert t.item() // 10 == src, (t.item(), src)
            pairs.append((src, t.item()))
        for s_ in range(1, size):
            mine = [v for p, v in pairs if p == s_]
            assert mine == [s_ * 10, s_ * 10 + 1], (s_, mine)
        return torch.tensor(sorted(pairs))
    if size > 1:
        a, b = _both(dist, gloo, any_source)
        _same(torch, a, b, "recv from any source")
        # The Work of irecv without a source tells its sender.
        if rank == 1:
            dist.send(torch.tensor([5.0]), 0, tag=9)
        if rank == 0:
            t = torch.empty(1)
            work = dist.irecv(t, tag=9)
            work.wait()
            assert work._source_rank() == 1 and t.item() == 5.0, (work._source_rank(), t)

    if size > 1 and rank < 2:
        # A message of tag 1 does not complete a receive of tag 2 posted before it.
        if rank == 1:
            dist.send(torch.tensor([1.0]), 0, tag=1)
            dist.recv(torch.empty(1), 0, tag=9)  # rank 0 looked
            dist.send(torch.tensor([2.0]), 0, tag=2)
        else:
            two, one = torch.empty(1), torch.empty(1)
            pending = dist.irecv(two, 1, tag=2)
            dist.recv(one, 1, tag=1)
            assert one.item() == 1.0 and not pending.is_completed(), (one, two)
            dist.send(torch.empty(1), 1, tag=9)
            pending.wait()
            assert two.item() == 2.0, two
    dist.barrier()


def scenario_rooted(torch, dist, rank, size, gloo):
    R = dist.ReduceOp
    for root in range(size):
        for op in (R.SUM, R.MAX, R.PRODUCT):
            x = _data(torch, rank, 999, torch.float64, root) % 3 + 1

            def red(group):
                t = x.clone()
                dist.reduce(t, root, op=op, group=group)
                return t
            a, b = _both(dist, gloo, red)
            if rank == root:
                _same(torch, a, b, f"reduce root {root} {op}")
        x = _data(torch, rank, 17, torch.int32, root)

        def gat(group):
            outs = [torch.empty(17, dtype=torch.int32) for _ in range(size)] if rank == root \
                else None
            dist.gather(x, outs, dst=root, group=group)
            return torch.cat(outs) if outs else torch.empty(0)
        a, b = _both(dist, gloo, gat)
        _same(torch, a, b, f"gather root {root}")

        def sca(group):
            out = torch.empty(17, dtype=torch.int32)
            ins = [_data(torch, root, 17, torch.int32, j) for j in range(size)] \
                if rank == root else None
            dist.scatter(out, ins, src=root, group=group)
            return out
        a, b = _both(dist, gloo, sca)
        _same(torch, a, b, f"scatter root {root}")
    # all_gather and reduce_scatter of tensors of different sizes (NCCL's backend allows them;
    # gloo does not):
    # against the tensors every rank knows the others send, blocking and async.
    def uneven(r):
        return _data(torch, r, 3 * r + 1, torch.float32, 7)
    for async_op in (False, True):
        outs = [torch.full((3 * r + 1,), -1.0) for r in range(size)]
        work = dist.all_gather(outs, uneven(rank), async_op=async_op)
        if async_op:
            work.wait()
        for r in range(size):
            _same(torch, outs[r], uneven(r), f"uneven all_gather from rank {r}")
    # reduce_scatter of blocks of different sizes: block r of every rank's list summed into r.
    for async_op in (False, True):
        ins = [_data(torch, rank, 2 * r + 1, torch.float64, r) for r in range(size)]
        out = torch.full((2 * rank + 1,), -1.0, dtype=torch.float64)
        work = dist.reduce_scatter(out, ins, async_op=async_op)
        if async_op:
            work.wait()
        want = sum(_data(torch, k, 2 * rank + 1, torch.float64, rank) for k in range(size))
        _same(torch, out, want, "uneven reduce_scatter")
    objs = [None] * size if rank == 0 else None
    dist.gather_object({"rank": rank, "word": "x" * rank}, objs, dst=0)
    if rank == 0:
        assert objs == [{"rank": r, "word": "x" * r} for r in range(size)], objs
    got = [None]
    dist.scatter_object_list(got, [f"to {r}" for r in range(size)] if rank == 0 else None, src=0)
    assert got[0] == f"to {rank}", got


def _main(scenario):
    import datetime

    import torch
    import torch.distributed as dist

    import ddl.torch  # noqa: F401  registers "ddl"

    dist.init_process_group("ddl", timeout=datetime.timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    for one in scenario.split("+"):  # several, one after another in one process group
        globals()["scenario_" + one](torch, dist, rank, size, gloo)
        print(f"rank {rank}: {one} ok", flush=True)
    dist.destroy_process_group()


# ---- pytest's side ---------------------------------------------------------------------------

if __name__ != "__main__":
    import pytest

    from conftest import DDLRUN
    from test_torch_backend import _env, _free_port  # noqa: F401  (one way to launch)

    @pytest.fixture(scope="module", autouse=True)
    def _extension():
        pytest.importorskip("torch", reason="torch is not installed in this Python")
        import ddl.torch  # conftest put the package under test on the path
        ddl.torch.extension()  # built once here, not in every rank at once

    def _run(launcher, nranks, scenario):
        script = os.path.abspath(__file__)
        if launcher == "torchrun":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nranks),
                   "--master-port", str(_free_port()), script, scenario]
        else:
            cmd = [DDLRUN, "-n", str(nranks), "--tag-output", "--", sys.executable, script,
                   scenario]
        try:
            p = subprocess.run(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, timeout=300)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{scenario} under {launcher} -n {nranks} hung:\n{e.stdout}")
        assert p.returncode == 0, f"{scenario} under {launcher} -n {nranks}:\n{p.stdout}"
        for one in scenario.split("+"):
            assert p.stdout.count(f"{one} ok") == nranks, p.stdout

    # A job runs its scenarios ("a+b") one after another: each start of torch costs seconds.
    @pytest.mark.parametrize("nranks", [1, 2, 3, 4])
    def test_collectives_match_gloo(nranks):
        _run("torchrun", nranks, "alltoall+rooted")

    # send/recv at 2 (with tags), 3 and 4 ranks; tags and any-source at 2 and 3.
    @pytest.mark.parametrize("launcher,nranks,scenarios", [
        ("torchrun", 2, "p2p+tags"), ("torchrun", 3, "p2p"), ("ddlrun", 4, "p2p"),
        ("ddlrun", 3, "tags")])
    def test_send_recv_tags_and_any_source_match_gloo(launcher, nranks, scenarios):
        _run(launcher, nranks, scenarios)


if __name__ == "__main__":
    _main(sys.argv[1])

"""One rank of the torch backend's checks on CUDA tensors: `torch_rank.py SCENARIO`, started by
tests/gpu/run_gpu_checks.sh under ddlrun (every rank on GPU 0, as ranks sharing a GPU are).

  collectives  every torch.distributed call on CUDA tensors (float32, bfloat16, int64; 1 to
               1,000,003 elements; blocking and async_op; a non-contiguous tensor) against a
               float64 reference on the host; stream order: a collective issued on a stream
               after a kernel that writes its input late (a sleep first), and work queued
               after Work.wait() on another stream, read the right values; a Future's then().
  ddp          DistributedDataParallel on a CUDA model (find_unused_parameters, no_sync for
               gradient accumulation), 20 steps, against a single-process CPU run of the same
               global batches: parameters equal within float32 tolerance.
  fsdp         FSDP2 (fully_shard) on a CUDA model, 10 steps, against the same CPU run.
  overlap      a 64 MB all_reduce (async_op, on ddl's side stream) with matmuls queued behind
               it on the caller's stream, against each alone (medians of 5 rounds).
  latency      µs per dist.all_reduce of 8 B .. 64 KB CUDA tensors; at one rank also NCCL's.

Exit status 0 when every check passed; a failed check raises with what it was doing.
"""

import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist

import ddl.torch  # noqa: F401  (registers the "ddl" backend, reads ddlrun's variables)

# DDL_TEST_DEVICE=cpu runs the same checks on CPU tensors (what a machine without a GPU can
# check of this script itself); stream order and overlap need CUDA.
DEV = torch.device(os.environ.get("DDL_TEST_DEVICE", "cuda:0"))
DTYPES = (torch.float32, torch.bfloat16, torch.int64)
COUNTS = (1, 31, 4099, 1_000_003)


def inputs(rank, count, dtype, salt=0):
    """Rank `rank`'s input: small integers (1..3), so every sum and average is exact."""
    i = torch.arange(count, dtype=torch.int64)
    return ((i * 7 + rank * 3 + salt) % 3 + 1).to(torch.float64)


def dev(v, dtype):
    return v.to(dtype).to(DEV)


def expect(got, want, what):
    got = got.detach().to("cpu", torch.float64)
    want = want.to(torch.float64)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-2, atol=0):
        bad = (got - want).abs().argmax().item() if got.shape == want.shape else "shape"
        raise AssertionError(f"rank {dist.get_rank()}: {what}: wrong (first bad: {bad})")


def check_collectives():
    r, n = dist.get_rank(), dist.get_world_size()
    checked = 0
    for dtype in DTYPES:
        for count in COUNTS:
            what = f"{dtype} count {count}"
            mine = inputs(r, count, dtype)
            every = [inputs(j, count, dtype) for j in range(n)]
            total = torch.stack(every).sum(0)
            for async_op in (False, True):
                x = dev(mine, dtype)
                work = dist.all_reduce(x, async_op=async_op)
                if async_op:
                    work.wait()
                expect(x, total, f"all_reduce {what} async={async_op}")
                checked += 1
            x = dev(mine, dtype)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            expect(x, torch.stack(every).max(0).values, f"all_reduce MAX {what}")
            if dtype.is_floating_point:
                x = dev(mine, dtype)
                dist.all_reduce(x, op=dist.ReduceOp.AVG)
                expect(x, total / n, f"all_reduce AVG {what}")
            out = [torch.empty(count, dtype=dtype, device=DEV) for _ in range(n)]
            dist.all_gather(out, dev(mine, dtype))
            expect(torch.cat(out), torch.cat(every), f"all_gather {what}")
            flat = torch.empty(count * n, dtype=dtype, device=DEV)
            dist.all_gather_into_tensor(flat, dev(mine, dtype), async_op=True).wait()
            expect(flat, torch.cat(every), f"all_gather_into_tensor {what}")
            lists = [[torch.empty(count, dtype=dtype, device=DEV),
                      torch.empty(2, 1, dtype=dtype, device=DEV)] for _ in range(n)]
            dist.all_gather_coalesced(lists, [dev(mine, dtype),
                                              dev(inputs(r, 2, dtype, salt=9), dtype).view(2, 1)])
            expect(torch.cat([l[0] for l in lists]), torch.cat(every),
                   f"all_gather_coalesced {what}")
            expect(torch.cat([l[1].reshape(-1) for l in lists]),
                   torch.cat([inputs(j, 2, dtype, salt=9) for j in range(n)]),
                   f"all_gather_coalesced {what}, second tensor")
            big = [inputs(r, count, dtype, salt=k) for k in range(n)]
            want = sum(inputs(j, count, dtype, salt=r) for j in range(n))
            got = torch.empty(count, dtype=dtype, device=DEV)
            dist.reduce_scatter(got, [dev(b, dtype) for b in big])
            expect(got, want, f"reduce_scatter {what}")
            got = torch.empty(count, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(got, dev(torch.cat(big), dtype))
            expect(got, want, f"reduce_scatter_tensor {what}")
            x = dev(mine, dtype)
            dist.broadcast(x, src=n - 1)
            expect(x, every[n - 1], f"broadcast {what}")
            checked += 7
            if count > 5000:
                continue  # the staged calls below: small sizes are enough
            send = dev(torch.cat(big), dtype)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send)
            expect(recv, torch.cat([inputs(j, count, dtype, salt=r) for j in range(n)]),
                   f"all_to_all_single {what}")
            outs = [torch.empty(count + j, dtype=dtype, device=DEV) for j in range(n)]
            dist.all_to_all(outs, [dev(inputs(r, count + r, dtype, salt=j), dtype)
                                   for j in range(n)])
            expect(torch.cat(outs), torch.cat([inputs(j, count + j, dtype, salt=r)
                                               for j in range(n)]), f"all_to_all {what}")
            x = dev(mine, dtype)
            dist.reduce(x, dst=0)
            if r == 0:
                expect(x, total, f"reduce {what}")
            gathered = [torch.empty(count, dtype=dtype, device=DEV) for _ in range(n)] \
                if r == 0 else None
            dist.gather(dev(mine, dtype), gathered, dst=0)
            if r == 0:
                expect(torch.cat(gathered), torch.cat(every), f"gather {what}")
            got = torch.empty(count, dtype=dtype, device=DEV)
            dist.scatter(got, [dev(inputs(j, count, dtype, salt=7), dtype) for j in range(n)]
                         if r == 0 else None, src=0)
            expect(got, inputs(r, count, dtype, salt=7), f"scatter {what}")
            checked += 5
            if n > 1:
                got = torch.empty(count, dtype=dtype, device=DEV)
                ops = [dist.P2POp(dist.isend, dev(mine, dtype), (r + 1) % n),
                       dist.P2POp(dist.irecv, got, (r - 1) % n)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                expect(got, every[(r - 1) % n], f"batch_isend_irecv {what}")
                checked += 1
    # A non-contiguous tensor: every other column of a matrix.
    m = dev(inputs(r, 64 * 32, torch.float32).view(64, 32), torch.float32)
    dist.all_reduce(m[:, ::2])
    want = torch.stack([inputs(j, 64 * 32, torch.float32) for j in range(n)]).sum(0).view(64, 32)
    expect(m[:, ::2], want[:, ::2], "all_reduce of a strided view")
    expect(m[:, 1::2], inputs(r, 64 * 32, torch.float32).view(64, 32)[:, 1::2],
           "the view's other columns untouched")
    # A coalesced batch (torch's _coalescing_manager, as FSDP and DeviceMesh code use it).
    a = dev(inputs(r, 1000, torch.float32), torch.float32)
    b = torch.full((77,), r + 1.0, device=DEV)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    expect(a, torch.stack([inputs(j, 1000, torch.float32) for j in range(n)]).sum(0),
           "coalesced all_reduce")
    expect(b, torch.full((77,), n * (n + 1) / 2), "coalesced all_reduce, second tensor")
    checked += 2
    if DEV.type == "cuda":
        checked += check_stream_order()
    dist.barrier()
    return checked + 2


def check_stream_order():
    r, n = dist.get_rank(), dist.get_world_size()
    count = 1 << 20
    producer = torch.cuda.Stream()
    x = torch.zeros(count, device=DEV)
    with torch.cuda.stream(producer):
        torch.cuda._sleep(50_000_000)  # ~25 ms at 2 GHz: the input is written late
        x.fill_(r + 1)
        dist.all_reduce(x)  # on producer's stream: after the fill
        y = x * 2
    producer.synchronize()
    expect(y, torch.full((count,), 2.0 * n * (n + 1) / 2), "all_reduce after a late kernel")
    # async_op: Work.wait() orders the caller's current stream after the collective.
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        z = torch.full((count,), float(r + 1), device=DEV)
        work = dist.all_reduce(z, async_op=True)
        work.wait()
        doubled = z * 2
    consumer.synchronize()
    expect(doubled, torch.full((count,), 2.0 * n * (n + 1) / 2), "Work.wait() then a kernel")
    # A Future's callback sees the result.
    f = dist.all_reduce(torch.ones(count, device=DEV), async_op=True).get_future()
    got = f.then(lambda fut: fut.value()[0] + 1).wait()
    expect(got, torch.full((count,), float(n + 1)), "Future.then")
    return 3


class Net(torch.nn.Module):
    def __init__(self, unused):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 8)
        # Never used: DDP's find_unused_parameters has to mark its gradient ready.
        self.unused = torch.nn.Linear(64, 8) if unused else None

    def forward(self, x):
        return self.head(self.body(x))


def model(unused=True):
    torch.manual_seed(0)
    return Net(unused)


def batches(steps, global_batch):
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(global_batch, 32, generator=g), torch.randn(global_batch, 8, generator=g))
            for _ in range(steps)]


def train_reference(steps, accumulate, global_batch):
    """The same training in one process on the CPU: each step's gradient is the mean over
    the global batch (DDP's average over ranks of their local means)."""
    net = model().double()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for x, y in batches(steps, global_batch):
        opt.zero_grad()
        for part in range(accumulate):
            xs, ys = x.chunk(accumulate)[part].double(), y.chunk(accumulate)[part].double()
            loss = torch.nn.functional.mse_loss(net(xs), ys) / accumulate
            loss.backward()
        opt.step()
    return net


def local_part(t, r, n, accumulate, part):
    """Rank r's rows of micro-batch `part`: the micro-batch split like the reference's, then
    its rows split among the ranks."""
    return t.chunk(accumulate)[part].chunk(n)[r]


def check_training(kind):
    r, n = dist.get_rank(), dist.get_world_size()
    steps, accumulate, global_batch = (20, 2, 16 * n) if kind == "ddp" else (10, 1, 16 * n)
    net = model(unused=kind == "ddp").to(DEV)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(net, device_ids=[DEV.index] if DEV.type == "cuda" else None,
                      find_unused_parameters=True, bucket_cap_mb=1)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(DEV.type, (n,))
        for layer in net.body:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        wrapped = fully_shard(net, mesh=mesh)
    params = wrapped.parameters()
    opt = torch.optim.SGD(params, lr=0.05)
    for x, y in batches(steps, global_batch):
        opt.zero_grad()
        for part in range(accumulate):
            xs = local_part(x, r, n, accumulate, part).to(DEV)
            ys = local_part(y, r, n, accumulate, part).to(DEV)
            last = part == accumulate - 1
            with wrapped.no_sync() if kind == "ddp" and not last else contextlib.nullcontext():
                loss = torch.nn.functional.mse_loss(wrapped(xs), ys) / accumulate
                loss.backward()
        opt.step()
    ref = dict(train_reference(steps, accumulate, global_batch).named_parameters())
    worst = 0.0
    for name, p in net.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        want = ref[name]
        err = ((full.detach().double().cpu() - want.detach()).norm() / want.norm()).item()
        worst = max(worst, err)
        if err > 1e-4:
            raise AssertionError(f"rank {r}: {kind}: parameter {name} differs from the CPU "
                                 f"run by {err:.2e} (relative)")
    return worst


def synchronize():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, rounds=5):
    """Milliseconds: the median of `rounds` runs of fn, each started together on every rank
    and ended when the device has finished."""
    times = []
    for _ in range(rounds):
        synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def check_overlap():
    """A 64 MB all_reduce issued with async_op, then compute queued behind it on the caller's
    stream (as backward goes on after DDP issues a bucket), then the Work waited: against
    each alone, with as many matmuls as take about as long as the all_reduce. Also how long
    the host spends inside the all_reduce call (a stream-ordered call that does not block the
    host returns long before the collective ends)."""
    grad = torch.ones(16 << 20, device=DEV)  # 64 MB of float32
    a = torch.randn(2048, 2048, device=DEV)

    def allreduce():
        dist.all_reduce(grad, async_op=True).wait()

    allreduce()
    (a @ a).sum().item()
    t_ar = median_time(allreduce)
    t_one = median_time(lambda: [a @ a for _ in range(10)]) / 10
    count = max(1, round(t_ar / t_one))

    def matmuls():
        for _ in range(count):
            a @ a

    in_call = []

    def both():
        t0 = time.perf_counter()
        work = dist.all_reduce(grad, async_op=True)
        in_call.append(time.perf_counter() - t0)
        matmuls()
        work.wait()

    both()
    t_mm, t_both = median_time(matmuls), median_time(both)
    return t_mm, t_ar, t_both, count, sorted(in_call)[len(in_call) // 2] * 1e3


def latency():
    """µs per dist.all_reduce of a CUDA tensor (float32 sum, in place, blocking as
    dist.all_reduce(t) is; median of 5 batches of 200), on ddl and, at one rank, on NCCL
    (NCCL refuses two ranks on one GPU)."""
    groups = [("ddl", None)]
    if dist.get_world_size() == 1 and DEV.type == "cuda":
        groups.append(("nccl", dist.new_group(backend="nccl")))
    rows = []
    for size in (8, 512, 4096, 65536):
        x = torch.ones(size // 4, device=DEV)
        row = [size]
        for _, group in groups:
            for _ in range(20):
                dist.all_reduce(x, group=group)

            def batch(group=group):
                for _ in range(200):
                    dist.all_reduce(x, group=group)

            row.append(median_time(batch) * 1e3 / 200)
        rows.append(row)
    names = [name for name, _ in groups]
    lines = ["   bytes " + " ".join(f"{n:>8}" for n in names)]
    lines += [f"{r[0]:>8} " + " ".join(f"{t:8.1f}" for t in r[1:]) for r in rows]
    return "\n".join(lines)


def main():
    scenario = sys.argv[1]
    if DEV.type == "cuda":
        torch.cuda.set_device(DEV)
    dist.init_process_group("ddl")
    r, n = dist.get_rank(), dist.get_world_size()
    t0 = time.perf_counter()
    if scenario == "collectives":
        done = check_collectives()
        line = f"{done} checks on {DEV} tensors equal to the float64 reference"
    elif scenario in ("ddp", "fsdp"):
        worst = check_training(scenario)
        line = f"{scenario} on {DEV} equal to the CPU run (worst relative error {worst:.1e})"
    elif scenario == "overlap":
        t_mm, t_ar, t_both, count, in_call = check_overlap()
        line = (f"64 MB all_reduce {t_ar:.2f} ms, {count} matmuls after it {t_mm:.2f} ms, "
                f"both {t_both:.2f} ms = {t_both / max(t_mm, t_ar):.2f}x the longer alone; "
                f"the host spent {in_call:.2f} ms in the all_reduce call (MPS "
                f"{'on' if os.environ.get('CUDA_MPS_PIPE_DIRECTORY') else 'off'})")
    elif scenario == "latency":
        line = f"µs per all_reduce of a {DEV.type} tensor:\n" + latency()
    else:
        raise SystemExit(f"torch_rank.py: unknown scenario {scenario!r}")
    if r == 0:
        print(f"torch {scenario}: {n} rank(s) in {time.perf_counter() - t0:.1f} s: {line}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

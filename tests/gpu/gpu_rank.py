"""One rank of ddl's checks and timings on a real GPU: `gpu_rank.py SCENARIO`, started by
tests/gpu/run_gpu_checks.sh under ddlrun (every rank on GPU 0 of the machine, as a job of
ranks sharing one GPU does).

It calls libddl's C ABI through ctypes on PyTorch's CUDA tensors (the Python package takes
CPU tensors only), so that it checks the library itself: what the C ABI does with device
memory, in the ways ddl.h promises. Scenarios:

  check     every collective that takes device memory (allreduce, broadcast, allgather,
            reduce_scatter; alltoall(v), reduce, gather(v), scatter(v), scan, exscan,
            allgatherv and reduce_scatterv), every datatype
            and op, in place and not, small and odd counts and one large one, blocking and
            nonblocking, against a float64 reference on the host; stream-ordered calls between a kernel that writes the input late (a sleep
            first) and one that reads the output; host and device buffers mixed refused (and
            the communicator works on); a device buffer in a call that takes none refused.
  kill_job N  starts N ranks of `kill` as a launcher would (not ddlrun, which stops every
            rank once one dies) and checks that every survivor exits 0.
  kill      the last rank is killed (SIGKILL) during a run of large device allreduces;
            every survivor's call fails naming it, well inside the deadline.
  latency   microseconds per allreduce of 8 B .. 64 KB: stream-ordered on device buffers,
            blocking on device buffers, blocking on host buffers (medians of 5 batches).

Exit status 0 when every check passed; a failed check raises with what it was doing.
"""

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import torch

SUCCESS, INVALID_ARGUMENT = 0, 1
DTYPES = {  # ddl_datatype_t -> torch dtype
    0: torch.int8, 1: torch.uint8, 2: torch.int32, 3: torch.uint32, 4: torch.int64,
    5: torch.uint64, 6: torch.float16, 7: torch.bfloat16, 8: torch.float32, 9: torch.float64,
}
OPS = {0: "sum", 1: "prod", 2: "min", 3: "max", 4: "avg"}
FLOAT32, SUM = 8, 0


def load_library():
    path = os.environ.get("DDL_LIBRARY") or os.path.join(
        os.environ.get("DDL_BUILD_DIR", "build"), "libddl.so.0")
    lib = ctypes.CDLL(path)
    lib.ddl_comm_last_error.restype = ctypes.c_char_p
    lib.ddl_result_string.restype = ctypes.c_char_p
    return lib


LIB = load_library()
P, S = ctypes.c_void_p, ctypes.c_size_t


class Comm:
    def __init__(self):
        self.handle = P()
        self.call("ddl_comm_init_from_env", ctypes.byref(self.handle), comm=False)
        rank, size = ctypes.c_int(), ctypes.c_int()
        self.call("ddl_comm_rank", self.handle, ctypes.byref(rank), comm=False)
        self.call("ddl_comm_size", self.handle, ctypes.byref(size), comm=False)
        self.rank, self.size = rank.value, size.value

    def error(self):
        return LIB.ddl_comm_last_error(self.handle).decode()

    def call(self, name, *args, comm=True, expect=SUCCESS):
        rc = getattr(LIB, name)(*args) if not comm else getattr(LIB, name)(*args, self.handle)
        if rc != expect:
            words = self.error() if self.handle else LIB.ddl_result_string(rc).decode()
            raise RuntimeError(f"{name}: result {rc}, expected {expect}: {words}")
        return rc

    def stream_call(self, name, *args, stream):
        rc = getattr(LIB, name)(*args, self.handle, P(stream))
        if rc != SUCCESS:
            raise RuntimeError(f"{name}: result {rc}: {self.error()}")


def ptr(t):
    return P(t.data_ptr())


def values(rank, count, dtype):
    """Rank `rank`'s input: 1, 2 or 3 per element, so that every sum, product (<= 3^4),
    min, max and average is exact in every datatype."""
    i = np.arange(count, dtype=np.int64)
    return ((i * 7 + rank * 3) % 3 + 1).astype(np.float64)


def to_device(v, dtype):
    if dtype in (torch.uint32, torch.uint64):  # torch casts to these only from numpy
        np_type = np.uint32 if dtype == torch.uint32 else np.uint64
        return torch.from_numpy(v.astype(np_type)).cuda()
    return torch.tensor(v, dtype=torch.float64).to(dtype).cuda()


def zeros(count, dtype):
    return to_device(np.zeros(count), dtype)


def to_host(t):
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().astype(np.float64)


def reference(op, inputs, dtype):
    stack = np.stack(inputs)
    if op == 0:
        return stack.sum(0)
    if op == 1:
        return stack.prod(0)
    if op == 2:
        return stack.min(0)
    if op == 3:
        return stack.max(0)
    total = stack.sum(0)
    if dtype.is_floating_point:
        return total / len(inputs)
    return np.floor_divide(total, len(inputs))


def expect_equal(got, want, dtype, what):
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}.get(dtype, 0)
    if not np.allclose(got, want, rtol=tol, atol=0):
        bad = int(np.argmax(~np.isclose(got, want, rtol=tol, atol=0)))
        raise AssertionError(f"{what}: element {bad} is {got[bad]}, expected {want[bad]}")


def check_collectives(comm, counts):
    n, r = comm.size, comm.rank
    root = n - 1
    checked = 0
    for code, dtype in DTYPES.items():
        for count in counts:
            big = count > 100000
            for op in ([SUM, 4] if big else OPS):
                if big and dtype not in (torch.float32, torch.bfloat16):
                    continue
                inputs = [values(j, count * n, dtype) for j in range(n)]
                want = reference(op, inputs, dtype)
                what = f"{DTYPES[code]} {OPS[op]} count {count}"
                for in_place in (False, True):
                    mode = "in place" if in_place else "out of place"
                    # allreduce of count * n elements
                    send = to_device(inputs[r], dtype)
                    recv = send if in_place else zeros(count * n, dtype)
                    comm.call("ddl_allreduce", ptr(send), ptr(recv), S(count * n), code, op)
                    expect_equal(to_host(recv), want, dtype, f"allreduce {what} {mode}")
                    # reduce_scatter: block r of the reduction
                    send = to_device(inputs[r], dtype)
                    recv = send[r * count:(r + 1) * count] if in_place else zeros(count, dtype)
                    comm.call("ddl_reduce_scatter", ptr(send), ptr(recv), S(count), code, op)
                    expect_equal(to_host(recv), want[r * count:(r + 1) * count], dtype,
                                 f"reduce_scatter {what} {mode}")
                    checked += 2
                if op != SUM:
                    continue
                for in_place in (False, True):
                    mode = "in place" if in_place else "out of place"
                    mine = values(r, count, dtype)
                    if in_place:
                        start = np.zeros(count * n)
                        start[r * count:(r + 1) * count] = mine
                        recv = to_device(start, dtype)
                        send = recv[r * count:(r + 1) * count]
                    else:
                        recv = zeros(count * n, dtype)
                        send = to_device(mine, dtype)
                    comm.call("ddl_allgather", ptr(send), ptr(recv), S(count), code)
                    expect_equal(to_host(recv), np.concatenate(
                        [values(j, count, dtype) for j in range(n)]), dtype,
                        f"allgather {what} {mode}")
                    checked += 1
                buf = to_device(values(r, count, dtype), dtype)
                comm.call("ddl_broadcast", ptr(buf), S(count), code, root)
                expect_equal(to_host(buf), values(root, count, dtype), dtype,
                             f"broadcast {what} root {root}")
                checked += 1
    return checked + check_rooted(comm, counts)


def check_rooted(comm, counts):
    """alltoall, reduce, gather, scatter, scan and exscan on device memory (float32 and
    int64, sum), in place where each can be, against the float64 reference."""
    n, r = comm.size, comm.rank
    root = n - 1
    checked = 0
    for code, dtype in ((8, torch.float32), (4, torch.int64)):
        for count in counts:
            what = f"{DTYPES[code]} count {count}"
            blocks = [values(j, count * n, dtype) for j in range(n)]  # rank j's sendbuf
            # alltoall: block q of rank j's sendbuf goes to block j of rank q's recvbuf
            send = to_device(blocks[r], dtype)
            recv = zeros(count * n, dtype)
            comm.call("ddl_alltoall", ptr(send), ptr(recv), S(count), code)
            want = np.concatenate([blocks[j][r * count:(r + 1) * count] for j in range(n)])
            expect_equal(to_host(recv), want, dtype, f"alltoall {what}")
            comm.call("ddl_alltoall", ptr(send), ptr(send), S(count), code)
            expect_equal(to_host(send), want, dtype, f"alltoall {what} in place")
            # reduce to the root, in place there
            mine = to_device(values(r, count, dtype), dtype)
            comm.call("ddl_reduce", ptr(mine), ptr(mine), S(count), code, SUM, root)
            if r == root:
                expect_equal(to_host(mine), reference(SUM, [values(j, count, dtype)
                                                            for j in range(n)], dtype),
                             dtype, f"reduce {what} in place")
            # gather to the root, then scatter back from it
            mine = to_device(values(r, count, dtype), dtype)
            everyone = zeros(count * n, dtype)
            comm.call("ddl_gather", ptr(mine), ptr(everyone), S(count), code, root)
            if r == root:
                expect_equal(to_host(everyone), np.concatenate(
                    [values(j, count, dtype) for j in range(n)]), dtype, f"gather {what}")
            back = zeros(count, dtype)
            comm.call("ddl_scatter", ptr(everyone), ptr(back), S(count), code, root)
            expect_equal(to_host(back), values(r, count, dtype), dtype, f"scatter {what}")
            # scan and exscan: ranks 0..r and 0..r-1 (rank 0's exscan output left alone)
            mine = to_device(values(r, count, dtype), dtype)
            out = zeros(count, dtype)
            comm.call("ddl_scan", ptr(mine), ptr(out), S(count), code, SUM)
            expect_equal(to_host(out), reference(SUM, [values(j, count, dtype)
                                                       for j in range(r + 1)], dtype),
                         dtype, f"scan {what}")
            out = zeros(count, dtype)
            comm.call("ddl_exscan", ptr(mine), ptr(out), S(count), code, SUM)
            want = (np.zeros(count) if r == 0 else
                    reference(SUM, [values(j, count, dtype) for j in range(r)], dtype))
            expect_equal(to_host(out), want, dtype, f"exscan {what}")
            # alltoallv: rank j sends (j + q) % 3 + 1 elements of block q, packed
            def pair(j, q):
                return (j + q) % 3 + 1

            def packed(counts):
                return (S * n)(*counts), (S * n)(*np.concatenate([[0], np.cumsum(counts)[:-1]]))

            sc, sd = packed([pair(r, q) for q in range(n)])
            rc, rd = packed([pair(q, r) for q in range(n)])
            rows = [[values(j, 3 * n, dtype)[3 * q:3 * q + pair(j, q)] for q in range(n)]
                    for j in range(n)]
            send = to_device(np.concatenate(rows[r]), dtype)
            recv = zeros(sum(pair(q, r) for q in range(n)), dtype)
            comm.call("ddl_alltoallv", ptr(send), sc, sd, ptr(recv), rc, rd, code)
            expect_equal(to_host(recv), np.concatenate([rows[j][r] for j in range(n)]), dtype,
                         f"alltoallv {what}")
            checked += 8
    return checked


def check_nonblocking(comm):
    n, r = comm.size, comm.rank
    count = 1 << 20
    sends = [to_device(values(r + k, count, torch.float32), torch.float32) for k in range(3)]
    recvs = [torch.zeros_like(s) for s in sends]
    requests = []
    for s, d in zip(sends, recvs):
        req = P()
        rc = LIB.ddl_iallreduce(ptr(s), ptr(d), S(count), FLOAT32, SUM, comm.handle,
                                ctypes.byref(req))
        if rc != SUCCESS:
            raise RuntimeError(f"ddl_iallreduce: {comm.error()}")
        requests.append(req)
    for k, req in enumerate(requests):
        comm.call("ddl_wait", req, comm=False)
        LIB.ddl_request_free(req)
        want = reference(SUM, [values(j + k, count, torch.float32) for j in range(n)],
                         torch.float32)
        expect_equal(to_host(recvs[k]), want, torch.float32, f"iallreduce {k}")


def check_stream_order(comm):
    """A kernel writes the input late on a side stream; the stream-ordered allreduce must
    wait for it, and a kernel queued after it must see the result."""
    n, r = comm.size, comm.rank
    count = (1 << 22) + 3
    stream = torch.cuda.Stream()
    x = torch.zeros(count, dtype=torch.float32, device="cuda")
    y = torch.zeros_like(x)
    torch.cuda.synchronize()
    for rounds in range(3):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(50_000_000)  # ~25 ms at 2 GHz: the host is far ahead
            x.fill_(float(r + 1 + rounds))
        comm.stream_call("ddl_allreduce_stream", ptr(x), ptr(y), S(count), FLOAT32, SUM,
                         stream=stream.cuda_stream)
        with torch.cuda.stream(stream):
            z = y * 2
        stream.synchronize()
        want = 2.0 * sum(j + 1 + rounds for j in range(n))
        got = to_host(z)
        if not np.all(got == want):
            raise AssertionError(f"stream order, round {rounds}: {got[:4]}..., want {want}")
    # broadcast, allgather and reduce_scatter on the stream, in place where they can be. Their
    # buffers are made on the stream too: a stream-ordered call waits for its own stream's
    # work only, as NCCL's do (torch's side streams do not wait for the default stream).
    with torch.cuda.stream(stream):
        torch.cuda._sleep(20_000_000)
        b = torch.full((1001,), float(r), device="cuda")
        g = torch.zeros(7 * n, device="cuda")
        g[7 * r:7 * r + 7] = float(r)
        rs_in = torch.ones(5 * n, device="cuda")
        rs_out = torch.zeros(5, device="cuda")
    comm.stream_call("ddl_broadcast_stream", ptr(b), S(1001), FLOAT32, 0, stream=stream.cuda_stream)
    comm.stream_call("ddl_allgather_stream", ptr(g[7 * r:]), ptr(g), S(7), FLOAT32,
                     stream=stream.cuda_stream)
    comm.stream_call("ddl_reduce_scatter_stream", ptr(rs_in), ptr(rs_out), S(5), FLOAT32, SUM,
                     stream=stream.cuda_stream)
    stream.synchronize()
    assert np.all(to_host(b) == 0), f"broadcast_stream: {to_host(b)[:4]}"
    assert np.array_equal(to_host(g), np.repeat(np.arange(n, dtype=np.float64), 7)), to_host(g)
    assert np.all(to_host(rs_out) == n), to_host(rs_out)
    check_rooted_stream_calls(comm, stream)


def check_rooted_stream_calls(comm, stream, device="cuda"):
    """alltoall(v), reduce, gather and scatter on the stream (host-synchronous in every mode),
    their inputs written on it after a sleep. device="cpu" with stream None: the same calls on
    host memory on the default stream (to check this function's own logic without a GPU)."""
    n, r = comm.size, comm.rank
    on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with on_stream:
        if stream is not None:
            torch.cuda._sleep(20_000_000)
        a_in = torch.arange(3 * n, dtype=torch.float32, device=device) + 100 * r
        a_out = torch.zeros(3 * n, device=device)
        v_in = torch.full((n * (n + 1) // 2,), float(r), device=device)  # j + 1 to rank j
        v_out = torch.zeros((r + 1) * n, device=device)
        red = torch.full((9,), float(r + 1), device=device)
        gat = torch.zeros(4 * n, device=device)
        mine = torch.full((4,), float(r), device=device)
        sca_in = torch.arange(2 * n, dtype=torch.float32, device=device)
        sca_out = torch.zeros(2, device=device)
    on = stream.cuda_stream if stream is not None else 0
    comm.stream_call("ddl_alltoall_stream", ptr(a_in), ptr(a_out), S(3), FLOAT32, stream=on)
    sizes = (ctypes.c_size_t * n)(*[j + 1 for j in range(n)])
    sdispls = (ctypes.c_size_t * n)(*[j * (j + 1) // 2 for j in range(n)])
    rsizes = (ctypes.c_size_t * n)(*[r + 1] * n)
    rdispls = (ctypes.c_size_t * n)(*[j * (r + 1) for j in range(n)])
    comm.stream_call("ddl_alltoallv_stream", ptr(v_in), sizes, sdispls, ptr(v_out), rsizes,
                     rdispls, FLOAT32, stream=on)
    comm.stream_call("ddl_reduce_stream", ptr(red), ptr(red), S(9), FLOAT32, SUM, 0, stream=on)
    comm.stream_call("ddl_gather_stream", ptr(mine), ptr(gat), S(4), FLOAT32, 0, stream=on)
    comm.stream_call("ddl_scatter_stream", ptr(sca_in), ptr(sca_out), S(2), FLOAT32, 0, stream=on)
    if stream is not None:
        stream.synchronize()
    want = np.concatenate([np.arange(3 * r, 3 * r + 3) + 100 * j for j in range(n)])
    assert np.array_equal(to_host(a_out), want), f"alltoall_stream: {to_host(a_out)}"
    assert np.array_equal(to_host(v_out), np.repeat(np.arange(n, dtype=np.float64), r + 1)), \
        f"alltoallv_stream: {to_host(v_out)}"
    if r == 0:
        assert np.all(to_host(red) == n * (n + 1) / 2), f"reduce_stream: {to_host(red)}"
        assert np.array_equal(to_host(gat), np.repeat(np.arange(n, dtype=np.float64), 4)), \
            f"gather_stream: {to_host(gat)}"
    assert np.array_equal(to_host(sca_out), [2 * r, 2 * r + 1]), \
        f"scatter_stream: {to_host(sca_out)}"


def check_send_recv(comm, device="cuda"):
    """Device memory in sends and receives (through host memory in libddl): a ring of
    isend/irecv between device buffers, then rank 0's device buffer to rank 1's host memory.
    device="cpu": the same on host memory (to check this function's own logic)."""
    n, r = comm.size, comm.rank
    if n < 2:
        return  # ddl has no send to oneself
    nxt, prv = (r + 1) % n, (r - 1) % n
    out = torch.arange(1 << 20, dtype=torch.float32, device=device) + r
    got = torch.zeros_like(out)
    if device == "cuda":
        torch.cuda.synchronize()
    recv, send = P(), P()
    for name, buf, peer, req in (("ddl_irecv", got, prv, recv), ("ddl_isend", out, nxt, send)):
        rc = getattr(LIB, name)(ptr(buf), S(buf.numel()), FLOAT32, peer, comm.handle,
                                ctypes.byref(req))
        if rc != SUCCESS:
            raise RuntimeError(f"{name}: {comm.error()}")
    for req in (send, recv):
        comm.call("ddl_wait", req, comm=False)
        LIB.ddl_request_free(req)
    want = np.arange(1 << 20, dtype=np.float64) + prv
    assert np.array_equal(to_host(got), want), f"ring from rank {prv}: {to_host(got)[:4]}"
    if r < 2:
        host = np.zeros(1000, dtype=np.float32)
        if r == 0:
            comm.call("ddl_send", ptr(out), S(1000), FLOAT32, 1)
        else:
            comm.call("ddl_recv", P(host.ctypes.data), S(1000), FLOAT32, 0)
            assert np.array_equal(host, np.arange(1000)), f"device to host: {host[:4]}"


def check_refusals(comm):
    host = np.zeros(64, dtype=np.float32)
    dev = torch.zeros(64, device="cuda")
    comm.call("ddl_allreduce", P(host.ctypes.data), ptr(dev), S(64), FLOAT32, SUM,
              expect=INVALID_ARGUMENT)
    words = comm.error()
    # The communicator goes on.
    x = torch.ones(64, device="cuda")
    comm.call("ddl_allreduce", ptr(x), ptr(x), S(64), FLOAT32, SUM)
    assert np.all(to_host(x) == comm.size)
    return words


def scenario_check():
    torch.cuda.set_device(0)
    comm = Comm()
    t0 = time.monotonic()
    checked = check_collectives(comm, [1, 31, 4099, 1000003])
    check_nonblocking(comm)
    check_stream_order(comm)
    check_send_recv(comm)
    words = check_refusals(comm)
    if comm.rank == 0:
        print(f"gpu check: {comm.size} ranks, {checked} device collectives equal to the float64 "
              f"reference, nonblocking, stream order, send/recv, refusals ('{words[:160]}') "
              f"in {time.monotonic() - t0:.1f} s", flush=True)
    LIB.ddl_comm_destroy(comm.handle)


def scenario_kill():
    torch.cuda.set_device(0)
    comm = Comm()
    n, r = comm.size, comm.rank
    x = torch.ones(1 << 24, device="cuda")
    for i in range(1000):
        if r == n - 1 and i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        rc = LIB.ddl_allreduce(ptr(x), ptr(x), S(x.numel()), FLOAT32, SUM, comm.handle)
        if rc != SUCCESS:
            words = comm.error()
            print(f"rank {r}: call {i} failed after {time.monotonic() - t0:.2f} s: {words}",
                  flush=True)
            if f"rank {n - 1}" not in words:
                raise AssertionError(f"rank {r}: the error does not name rank {n - 1}")
            os._exit(0)
    raise AssertionError(f"rank {r}: every call succeeded with rank {n - 1} gone")


def scenario_kill_job(n):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(8)
    procs = []
    for r in range(n):
        env = dict(os.environ, DDL_RANK=str(r), DDL_WORLD_SIZE=str(n),
                   DDL_ROOT=f"127.0.0.1:{port}", DDL_JOB_TOKEN=token)
        procs.append(subprocess.Popen([sys.executable, __file__, "kill"], env=env))
    try:
        codes = [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    print(f"kill_job: exit codes {codes} (the last rank killed)", flush=True)
    if codes[:-1] != [0] * (n - 1) or codes[-1] != -signal.SIGKILL:
        sys.exit(1)


def per_call_us(fn, calls, sync):
    times = []
    for _ in range(6):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return float(np.median(times[1:]))


def scenario_latency():
    torch.cuda.set_device(0)
    comm = Comm()
    stream = torch.cuda.current_stream()
    rows = []
    for size in [8, 64, 512, 4096, 65536]:
        count = size // 4
        d = torch.ones(count, device="cuda")
        h = np.ones(count, dtype=np.float32)
        barrier = lambda: comm.call("ddl_barrier")  # noqa: E731
        stream_us = per_call_us(
            lambda: comm.stream_call("ddl_allreduce_stream", ptr(d), ptr(d), S(count), FLOAT32,
                                     SUM, stream=stream.cuda_stream), 200,
            lambda: (stream.synchronize(), barrier()))
        device_us = per_call_us(
            lambda: comm.call("ddl_allreduce", ptr(d), ptr(d), S(count), FLOAT32, SUM), 200,
            barrier)
        host_us = per_call_us(
            lambda: comm.call("ddl_allreduce", P(h.ctypes.data), P(h.ctypes.data), S(count),
                              FLOAT32, SUM), 200, barrier)
        rows.append((size, stream_us, device_us, host_us))
    if comm.rank == 0:
        print(f"# ddl allreduce latency, {comm.size} ranks on one GPU, µs per call "
              "(median of 5 batches of 200)")
        print(f"{'bytes':>8} {'stream, device':>15} {'blocking, device':>17} {'blocking, host':>15}")
        for size, a, b, c in rows:
            print(f"{size:>8} {a:>15.1f} {b:>17.1f} {c:>15.1f}")
    LIB.ddl_comm_destroy(comm.handle)


if __name__ == "__main__":
    if sys.argv[1] == "kill_job":
        scenario_kill_job(int(sys.argv[2]))
    else:
        {"check": scenario_check, "kill": scenario_kill, "latency": scenario_latency}[sys.argv[1]]()

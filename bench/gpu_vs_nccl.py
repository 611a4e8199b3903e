"""ddl against NCCL on one GPU, in one process each, alternating (issue 25, item 4).

NCCL refuses two ranks on one GPU, so on a one-GPU machine the only NCCL job is one rank:
what compares is the cost of a stream-ordered call (8 B .. 64 KB, where a one-rank allreduce
does no arithmetic in either library) and the device-to-device copy bandwidth that bounds
every allreduce of ranks sharing the GPU. ddl's two- and four-rank figures come from
ddl_perf -G and tests/gpu/gpu_rank.py latency (tests/gpu/run_gpu_checks.sh runs all three).

    python3 bench/gpu_vs_nccl.py            (on a machine with a GPU, PyTorch and a built ddl)

Each figure: the median of 5 batches of 200 calls on the current stream, timed on the host
around a stream synchronize.
"""

import ctypes
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))


def per_call_us(fn, calls=200):
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return float(np.median(times[1:]))


def copy_bandwidth(nbytes):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = per_call_us(lambda: b.copy_(a), calls=20)
    return 2 * nbytes / us / 1e3  # GB/s, bytes read plus bytes written


def ddl_comm(lib):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()
    comm = ctypes.c_void_p()
    rc = lib.ddl_comm_init(ctypes.byref(comm), 1, 0, addr.encode(), None)
    if rc != 0:
        sys.exit(f"ddl_comm_init: result {rc}")
    return comm


def main():
    if not torch.cuda.is_available():
        print("gpu_vs_nccl: skipped: no GPU")
        return 77
    torch.cuda.set_device(0)
    lib = ctypes.CDLL(os.environ.get("DDL_LIBRARY") or os.path.join(
        os.environ.get("DDL_BUILD_DIR", os.path.join(HERE, "..", "build")), "libddl.so.0"))
    comm = ddl_comm(lib)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    stream = torch.cuda.current_stream()
    name = torch.cuda.get_device_name(0)
    print(f"# {name}; torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}")
    print("# one rank each; µs per stream-ordered allreduce (float32 sum, in place)")
    print(f"{'bytes':>8} {'ddl':>8} {'NCCL':>8} {'ddl/NCCL':>9}")
    for size in [8, 64, 512, 4096, 65536]:
        x = torch.ones(size // 4, device="cuda")
        ddl_us = per_call_us(lambda: lib.ddl_allreduce_stream(
            ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(x.data_ptr()),
            ctypes.c_size_t(x.numel()), 8, 0, comm, ctypes.c_void_p(stream.cuda_stream)))
        nccl_us = per_call_us(lambda: dist.all_reduce(x))
        print(f"{size:>8} {ddl_us:>8.1f} {nccl_us:>8.1f} {ddl_us / nccl_us:>8.2f}x")
    for mb in (64, 1024):
        print(f"# device-to-device copy, {mb} MB: {copy_bandwidth(mb << 20):.0f} GB/s "
              "(read + write)")
    dist.destroy_process_group()
    lib.ddl_comm_destroy(comm)
    return 0


if __name__ == "__main__":
    sys.exit(main())

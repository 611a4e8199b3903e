#!/usr/bin/env python3
"""torch.distributed's "ddl" backend against its "gloo" backend, side by side in one job.

    python bench/torch_vs_gloo.py                 # 2 processes (torchrun), full run
    python bench/torch_vs_gloo.py -n 4 --launcher ddlrun --rounds 7 -J out.json
    python bench/torch_vs_gloo.py --quick         # a short check that everything runs

Every process makes the default group with "ddl" and a second group over the same processes
with "gloo"; each round measures every case on both, in alternating order (ddl first on even
rounds, gloo first on odd ones), and the table shows medians over rounds and gloo/ddl ratios
(>1: ddl is faster). Per call: the slowest rank's mean over a block of calls, float32, in
place, ranks started together by a barrier.

For all_reduce at small sizes it also shows where the time goes:
  ddl pkg   the same tensor through the ddl Python package (comm.allreduce), no torch;
  ctypes    ddl_allreduce called through ctypes with ready arguments (the least Python can do);
  direct    the ddl backend's allreduce called from Python without torch's dispatch
            (backend.allreduce([t], opts)): pybind11's call, the backend's C++, ddl;
  py noop   dist.all_reduce on a Python subclass of torch's Backend that does nothing and
            returns no Work: the least a backend written in Python can cost per call;
  floor     dist.all_reduce on torch's "fake" ProcessGroup, which does nothing (it is a
            ProcessGroup, so this skips the dispatcher that every Backend goes through).
The backend's own cost is about direct - ctypes; dist.all_reduce - direct is torch's.

Also all_to_all_single (size: what each rank sends in all), a send/recv ping-pong between
ranks 0 and 1 (its time: half a round trip), reduce and gather to rank 0.

Then the DDP example's training step (examples/ddp_train.py's model and data), DDP over ddl
(its buckets in plain memory, and in ddl's: DDP_DISABLE_COMM_MEM=0) vs over gloo, and the
same step without DDP (compute only) for the communication share.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
sys.path.insert(0, os.path.join(REPO, "examples"))

SIZES = {  # bytes per rank's tensor
    "all_reduce": [8, 4096, 65536, 1 << 20, 25 << 20],
    "broadcast": [8, 65536, 1 << 20, 16 << 20],
    "all_gather_into_tensor": [8, 65536, 1 << 20, 4 << 20],  # each rank's share
    "reduce_scatter_tensor": [8, 65536, 1 << 20, 4 << 20],   # each rank's result
    "all_to_all_single": [16, 65536, 1 << 20, 4 << 20],     # what each rank sends in all
    "send/recv": [8, 65536, 1 << 20, 4 << 20],  # ping-pong between ranks 0 and 1: half round trip
    "send/recv tag 3": [8, 65536],      # the same with a tag
    "send/recv any source": [8, 65536],  # the same, each receive from any source
    "reduce": [8, 65536, 1 << 20, 4 << 20],
    "gather": [8, 65536, 1 << 20, 4 << 20],     # each rank's share
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nprocs", type=int, default=2)
    p.add_argument("--launcher", choices=["torchrun", "ddlrun"], default="torchrun")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-s", type=float, default=0.05,
                   help="rough seconds per block of calls (per case, backend and round)")
    p.add_argument("--quick", action="store_true", help="2 rounds, short blocks, fewer sizes")
    p.add_argument("--ddp-steps", type=int, default=10, help="DDP steps per block")
    p.add_argument("--only", action="append", choices=list(SIZES) + ["ddp"],
                   help="run only these cases (repeatable)")
    p.add_argument("--max-bytes", type=int, help="skip sizes above this")
    p.add_argument("-J", "--json", help="write every sample here (rank 0)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def launch(args):
    """Starts this script as a job of args.nprocs processes."""
    me = [os.path.abspath(__file__), "--worker"] + [a for a in sys.argv[1:]]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # 2 cores: intra-op threads only add noise
    if args.launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
               str(args.nprocs), "--master-port", str(_free_port())] + me
    else:
        build = env.get("DDL_BUILD_DIR") or os.path.join(REPO, "build")
        cmd = [os.path.join(build, "tools", "ddlrun", "ddlrun"), "-n", str(args.nprocs),
               "--", sys.executable] + me
    return subprocess.call(cmd, env=env)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the processes' side ---------------------------------------------------------------------

def _register_pynoop():
    """A backend written in Python that does nothing (for the "py noop" row)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import Backend

    class PyNoop(Backend):
        def allreduce(self, tensors, opts):
            return None  # as if it had synchronised: torch then skips work.wait()

        def getBackendName(self):
            return "pynoop"

    dist.Backend.register_backend("pynoop", lambda store, rank, size, timeout:
                                  PyNoop(rank, size), devices=["cpu"])


class Bench:
    def __init__(self, args):
        import torch
        import torch.distributed as dist

        import ddl
        import ddl.torch

        self.torch, self.dist, self.args = torch, dist, args
        _register_pynoop()
        dist.init_process_group("ddl")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.gloo = dist.new_group(backend="gloo")
        # A raw ddl communicator over the same processes, for the package and ctypes rows.
        store = dist.distributed_c10d._get_default_store()
        self.comm = ddl.torch.communicator_from_store(store, self.rank, self.size,
                                                      key="bench/raw")
        self.lib = ddl._library.lib()
        try:
            # Importing it registers the "fake" backend (torch's own testing helper).
            import torch.testing._internal.distributed.fake_pg  # noqa: F401
            self.fake = dist.new_group(backend="fake")
        except Exception as e:  # the floor row is optional
            if self.rank == 0:
                print(f"(no 'fake' backend for the floor row: {e})")
            self.fake = None
        self.pynoop = dist.new_group(backend="pynoop")
        self.backend = dist.distributed_c10d._get_default_group()._get_backend(
            torch.device("cpu"))
        self.samples = {}  # (case, size, who) -> [per-call seconds per round]

    def sync_max(self, seconds):
        """The slowest rank's time (over gloo: the ddl path stays out of its own numbers)."""
        t = self.torch.tensor([seconds], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.gloo)
        return t.item()

    def block(self, fn, iters):
        self.dist.barrier(group=self.gloo)
        fn()  # warm: first call of a shape plans its schedule
        self.dist.barrier(group=self.gloo)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return self.sync_max((time.perf_counter() - t0) / iters)

    def iters_for(self, nbytes):
        # About block_s seconds at a few GB/s for big sizes; at small sizes enough calls to
        # rise well above the timer and loop (gloo at ~100 us per call sets the pace).
        scale = self.args.block_s / 0.05
        return max(3, int(min(1000, 4e7 / max(nbytes, 4e4)) * scale))

    def cases(self):
        torch, dist = self.torch, self.dist
        n_of = lambda b: max(1, b // 4)
        sizes = SIZES
        if self.args.quick:
            sizes = {k: [v[0], v[2]] for k, v in SIZES.items()}
        if self.args.only:
            sizes = {k: v for k, v in sizes.items() if k in self.args.only}
        if self.args.max_bytes:
            sizes = {k: [b for b in v if b <= self.args.max_bytes] for k, v in sizes.items()}
        sizes = {k: sizes.get(k, []) for k in SIZES}
        for nbytes in sizes["all_reduce"]:
            t = torch.ones(n_of(nbytes))
            rows = {"ddl": lambda t=t: dist.all_reduce(t),
                    "gloo": lambda t=t: dist.all_reduce(t, group=self.gloo)}
            if nbytes <= 65536:
                rows["ddl pkg"] = lambda t=t: self.comm.allreduce(t)
                args = (ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                        t.numel(), 8, 0, self.comm._handle)
                fn = self.lib.ddl_allreduce
                rows["ctypes"] = lambda fn=fn, args=args: fn(*args)
                opts = dist.AllreduceOptions()
                opts.asyncOp = False
                rows["direct"] = lambda t=t, o=opts: self.backend.allreduce([t], o)
                rows["py noop"] = lambda t=t: dist.all_reduce(t, group=self.pynoop)
                if self.fake is not None:
                    rows["floor"] = lambda t=t: dist.all_reduce(t, group=self.fake)
            yield "all_reduce", nbytes, rows
        for nbytes in sizes["broadcast"]:
            t = torch.ones(n_of(nbytes))
            yield "broadcast", nbytes, {
                "ddl": lambda t=t: dist.broadcast(t, src=0),
                "gloo": lambda t=t: dist.broadcast(t, src=0, group=self.gloo)}
        for nbytes in sizes["all_gather_into_tensor"]:
            x, out = torch.ones(n_of(nbytes)), torch.empty(n_of(nbytes) * self.size)
            yield "all_gather_into_tensor", nbytes, {
                "ddl": lambda x=x, o=out: dist.all_gather_into_tensor(o, x),
                "gloo": lambda x=x, o=out: dist.all_gather_into_tensor(o, x, group=self.gloo)}
        for nbytes in sizes["reduce_scatter_tensor"]:
            x, out = torch.ones(n_of(nbytes) * self.size), torch.empty(n_of(nbytes))
            # gloo has no reduce_scatter_tensor on CPU in some versions: then the row is "-".
            yield "reduce_scatter_tensor", nbytes, {
                "ddl": lambda x=x, o=out: dist.reduce_scatter_tensor(o, x),
                "gloo": lambda x=x, o=out: dist.reduce_scatter_tensor(o, x, group=self.gloo)}
        yield from self.p2p_cases(sizes)

    def pingpong(self, t, group, tag=0, any_source=False):
        """Rank 0 sends t to rank 1 and gets it back; the others wait. A half round trip is
        half the time of one call."""
        dist = self.dist
        if self.rank == 0:
            dist.send(t, 1, group=group, tag=tag)
            dist.recv(t, None if any_source else 1, group=group, tag=tag)
        elif self.rank == 1:
            dist.recv(t, None if any_source else 0, group=group, tag=tag)
            dist.send(t, 0, group=group, tag=tag)

    def p2p_cases(self, sizes):
        torch, dist = self.torch, self.dist
        n_of = lambda b: max(1, b // 4)
        for nbytes in sizes["all_to_all_single"]:
            x = torch.ones(max(self.size, n_of(nbytes) // self.size * self.size))
            out = torch.empty_like(x)
            yield "all_to_all_single", nbytes, {
                "ddl": lambda x=x, o=out: dist.all_to_all_single(o, x),
                "gloo": lambda x=x, o=out: dist.all_to_all_single(o, x, group=self.gloo)}
        for nbytes in sizes["send/recv"]:
            t = torch.ones(n_of(nbytes))
            yield "send/recv", nbytes, {
                "ddl": lambda t=t: self.pingpong(t, None),
                "gloo": lambda t=t: self.pingpong(t, self.gloo)}
        for name, how in (("send/recv tag 3", {"tag": 3}),
                          ("send/recv any source", {"any_source": True})):
            for nbytes in sizes[name]:
                t = torch.ones(n_of(nbytes))
                yield name, nbytes, {
                    "ddl": lambda t=t, how=how: self.pingpong(t, None, **how),
                    "gloo": lambda t=t, how=how: self.pingpong(t, self.gloo, **how)}
        for nbytes in sizes["reduce"]:
            t = torch.ones(n_of(nbytes))
            yield "reduce", nbytes, {
                "ddl": lambda t=t: dist.reduce(t, 0),
                "gloo": lambda t=t: dist.reduce(t, 0, group=self.gloo)}
        for nbytes in sizes["gather"]:
            x = torch.ones(n_of(nbytes))
            outs = [torch.empty_like(x) for _ in range(self.size)] if self.rank == 0 else None
            yield "gather", nbytes, {
                "ddl": lambda x=x, o=outs: dist.gather(x, o, dst=0),
                "gloo": lambda x=x, o=outs: dist.gather(x, o, dst=0, group=self.gloo)}

    def run_collectives(self):
        unsupported = set()
        for rnd in range(self.rounds):
            for case, nbytes, rows in self.cases():
                order = list(rows) if rnd % 2 == 0 else list(reversed(list(rows)))
                for who in order:
                    if (case, who) in unsupported:
                        continue
                    try:
                        s = self.block(rows[who], self.iters_for(nbytes))
                    except RuntimeError as e:
                        unsupported.add((case, who))
                        if self.rank == 0:
                            print(f"({case} on {who}: {str(e).splitlines()[0][:100]})")
                        continue
                    self.samples.setdefault((case, nbytes, who), []).append(s)

    def run_ddp(self):
        import torch.nn.functional as F
        from torch.nn.parallel import DistributedDataParallel as DDP

        import ddp_train
        torch, dist = self.torch, self.dist
        ex = ddp_train.parse_args([])
        batch = ex.global_batch // self.size
        x, y = ddp_train.make_dataset(batch * 4, ex.features, ex.classes, 0)
        models = {"ddl": DDP(ddp_train.make_model(ex.features, ex.hidden, ex.classes, 1)),
                  "gloo": DDP(ddp_train.make_model(ex.features, ex.hidden, ex.classes, 1),
                              process_group=self.gloo),
                  "compute only": ddp_train.make_model(ex.features, ex.hidden, ex.classes, 1)}
        # The same DDP with its buckets in ddl's memory: torch's Reducer asks the backend for
        # them when DDP_DISABLE_COMM_MEM=0 as it is built.
        saved = os.environ.get("DDP_DISABLE_COMM_MEM")
        os.environ["DDP_DISABLE_COMM_MEM"] = "0"
        models["ddl, ddl memory"] = DDP(ddp_train.make_model(ex.features, ex.hidden, ex.classes, 1))
        if saved is None:
            del os.environ["DDP_DISABLE_COMM_MEM"]
        else:
            os.environ["DDP_DISABLE_COMM_MEM"] = saved
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}

        def step(k, i):
            xb, yb = x[(i % 4) * batch:(i % 4 + 1) * batch], y[(i % 4) * batch:(i % 4 + 1) * batch]
            loss = F.cross_entropy(models[k](xb), yb)
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            opts[k].step()

        for rnd in range(self.rounds):
            order = list(models) if rnd % 2 == 0 else list(reversed(list(models)))
            for k in order:
                for i in range(2):
                    step(k, i)  # warm
                self.dist.barrier(group=self.gloo)
                t0 = time.perf_counter()
                for i in range(self.args.ddp_steps):
                    step(k, i)
                s = self.sync_max((time.perf_counter() - t0) / self.args.ddp_steps)
                self.samples.setdefault(("ddp step", batch, k), []).append(s)

    def report(self):
        med = {k: statistics.median(v) for k, v in self.samples.items()}
        print(f"\ntorch {self.torch.__version__}, {self.size} processes, {self.rounds} rounds, "
              "medians (per call: slowest rank's mean); ratio = gloo / ddl")
        print(f"{'case':24} {'bytes':>9} {'ddl us':>10} {'gloo us':>10} {'ratio':>7} "
              f"{'ddl GB/s':>9} {'gloo GB/s':>9}   more")
        order = list(SIZES) + ["ddp step"]
        keys = sorted({(c, b) for c, b, _ in med}, key=lambda k: (order.index(k[0]), k[1]))
        for case, nbytes in keys:
            if case == "ddp step":
                continue
            d, g = med.get((case, nbytes, "ddl")), med.get((case, nbytes, "gloo"))
            if case == "send/recv":  # a round trip per call: report the half
                d, g = d and d / 2, g and g / 2
            # bus bandwidth as nccl-tests defines it for each collective (sizes as SIZES says)
            n = self.size
            factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0,
                      "send/recv": 1.0, "all_to_all_single": (n - 1) / n}.get(case, (n - 1))
            bw = lambda s: f"{factor * nbytes / s / 1e9:9.3f}" if s else f"{'-':>9}"
            us = lambda s: f"{s * 1e6:10.1f}" if s else f"{'-':>10}"
            ratio = f"{g / d:7.2f}" if d and g else f"{'-':>7}"
            more = "  ".join(f"{w} {med[(case, nbytes, w)] * 1e6:.1f}"
                             for w in ("ddl pkg", "ctypes", "direct", "py noop", "floor")
                             if (case, nbytes, w) in med)
            print(f"{case:24} {nbytes:>9} {us(d)} {us(g)} {ratio} {bw(d)} {bw(g)}   {more}")
        ddp = {k[2]: v for k, v in med.items() if k[0] == "ddp step"}
        if ddp:
            c = ddp.get("compute only")
            print(f"\nDDP step (examples/ddp_train.py model, {self.args.ddp_steps} steps/block, "
                  f"local batch {next(k[1] for k in med if k[0] == 'ddp step')}):")
            for k in ("ddl", "ddl, ddl memory", "gloo", "compute only"):
                if k in ddp:
                    share = (f", communication share {(ddp[k] - c) / ddp[k] * 100:.0f}%"
                             if c and k != "compute only" else "")
                    print(f"  {k:13} {ddp[k] * 1e3:8.2f} ms{share}")
            if "ddl" in ddp and "gloo" in ddp:
                print(f"  ratio gloo / ddl: {ddp['gloo'] / ddp['ddl']:.2f}")
            if "ddl" in ddp and "ddl, ddl memory" in ddp:
                print(f"  ratio ddl / ddl with its memory: "
                      f"{ddp['ddl'] / ddp['ddl, ddl memory']:.2f}")

    def main(self):
        self.rounds = 2 if self.args.quick else self.args.rounds
        if self.args.quick:
            self.args.block_s = min(self.args.block_s, 0.01)
            self.args.ddp_steps = min(self.args.ddp_steps, 3)
        self.run_collectives()
        if not self.args.only or "ddp" in self.args.only:
            self.run_ddp()
        if self.rank == 0:
            self.report()
            if self.args.json:
                with open(self.args.json, "w") as f:
                    json.dump({"torch": self.torch.__version__, "nprocs": self.size,
                               "rounds": self.rounds,
                               "samples": [{"case": c, "bytes": b, "who": w, "seconds": v}
                                           for (c, b, w), v in self.samples.items()]},
                              f, indent=1)
                print(f"samples written to {self.args.json}")
        self.comm.destroy()
        self.dist.destroy_process_group()


if __name__ == "__main__":
    args = parse_args()
    if args.worker:
        Bench(args).main()
    else:
        sys.exit(launch(args))

"""Fault-tolerant data parallelism across replica groups with torchft (PyPI `torchft`), its
process group over ddl (`ddl.torchft.ProcessGroupDDL`) or over gloo: a replica dies mid-run and
the others go on without a restart, in one run for both backends.

    python examples/torchft_train.py                     # ddl, then gloo; 2 replicas
    python examples/torchft_train.py --backends ddl --replicas 3 --kill-step 8

The launcher part starts torchft's lighthouse (its quorum service) and one process per
replica group (one rank each). Every step a replica joins the quorum, averages its gradients
with the replicas in it (`manager.allreduce`) and commits the step only if every participant
succeeded (`manager.should_commit`). At --kill-step the last replica dies by SIGKILL inside
the step's quorum, before its allreduce: the others' allreduce of that step fails (ddl names
the dead rank at once), they do not commit the step, and the next quorum leaves the dead one
out. Each survivor prints its step times and a
checksum of its parameters; the launcher compares them and reports, per backend, the median
step time, the slowest step (the recovery) and whether the survivors agree.
"""

import argparse
import datetime
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def replica(args):
    import torch
    import torch.nn as nn
    from torch.distributed import TCPStore
    from torchft import Manager
    from torchft.process_group import ProcessGroupGloo

    from ddl.torchft import ProcessGroupDDL

    torch.manual_seed(0)
    h = args.hidden
    model = nn.Sequential(nn.Linear(32, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    timeout = datetime.timedelta(seconds=30)
    pg = ProcessGroupDDL(timeout=timeout) if args.backend == "ddl" else \
        ProcessGroupGloo(timeout=timeout)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=pg, min_replica_size=1, load_state_dict=lambda s: (model.load_state_dict(s["m"]),
                                                              opt.load_state_dict(s["o"])),
        state_dict=lambda: {"m": model.state_dict(), "o": opt.state_dict()},
        replica_id=f"replica_{args.replica}", lighthouse_addr=args.lighthouse,
        store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1, timeout=timeout,
        quorum_timeout=timeout, connect_timeout=timeout)
    # Start together: a replica alone at the lighthouse would make a quorum of its own.
    open(os.path.join(args.rendezvous, f"ready{args.replica}"), "w").close()
    go = os.path.join(args.rendezvous, "go")
    deadline = time.monotonic() + args.timeout
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit(f"replica {args.replica}: the others did not start")
        time.sleep(0.01)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    last = args.replicas - 1
    while manager.current_step() < args.steps:
        step = manager.current_step()
        start = time.perf_counter()
        manager.start_quorum()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if args.replica == last and step == args.kill_step:
            # In the quorum, before its allreduce: the others' allreduce of this step fails.
            print(f"replica {args.replica}: killing myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        for p in model.parameters():
            manager.allreduce(p.grad).wait()
        committed = manager.should_commit()
        if committed:
            opt.step()
        print(f"replica {args.replica}: step {step} {time.perf_counter() - start:.4f} s "
              f"participants {manager.num_participants()} committed {committed}", flush=True)
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"replica {args.replica}: done, param checksum {checksum:.10e}", flush=True)
    manager.shutdown(wait=False)
    os._exit(0)  # torchft's threads need not be joined


def launch(args):
    from torchft._torchft import LighthouseServer

    results = {}
    for backend in args.backends.split(","):
        lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=10000,
                                      heartbeat_timeout_ms=1000)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        rendezvous = tempfile.mkdtemp(prefix="torchft_train.")
        logs = [tempfile.TemporaryFile("w+") for _ in range(args.replicas)]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--replica",
                                   str(r), "--backend", backend, "--lighthouse",
                                   lighthouse.address(), "--steps", str(args.steps),
                                   "--kill-step", str(args.kill_step), "--replicas",
                                   str(args.replicas), "--hidden", str(args.hidden), "--batch",
                                   str(args.batch), "--rendezvous", rendezvous],
                                  env=env, stdout=logs[r], stderr=subprocess.STDOUT, text=True)
                 for r in range(args.replicas)]
        outs = []
        try:
            deadline = time.monotonic() + args.timeout
            while not all(os.path.exists(os.path.join(rendezvous, f"ready{r}"))
                          for r in range(args.replicas)):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            open(os.path.join(rendezvous, "go"), "w").close()
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for p in procs:
                p.kill()
            lighthouse.shutdown()
            shutil.rmtree(rendezvous, ignore_errors=True)
            for f in logs:
                f.seek(0)
                outs.append(f.read())
                f.close()
        log = "".join(outs)
        if args.verbose:
            print(log)
        sums = re.findall(r"param checksum (\S+)", log)
        steps = re.findall(r"replica 0: step \d+ (\S+) s participants (\d+) committed (\w+)", log)
        times = [float(t) for t, _, _ in steps]
        failed = [float(t) for t, _, committed in steps if committed == "False"]
        # Steps whose allreduce spans every replica (before the kill): what the backend costs.
        full = [float(t) for t, n, c in steps if int(n) == args.replicas and c == "True"]
        results[backend] = (sums, times)
        agree = len(sums) == args.replicas - 1 and len(set(sums)) == 1
        print(f"{backend}: {len(sums)} survivors, parameters {'agree' if agree else 'DIFFER'} "
              f"({sums[0] if sums else '-'}), median step {statistics.median(times) * 1e3:.1f} ms "
              f"(with all {args.replicas} replicas: "
              f"{statistics.median(full) * 1e3 if full else float('nan'):.1f} ms), "
              f"the failed step {f'{failed[0] * 1e3:.1f} ms' if failed else 'none'}, "
              f"the slowest (the next quorum) {max(times):.2f} s", flush=True)
        if not agree:
            print(log)
            sys.exit(1)
    if len(results) > 1 and len({r[0][0] for r in results.values()}) != 1:
        print("the backends ended with different parameters")
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="ddl,gloo")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kill-step", type=int, default=8)
    p.add_argument("--hidden", type=int, default=128, help="the model's width (its middle "
                   "layer's gradient is hidden^2 floats)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--replica", type=int, help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--lighthouse", help=argparse.SUPPRESS)
    p.add_argument("--rendezvous", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.replica is not None:
        replica(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()

"""ddl_train.py's model and data under Ray Train: `TorchTrainer` with
`TorchConfig(backend="ddl")`, as Ray documents it for gloo and NCCL; nothing ddl-specific in
the workers.

    python examples/ray_train.py                 # 2 CPU workers on a local Ray cluster
    python examples/ray_train.py --workers 4 --backend gloo

Ray's workers never import ddl: the installed ddl package registers the "ddl" backend with
torch.distributed whenever torch is imported (torch's "torch.backends" plugin entry point,
ddl/_torch_plugin.py), and Ray's own `init_process_group` then finds it. (Before, the backend
had to be registered by a worker setup hook importing ddl.torch, which imported torch before
Ray set OMP_NUM_THREADS=1: every step then ran 5-15x slower on a shared machine.)

The driver also trains the same model in one process (examples/ddp_train.py's run: the same
global batch, seeds and steps) and checks that every worker ends with its parameters.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def train_loop_per_worker(config):
    """One Ray Train worker: ddp_train's loop, its model wrapped by Ray (DDP)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import ray.train
    import ray.train.torch

    sys.path.insert(0, config["examples"])
    from ddp_train import make_dataset, make_model

    rank, world = dist.get_rank(), dist.get_world_size()
    steps, batch = config["steps"], config["global_batch"]
    local = batch // world
    x, y = make_dataset(steps * batch, config["features"], config["classes"], config["seed"])
    model = make_model(config["features"], config["hidden"], config["classes"], config["seed"] + 1)
    model = ray.train.torch.prepare_model(model)  # DistributedDataParallel over Ray's group
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        start = step * batch + rank * local
        loss = F.cross_entropy(model(x[start:start + local]), y[start:start + local])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    global_loss = loss.detach().clone()  # the global batch's loss, as ddp_train reports it
    dist.all_reduce(global_loss)
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in model.parameters()))
    # Each worker's result in a file of the driver's directory (a one-machine example; on a
    # cluster, a checkpoint or a shared file system carries it).
    with open(os.path.join(config["results"], f"rank{rank}.json"), "w") as f:
        json.dump({"checksum": checksum, "backend": dist.get_backend(),
                   "loss": float(global_loss) / world,
                   "step_ms": statistics.median(times[len(times) // 5:]) * 1e3,
                   "threads": torch.get_num_threads()}, f)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import ray
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    sys.path.insert(0, HERE)
    import ddp_train

    results = tempfile.mkdtemp(prefix="ray_train.")
    config = {"examples": HERE, "results": results, "steps": args.steps, "global_batch": 256, "features": 32,
              "hidden": 512, "classes": 10, "lr": 0.05, "seed": 0}
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=True)
    try:
        trainer = TorchTrainer(train_loop_per_worker, train_loop_config=config,
                               scaling_config=ScalingConfig(num_workers=args.workers),
                               torch_config=TorchConfig(backend=args.backend))
        trainer.fit()
    finally:
        ray.shutdown()
    ranks = []
    for r in range(args.workers):
        with open(os.path.join(results, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
        os.remove(f.name)
    os.rmdir(results)
    got = ranks[0]
    if got["backend"] != args.backend:
        sys.exit(f"Ray's workers ran over {got['backend']}, not {args.backend}")
    print(f"median step {max(r['step_ms'] for r in ranks):.2f} ms (slowest worker), torch "
          f"threads {got['threads']}", flush=True)
    ddp_train.check_against_one_process(
        f"ray train over {got['backend']}: {args.workers} workers", got["loss"],
        [r["checksum"] for r in ranks], args.steps)


if __name__ == "__main__":
    main()

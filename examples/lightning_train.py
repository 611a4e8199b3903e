"""ddp_train.py's model and data under PyTorch Lightning, its gradients averaged by ddl.

    ddlrun -n 2 -- python examples/lightning_train.py
    python -m torch.distributed.run --nproc-per-node 2 examples/lightning_train.py
    mpirun -np 2 python examples/lightning_train.py

Lightning makes the process group itself; `DDPStrategy(process_group_backend="ddl")` is all
it takes (Lightning's documented way to choose a backend). Lightning launches nothing here:
under torchrun it reads torchrun's variables; under ddlrun and mpirun it finds LOCAL_RANK,
which ddl fills in from the launcher's own (ddlrun's DDL_*, Open MPI's OMPI_COMM_WORLD_*, with
LOCAL_WORLD_SIZE), and takes the processes as launched. Each process reads its own share of every step's global
batch, as in ddp_train.py (`use_distributed_sampler=False`: Lightning's own sampler would
shuffle the data, so the one-process run would see other batches).

Rank 0 then trains the same model in one process (ddp_train.py's run: the same global batch,
seeds and steps) and checks that the final loss is the same.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_train  # noqa: E402  (its model and data; it imports ddl.torch, which registers "ddl")

import lightning as L  # noqa: E402  (after ddl: it reads the variables ddl fills in)
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402

GLOBAL_BATCH = 256


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = ddp_train.make_model(32, 512, 10, 1)
        self.last_loss = None
        self.step_times, self._started = [], 0.0

    def on_train_batch_start(self, batch, batch_idx):
        self._started = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, batch_idx):  # after the optimizer's step
        self.step_times.append(time.perf_counter() - self._started)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="ddl", help="ddl (default) or gloo")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", world))  # processes on each host
    local = GLOBAL_BATCH // world
    x, y = ddp_train.make_dataset(args.steps * GLOBAL_BATCH, 32, 10, 0)
    mine = torch.cat([torch.arange(s * GLOBAL_BATCH + rank * local, s * GLOBAL_BATCH +
                                   (rank + 1) * local) for s in range(args.steps)])
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[mine], y[mine]),
                                       batch_size=local)
    module = Classifier()
    trainer = L.Trainer(accelerator="cpu", devices=per_host, num_nodes=world // per_host,
                        strategy=DDPStrategy(process_group_backend=args.backend),
                        max_steps=args.steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False)
    trainer.fit(module, data)
    if dist.get_backend() != args.backend:
        sys.exit(f"Lightning's group runs over {dist.get_backend()}, not {args.backend}")
    assert trainer.global_rank == rank and trainer.world_size == world
    final = trainer.strategy.reduce(module.last_loss, reduce_op="mean").item()
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in module.parameters()))
    checksums = [None] * world
    dist.all_gather_object(checksums, checksum)
    if rank == 0:
        print(f"median step {statistics.median(module.step_times) * 1e3:.2f} ms", flush=True)
        ddp_train.check_against_one_process(
            f"lightning over {dist.get_backend()}: {world} processes", final, checksums, args.steps)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

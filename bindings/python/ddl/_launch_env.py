"""The launchers' variables in torch's words: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (what torch.distributed's env:// reads, and torchrun sets for
frameworks such as Lightning) from ddlrun's, Open MPI's or Slurm's.
Standard library only: torch's plugin hook (_torch_plugin.py) runs it inside `import torch`."""

import hashlib
import os


def torch_env_from_launcher(env=os.environ):
    """Makes env:// work under ddlrun, mpirun and srun: sets RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE (where the launcher says), MASTER_ADDR and MASTER_PORT from the
    launcher's variables, leaving any already set alone.

    ddlrun: DDL_RANK, DDL_WORLD_SIZE; the store goes to DDL_ROOT's host:port (ddlrun picked
    that port for rank 0; the torch backend does not use ddl's own env bootstrap, so it is
    free). mpirun: OMPI_COMM_WORLD_RANK/SIZE; MASTER_ADDR defaults to 127.0.0.1 (on several
    hosts pass -x MASTER_ADDR=host0) and MASTER_PORT to a port derived from the job id, so
    that every rank picks the same one without talking."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return
    if "DDL_RANK" in env and "DDL_WORLD_SIZE" in env:
        _set_ranks(env, env["DDL_RANK"], env["DDL_WORLD_SIZE"],
                   env.get("DDL_LOCAL_RANK", env["DDL_RANK"]), env.get("DDL_LOCAL_SIZE"))
        host, _, port = env.get("DDL_ROOT", "").rpartition(":")
        if host and port:
            env.setdefault("MASTER_ADDR", host)
            env.setdefault("MASTER_PORT", port)
        return
    if "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        _set_ranks(env, env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"],
                   env.get("OMPI_COMM_WORLD_LOCAL_RANK", env["OMPI_COMM_WORLD_RANK"]),
                   env.get("OMPI_COMM_WORLD_LOCAL_SIZE"))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        job = env.get("OMPI_MCA_ess_base_jobid") or env.get("OMPI_MCA_orte_hnp_uri") or "ompi"
        digest = int(hashlib.sha1(job.encode()).hexdigest(), 16)
        env.setdefault("MASTER_PORT", str(20000 + digest % 10000))
        return
    if "SLURM_PROCID" in env and ("SLURM_NTASKS" in env or "SLURM_NPROCS" in env):
        # srun: torch's store on the step's first node (where block distribution puts task
        # 0), at ddl's own Slurm port (lib/bootstrap/slurm_root.h) + 20000, in 30000..49999:
        # the two never meet, and the torch backend does not use ddl's env bootstrap anyway.
        per_node = env.get("SLURM_NTASKS_PER_NODE", "")
        _set_ranks(env, env["SLURM_PROCID"], env.get("SLURM_NTASKS") or env["SLURM_NPROCS"],
                   env.get("SLURM_LOCALID", "0"), per_node if per_node.isdigit() else None)
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        env.setdefault("MASTER_ADDR", slurm_first_host(nodes) or "127.0.0.1")
        job, step = int(env.get("SLURM_JOB_ID", "0")), int(env.get("SLURM_STEP_ID", "0"))
        env.setdefault("MASTER_PORT", str(30000 + (job * 64 + step) % 20000))


def _set_ranks(env, rank, world, local_rank, local_size):
    """RANK, WORLD_SIZE, LOCAL_RANK and (when the launcher says) LOCAL_WORLD_SIZE, each left
    alone where already set."""
    env.setdefault("RANK", rank)
    env.setdefault("WORLD_SIZE", world)
    env.setdefault("LOCAL_RANK", local_rank)
    if local_size is not None:
        env.setdefault("LOCAL_WORLD_SIZE", local_size)


def slurm_first_host(nodelist):
    """The first host of a Slurm node list ("node[01-04,07],gpu1" -> "node01"), as
    lib/bootstrap/slurm_root.cc reads it."""
    host, depth, skipping = "", False, False
    for c in nodelist:
        if depth:
            if c == "]":
                depth = skipping = False
            elif c in ",-":
                skipping = True
            elif not skipping:
                host += c
            continue
        if c == ",":
            break
        if c == "[":
            depth = True
        else:
            host += c
    return host

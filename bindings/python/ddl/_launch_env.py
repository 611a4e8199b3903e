"""The launchers' variables in torch's words: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (what torch.distributed's env:// reads, and torchrun sets for
frameworks such as Lightning) from ddlrun's, Open MPI's or Slurm's.
Standard library only: torch's plugin hook (_torch_plugin.py) runs it inside `import torch`."""

import hashlib
import os
import select
import subprocess
import sys
import tempfile
import time
import warnings

# How long rank 0 waits for its store process to listen (it imports torch first).
STORE_START_TIMEOUT_S = 120


def torch_env_from_launcher(env=os.environ):
    """Makes env:// work under ddlrun, mpirun and srun: sets RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE (where the launcher says), MASTER_ADDR and MASTER_PORT from the
    launcher's variables, leaving any already set alone.

    ddlrun: DDL_RANK, DDL_WORLD_SIZE; the store goes to DDL_ROOT's host:port (ddlrun picked
    that port for rank 0; the torch backend does not use ddl's own env bootstrap, so it is
    free). mpirun: OMPI_COMM_WORLD_RANK/SIZE; MASTER_ADDR defaults to 127.0.0.1 (on several
    hosts pass -x MASTER_ADDR=host0) and MASTER_PORT to a port derived from the job id, so
    that every rank picks the same one without talking.

    DDL_TORCH_STORE=process under mpirun or srun: torch's store in a process of its own
    (start_store_process), so that rank 0 may die as any other."""
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
        start_store_process(env)
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
        start_store_process(env)


def start_store_process(env, watch_pid=None):
    """DDL_TORCH_STORE=process: under mpirun and srun no launcher of ddl's hosts torch's store,
    so env:// puts it in rank 0's process, and a shrink after rank 0's death stalls on it
    (torch's shrink_group clones the store). With this setting every rank uses the store as a
    client (TORCHELASTIC_USE_AGENT_STORE=True, as under torchrun and ddlrun --torch-store) and
    the rank that will be 0 starts it first, in a process of its own in a session of its own
    (`python -m ddl.torch.store`), which serves until the launcher's process that started rank
    0 (Open MPI's daemon, Slurm's step daemon) ends: the job's end, not rank 0's. When the store
    process cannot start, rank 0 hosts the store itself, with a warning. Returns the store
    process (rank 0, started) or None. watch_pid: the process whose end ends the store (default
    this one's parent, the launcher's)."""
    mode = env.get("DDL_TORCH_STORE", "")
    if mode in ("", "rank0"):
        return None
    if mode != "process":
        warnings.warn(f"ddl: ignoring DDL_TORCH_STORE={mode}: expected process or rank0",
                      RuntimeWarning)
        return None
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if env.get("RANK") != "0":
        return None
    child_env = dict(env)
    for var in ("DDL_TORCH_STORE", "TORCHELASTIC_USE_AGENT_STORE"):
        child_env.pop(var, None)  # the store's own `import torch` must not start another
    cmd = [sys.executable, "-m", "ddl.torch.store", "--port", env["MASTER_PORT"], "--host",
           env["MASTER_ADDR"], "--watch-pid", str(watch_pid or os.getppid())]
    # Its stderr goes to a file without a name, not to the launcher's pipe: a launcher waits
    # for the end of its ranks' output, which a store outliving them would hold open.
    errors = tempfile.TemporaryFile()
    try:
        store = subprocess.Popen(cmd, env=child_env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=errors, start_new_session=True)
        line = _read_line(store.stdout, STORE_START_TIMEOUT_S)
        store.stdout.close()
        if "ready on" not in line:
            store.kill()
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"exit status {store.wait()}: {' '.join(said) or 'no output'}")
        return store
    except (OSError, RuntimeError) as e:
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        warnings.warn(f"ddl: DDL_TORCH_STORE=process: could not start torch's store process "
                      f"({e}); rank 0 hosts the store, so losing it stalls a shrink",
                      RuntimeWarning)
        return None
    finally:
        errors.close()


def _read_line(pipe, timeout_s):
    """One line from pipe, or what came before the deadline or the end."""
    data, deadline = b"", time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pipe], [], [], left)[0]:
            break
        chunk = os.read(pipe.fileno(), 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


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

"""torch.distributed backend "ddl": `import ddl.torch`, then
`torch.distributed.init_process_group("ddl")`.

CPU and CUDA tensors (CUDA ones as ProcessGroupNCCL orders them: on a side stream that
waits for the caller's current stream, the Work's wait() making the caller's stream wait;
alltoall, reduce, gather, scatter, send and recv staged through pinned host memory; see
device_path.h). Supported: all_reduce (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM), broadcast,
all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, barrier, their
coalesced forms (allreduce_coalesced, all_gather_into_tensor / reduce_scatter_tensor under
_coalescing_manager) and new_group; all_to_all_single (even or uneven split sizes, zeros
included: ddl_alltoall / ddl_alltoallv) and all_to_all (tensors of any sizes), send, recv,
isend, irecv and batch_isend_irecv (supports_coalescing: a batch is one ddl group, so its sends
and receives never wait for each other), reduce, gather, scatter, and what torch builds on them
(gather_object, scatter_object_list, ...). ddl matches the messages of two ranks and one tag
in the order they were sent, as gloo and MPI do; a recv without a source (recvAnysource) takes
the first message with its tag from any rank, and its Work's sourceRank() says whose.
Asynchronous calls (async_op=True, DDP's buckets) run on ddl's progress thread and return a
Work whose Future completes without anyone waiting on it. send and recv (torch makes them
nonblocking calls, waited at once by dist.send/dist.recv) run on the caller's thread while
nothing else is in flight: a small transfer with a rank of this host never involves the
progress thread (README, "Nonblocking collectives and groups").

The collectives are a C++ c10d::Backend (backend.cpp). An installed package (a wheel, from
`pip install ./bindings/python`) carries it built against the torch that was in the
environment at install time, and refuses another torch, saying how to rebuild. Run from a
checkout (development: scripts/python-env.sh), it is the one the project's build made beside
the libddl the package loaded (built when the build was configured with -DDDL_PYTHON, as
scripts/test.sh does), if that one is for this torch and no older than its sources; else it
is compiled against the installed torch on first use with torch.utils.cpp_extension and cached
(~/.cache/torch_extensions, or $TORCH_EXTENSIONS_DIR); that needs a C++ compiler and ninja.

Rendezvous: every process group (the default one and each new_group) makes its own ddl
communicator. Its rank 0 picks a free port on an address the others can reach and a fresh
random job token, publishes both through the group's torch store (so any init_method works:
env://, tcp://, file://), and every member calls ddl.Communicator(size, rank, addr, token,
timeout_ms=the group's timeout).

Launchers: torchrun sets what env:// needs. Under ddlrun (DDL_RANK, DDL_WORLD_SIZE, DDL_ROOT)
, Open MPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE) or Slurm's srun (SLURM_PROCID,
SLURM_NTASKS, SLURM_STEP_NODELIST), importing this module fills in RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT when they are not set, so that
init_process_group("ddl") (or "gloo") works there too; see ddl/_launch_env.py. (The installed
package does the same, and makes the name "ddl" known, whenever torch is imported:
ddl/_torch_plugin.py.)
"""

import datetime
import hashlib
import importlib.util
import os
import secrets
import socket
import threading
import weakref

import torch
import torch.distributed as dist

import ddl
from ddl import _framework, _launch_env

__all__ = ["BACKEND", "all_reduce_", "communicator_from_store", "direct_handle", "extension",
           "nonblocking"]

BACKEND = "ddl"

_ext = None
_ext_lock = threading.Lock()


def extension():
    """The compiled backend module: the package's own, else (in a checkout) the build's, else
    one built on first use and then loaded from torch's cache."""
    global _ext
    with _ext_lock:
        if _ext is None:
            _ext = _packaged_extension() or _extension_from_build() or _extension_built_here()
    return _ext


_REINSTALL = ("reinstall ddl in this environment so that its backend is built against its "
              "torch: pip install --force-reinstall --no-deps <ddl checkout>/bindings/python")


def _packaged_extension():
    """The backend the wheel built (bindings/python/CMakeLists.txt), if this is one."""
    try:
        from . import _build_info
    except ImportError:
        return None
    if _build_info.TORCH_VERSION != torch.__version__:
        raise ImportError(
            f"ddl.torch: this ddl package's backend was built against torch "
            f"{_build_info.TORCH_VERSION}, and this environment has torch {torch.__version__}; "
            f"a C++ extension only loads into the torch it was built for: " + _REINSTALL)
    from . import _torch_backend
    return _torch_backend


_HERE = os.path.dirname(os.path.abspath(__file__))
# The backend's files: its source and every header it includes.
_SOURCES = [os.path.join(_HERE, name) for name in
            ("backend.cpp", "libddl_api.h", "work.h", "membership.h", "device_path.h",
             "device_calls.h", "rooted_calls.h", "uneven_calls.h", "direct_ops.h")]


def _extension_from_build():
    """The backend the project's build made (bindings/python/frameworks.cmake) beside the
    libddl this checkout's package loaded, if it is for this torch and up to date; else None."""
    if ddl._library._source_root_in_place() is None:
        return None
    path = _framework.module_in_build("torch", "_torch_backend.*.so", "TORCH_VERSION",
                                      torch.__version__, _SOURCES)
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("ddl.torch._torch_backend", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extension_built_here():
    if ddl._library._source_root_in_place() is None:
        raise ImportError(
            "ddl.torch: this ddl package has no torch backend: torch was not in the "
            "environment when the package was built. Install torch first, then " + _REINSTALL)
    import logging

    # Importing cpp_extension warns that there is no CUDA runtime on CPU-only machines; the
    # backend compiles no CUDA code, so that warning is only noise.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import cpp_extension

    # The torch version is in the name: an extension built against one torch must not be
    # loaded by another (C++ ABI), and torch's cache keys only on sources and flags. So is a
    # digest of every file of the backend: torch's cache does not see a change to a header.
    tag = torch.__version__.split("+")[0].replace(".", "_")
    digest = hashlib.sha256()
    for path in _SOURCES:
        with open(path, "rb") as f:
            digest.update(f.read())
    return cpp_extension.load(
        name=f"ddl_torch_backend_{tag}_{digest.hexdigest()[:12]}",
        sources=_SOURCES[:1],
        extra_cflags=["-O2"],
        extra_ldflags=["-ldl"],
        verbose=os.environ.get("DDL_TORCH_VERBOSE_BUILD") == "1",
    )


def nonblocking():
    """Whether the loaded libddl has nonblocking collectives (else every call blocks)."""
    return all(getattr(ddl._library.lib(), name) is not None
               for name in ("ddl_iallreduce", "ddl_wait", "ddl_group_start"))


# ---- rendezvous through the torch store ----------------------------------------------------

def _store_host(store):
    """The host of the TCPStore under store (PrefixStores unwrapped), or None."""
    while store is not None:
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
    return None


def _local_address_toward(host):
    """This machine's address on the route to host (no packet is sent: a UDP connect only
    picks the route). Loopback when host is this machine."""
    try:
        infos = socket.getaddrinfo(host, 1, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    for *_, addr in infos:
        if addr[0].startswith("127."):
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((addr[0], 1))
                return s.getsockname()[0]
            except OSError:
                continue
    return None


def _root_address(store):
    """An address of this machine (rank 0's) that the group's other ranks can reach:
    DDL_TORCH_ADDR if set; else the address on the route toward the host every rank already
    reached (the TCPStore's, MASTER_ADDR, DDL_ROOT's host); else this host's name."""
    explicit = os.environ.get("DDL_TORCH_ADDR")
    if explicit:
        return explicit
    for host in (_store_host(store), os.environ.get("MASTER_ADDR"),
                 os.environ.get("DDL_ROOT", "").rpartition(":")[0] or None):
        if host:
            addr = _local_address_toward(host)
            if addr:
                return addr
    name = socket.gethostname()
    return _local_address_toward(name) or "127.0.0.1"


def _free_port(addr):
    # The port is free now; ddl's rendezvous binds it a moment later (a small race, as with
    # torchrun's own free-port choice).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr if not addr.startswith("127.") else "127.0.0.1", 0))
        return s.getsockname()[1]


def communicator_from_store(store, rank, size, timeout_ms=None, key="ddl"):
    """A ddl.Communicator for the `size` processes sharing torch store `store` (each passing
    its rank): rank 0 picks a free port on a reachable address and a fresh random job token,
    and publishes them under `key` in the store; the others read them (waiting up to the
    store's timeout). Each process group's backend makes its own this way; so can a program
    that wants a raw ddl communicator beside torch's (bench/torch_vs_gloo.py does)."""
    if rank == 0:
        addr = _root_address(store)
        root = f"{addr}:{_free_port(addr)}"
        token = secrets.token_hex(16)
        store.set(f"{key}/root", root)
        store.set(f"{key}/token", token)
    else:
        root = store.get(f"{key}/root").decode()
        token = store.get(f"{key}/token").decode()
    return ddl.Communicator(size, rank, root, job_token=token, timeout_ms=timeout_ms)


def _create_backend(store, rank, size, timeout):
    """torch's backend constructor: (PrefixStore of this group, group rank, group size,
    timeout) -> the C++ backend. Called once per process group, by its members only."""
    ext = extension()  # build before the rendezvous, so that its time does not count
    if isinstance(timeout, datetime.timedelta):
        timeout_ms = int(timeout.total_seconds() * 1000)
    else:
        timeout_ms = int(timeout) if timeout else None
    timeout_ms = min(timeout_ms, 2**31 - 1) if timeout_ms else None
    comm = communicator_from_store(store, rank, size, timeout_ms)
    _warn_if_gpu_shared_without_mps(comm)
    # The backend keeps `comm` alive and uses its C handle directly.
    return ext.DdlBackend(rank, size, comm._handle.value, ddl.library_path(), comm)


_warned_gpu_shared = False


def _mps_running():
    """Whether NVIDIA's MPS control daemon is up for this process (its pipe is there)."""
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipes, "control"))


def _warn_if_gpu_shared_without_mps(comm):
    """Ranks that share one GPU without MPS time-slice it between their processes: on an H100
    a 128 MB allreduce of 2 ranks reached 32 % of the memory bound without MPS and 87 % with
    it, and every small call cost 450 us instead of 35 (bench/gpu.md, "On a GPU"). Says
    so once per process, on the ranks concerned. Every rank takes part in one allgather of
    (host, GPU) at each group's creation, whatever its own state (a rank that has picked no
    GPU, with torch.cuda.set_device as for NCCL, sends 0), so that all of them call it."""
    global _warned_gpu_shared
    import numpy as np

    mine = np.zeros(1, dtype=np.int64)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        key = hashlib.sha1(f"{socket.gethostname()}/{gpu}".encode()).digest()[:8]
        mine[0] = int.from_bytes(key, "little", signed=True) or 1
    every = np.zeros(comm.size, dtype=np.int64)
    comm.allgather(mine, every)
    sharing = int((every == mine[0]).sum()) if mine[0] else 0
    if sharing > 1 and not _warned_gpu_shared and not _mps_running():
        import warnings

        _warned_gpu_shared = True
        warnings.warn(
            f"ddl: rank {comm.rank} shares GPU {torch.cuda.current_device()} with "
            f"{sharing - 1} other rank(s) of this group and NVIDIA's MPS is not running: the "
            f"GPU time-slices between the processes (a device allreduce costs ~450 us instead "
            f"of ~35). Start it before the job: nvidia-cuda-mps-control -d", stacklevel=3)


def shrink_group(group=None, attempts=3):
    """Shrinks `group` (default: the default group) to its live ranks after a failure and
    returns the new group, as torch.distributed.shrink_group does (which replaces the default
    group when it shrinks it), but without being told which ranks to exclude: ddl's
    fault-tolerant agreement (ddl_comm_agree) finds them, the same on every survivor. Call it
    on every live rank once a collective raised DistBackendError; returns `group` itself when
    nothing failed. A rank that dies during the shrink is found by the next attempt."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    comm = _direct_comm(pg)
    for attempt in range(attempts):
        comm.agree(1)
        failed = comm.failed_ranks()
        if not failed:
            return pg
        try:
            return dist.shrink_group(failed, group=pg)
        except dist.DistBackendError:
            if attempt + 1 == attempts:
                raise


# ---- the direct op -------------------------------------------------------------------------

_DIRECT_OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
# Process group -> its ddl.Communicator, looked up once per group (a group's backend never
# changes); an entry goes with its group.
_direct_comms = weakref.WeakKeyDictionary()


def _direct_comm(group):
    group = group or dist.group.WORLD
    comm = _direct_comms.get(group)
    if comm is None:
        backend = group._get_backend(torch.device("cpu"))
        comm = getattr(backend, "communicator", None)
        if comm is None:
            raise ValueError(f"not a ddl process group (its backend: {type(backend).__name__})")
        _direct_comms[group] = comm
    return comm


def direct_handle(group=None):
    """The ddl communicator of a "ddl" process group (default: the world), as the integer
    torch.ops.ddl.all_reduce_ takes. Look it up once, outside a compiled function."""
    return _direct_comm(group)._live().value


def all_reduce_(tensor, op="sum", group=None):
    """Allreduces a contiguous CPU tensor in place on a "ddl" process group, straight into
    libddl's blocking call: no c10d dispatch, no Work (for latency-bound code such as
    tensor-parallel inference, DeepSpeed's inference_all_reduce). op: sum, prod, min, max,
    avg. Returns the tensor. Inside torch.compile call the op itself with a handle looked up
    beforehand: torch.ops.ddl.all_reduce_(tensor, ddl.torch.direct_handle(), 0)."""
    code = _DIRECT_OPS.get(op)
    if code is None:
        raise ValueError(f"all_reduce_: op {op!r} is not one of {sorted(_DIRECT_OPS)}")
    handle = _direct_comm(group)._live().value
    if torch.compiler.is_compiling():
        torch.ops.ddl.all_reduce_(tensor, handle, code)
    else:
        (_direct_kernel or _find_direct_kernel())(tensor, handle, code)
    return tensor


_direct_kernel = None


def _find_direct_kernel():
    """The op's kernel called without torch's operator machinery (the extension's own
    binding, backend.cpp), or the op where the extension predates that binding."""
    global _direct_kernel
    _direct_kernel = getattr(extension(), "all_reduce_", None) or torch.ops.ddl.all_reduce_
    return _direct_kernel


def _register():
    if "ddl" in dist.Backend.backend_list:
        return
    # One backend object serves both: CUDA tensors take libddl's stream-ordered calls or are
    # staged through pinned host memory (device_path.h).
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "cuda"])


_launch_env.torch_env_from_launcher()
_register()

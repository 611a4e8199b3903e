"""Communicators, collectives, requests and groups over libddl's C API.

Every C call goes through ctypes.CDLL, which releases the GIL for the duration of the
call: other Python threads run while a collective waits for its peers.
"""

import contextlib
import ctypes
import enum
import threading

from . import _library
from ._counts_per_rank import CountsPerRankMixin
from ._elastic import ElasticMixin
from ._point_to_point import PointToPointMixin
from ._buffers import as_buffer, check_same_dtype, resolve_pair

# ddl_result_t, by value (names never change; values are never renumbered).
_RESULT_NAMES = {
    0: "DDL_SUCCESS",
    1: "DDL_ERR_INVALID_ARGUMENT",
    2: "DDL_ERR_INVALID_USAGE",
    3: "DDL_ERR_SYSTEM",
    4: "DDL_ERR_INTERNAL",
    5: "DDL_ERR_REMOTE",
    6: "DDL_ERR_TIMEOUT",
    7: "DDL_ERR_UNSUPPORTED",
}
ERR_INVALID_USAGE = 2
ERR_UNSUPPORTED = 7

SPLIT_NOCOLOR = -1


class Error(Exception):
    """A ddl call failed. `code`: the ddl_result_t value; `name`: its name
    ("DDL_ERR_TIMEOUT"); `message`: ddl's own words (rank, peer, collective, cause)."""

    __module__ = "ddl"

    def __init__(self, code, message):
        self.code = int(code)
        self.name = _RESULT_NAMES.get(self.code, f"DDL_ERR_{self.code}")
        self.message = message or ""
        super().__init__(self.code, self.message)

    def __str__(self):
        return f"{self.name}: {self.message}" if self.message else self.name


class LibraryTooOldError(Error, NotImplementedError):
    """The loaded libddl lacks a function this call needs (nonblocking calls, groups)."""

    def __init__(self, function):
        super().__init__(ERR_UNSUPPORTED,
                         f"{_library.lib().path} has no {function}(): this libddl predates "
                         "nonblocking collectives and groups; rebuild ddl from a current "
                         "checkout")


class Op(enum.IntEnum):
    """ddl_op_t. Strings ("sum", "avg", ...) are accepted wherever an op is."""
    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


SUM, PROD, MIN, MAX, AVG = Op.SUM, Op.PROD, Op.MIN, Op.MAX, Op.AVG


def _op(op):
    if type(op) is Op:  # the usual case, without enum's lookup (about 1 us)
        return op
    if isinstance(op, str):
        try:
            return Op[op.upper()]
        except KeyError:
            pass
    else:
        try:
            return Op(op)
        except ValueError:
            pass
    raise ValueError(f"op: {op!r} is not one of sum, prod, min, max, avg")


def _last_error(handle):
    text = _library.lib().ddl_comm_last_error(handle)
    return text.decode("utf-8", "replace") if text else ""


def _raise_for(code, handle):
    """Raises Error for a failed call on handle; falls back to the thread's last error
    (the header puts refusals of the handle itself there)."""
    message = _last_error(handle) if handle else ""
    if not message:
        message = _last_error(None)
    raise Error(code, message)


def version():
    """libddl's version as (major, minor, patch)."""
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    rc = _library.lib().ddl_get_version(ctypes.byref(major), ctypes.byref(minor),
                                        ctypes.byref(patch))
    if rc:
        _raise_for(rc, None)
    return (major.value, minor.value, patch.value)


def library_path():
    """The path of the libddl.so.0 this package loaded (loading it if needed)."""
    return _library.lib().path


# ---- Groups --------------------------------------------------------------------------------
#
# Inside ddl_group_start/end, blocking calls return before ddl has touched their buffers; the
# buffers must live until the outermost ddl_group_end. This per-thread state keeps them.

class _GroupState(threading.local):
    def __init__(self):
        self.depth = 0
        self.keep = []      # buffers of calls recorded in the open group
        self.handles = []   # communicators used in it, for the failure's words


_group = _GroupState()


@contextlib.contextmanager
def group():
    """`with ddl.group(): ...` issues the collectives inside together (ddl_group_start /
    ddl_group_end; NCCL semantics, small allreduces fused). Blocking calls inside return at
    once; their results are ready when the with-block ends. Raises Error if the group fails."""
    fns = _library.lib()
    if fns.ddl_group_start is None:
        raise LibraryTooOldError("ddl_group_start")
    rc = fns.ddl_group_start()
    if rc:
        _raise_for(rc, None)
    _group.depth += 1
    body_failed = True
    try:
        yield
        body_failed = False
    finally:
        _group.depth -= 1
        # Always end the group, so that this thread does not go on recording calls.
        rc = fns.ddl_group_end()
        handles = _group.handles
        if _group.depth == 0:
            # The outermost end issued everything: ddl is done with the blocking calls'
            # buffers (nonblocking ones are held by their Requests).
            _group.handles, _group.keep = [], []
        if rc and not body_failed:
            message = _last_error(None)
            for h in handles:
                if message:
                    break
                message = _last_error(h)
            raise Error(rc, message)


# ---- Requests ------------------------------------------------------------------------------

# Requests garbage-collected before they finished: ddl still uses their buffers, so their
# Python objects stay here until a later sweep sees them finished.
_orphans = []
_orphans_lock = threading.Lock()


def _sweep_orphans(fns):
    if not _orphans:
        return
    with _orphans_lock:
        done = ctypes.c_int()
        still = []
        for handle, keep in _orphans:
            if fns.ddl_test(handle, ctypes.byref(done)) != 0 or done.value:
                fns.ddl_request_free(handle)
            else:
                still.append((handle, keep))
        _orphans[:] = still


class Request:
    """A nonblocking collective in flight. Holds its buffers until it completes."""

    __slots__ = ("_handle", "_pending", "_keep", "_comm", "_name", "_error", "_source",
                 "__weakref__")

    def __init__(self, handle, keep, comm, name, source=None):
        self._handle = handle   # ctypes.c_void_p
        self._pending = True
        self._keep = keep       # buffers (and their owners) ddl reads or writes
        self._comm = comm       # keeps the Communicator (and its C handle) alive
        self._name = name
        self._error = None
        self._source = source   # a receive's ctypes.c_int, where ddl writes its sender

    @property
    def source(self):
        """A receive's sender (from any source: the rank whose message it took), once it
        has finished successfully; None before, and for other calls."""
        if self._source is None or not self.done or self._error is not None:
            return None
        return self._source.value

    def _finished(self, rc):
        # The collective is over: ddl no longer touches the buffers.
        self._pending = False
        self._keep = None
        self._comm = None
        if rc:
            message = _last_error(None)
            self._error = Error(rc, message or f"{self._name} failed")

    @property
    def done(self):
        """True once the collective has finished (successfully or not). Never raises."""
        if not self._pending:
            return True
        flag = ctypes.c_int()
        rc = _library.lib().ddl_test(self._handle, ctypes.byref(flag))
        if rc or flag.value:
            self._finished(rc)
            return True
        return False

    def test(self):
        """True if finished, False if still running; raises Error if it failed."""
        finished = self.done
        if self._error is not None:
            raise self._error
        return finished

    def wait(self):
        """Blocks (without the GIL) until the collective has finished; raises Error if it
        failed. ddl's deadline (timeout_ms / DDL_TIMEOUT_MS) bounds the wait."""
        if self._pending:
            self._finished(_library.lib().ddl_wait(self._handle))
        if self._error is not None:
            raise self._error

    def __repr__(self):
        state = "failed" if self._error else ("pending" if self._pending else "done")
        return f"<ddl.Request {self._name} {state}>"

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if not handle:
            return
        try:
            fns = _library.lib()
            if self._pending and not self.done:
                # Still running: ddl goes on using the buffers, so they (and the
                # communicator) stay referenced until a later sweep sees it finished.
                with _orphans_lock:
                    _orphans.append((handle, (self._keep, self._comm)))
            else:
                fns.ddl_request_free(handle)
        except Exception:
            pass  # never raise from a finaliser (e.g. at interpreter exit)
        self._handle = None


# ---- Communicators -------------------------------------------------------------------------

_LOG_LEVELS = {"error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}


class Communicator(ElasticMixin, PointToPointMixin, CountsPerRankMixin):
    """A ddl communicator: `Communicator(size, rank, root_addr, ...)` (ddl_comm_init) or
    `ddl.init()` (from the launcher's environment). Collective calls must be made by every
    rank in the same order. Not for concurrent use by several threads, except abort()."""

    def __init__(self, size, rank, root_addr, job_token=None, timeout_ms=None,
                 chunk_bytes=None, log_level=None):
        fns = _library.lib()
        cfg = _library.Config()
        cfg.size = ctypes.sizeof(_library.Config)
        cfg.version = _library.CONFIG_VERSION
        cfg.timeout_ms = int(timeout_ms) if timeout_ms is not None else 0
        token = job_token.encode() if isinstance(job_token, str) else job_token
        cfg.job_token = token
        cfg.chunk_bytes = int(chunk_bytes) if chunk_bytes is not None else 0
        if isinstance(log_level, str):
            try:
                log_level = _LOG_LEVELS[log_level.lower()]
            except KeyError:
                raise ValueError(f"log_level: {log_level!r} is not one of error, warn, "
                                 "info, debug") from None
        cfg.log_level = -1 if log_level is None else int(log_level)
        handle = ctypes.c_void_p()
        rc = fns.ddl_comm_init(ctypes.byref(handle), int(size), int(rank),
                               str(root_addr).encode(), ctypes.byref(cfg))
        if rc:
            _raise_for(rc, None)
        self._adopt(handle)

    @classmethod
    def _from_handle(cls, handle):
        comm = cls.__new__(cls)
        comm._adopt(handle)
        return comm

    def _adopt(self, handle):
        fns = _library.lib()
        self._fns = fns
        self._handle = handle
        self._fuser = None  # enable_fusion()
        self._on_destroy = []  # callables run by destroy() before the handle is freed
        value = ctypes.c_int()
        rc = fns.ddl_comm_rank(handle, ctypes.byref(value))
        if rc:
            _raise_for(rc, handle)
        self.rank = value.value
        rc = fns.ddl_comm_size(handle, ctypes.byref(value))
        if rc:
            _raise_for(rc, handle)
        self.size = value.value

    # -- lifetime

    def _live(self):
        handle = getattr(self, "_handle", None)
        if not handle:
            raise Error(ERR_INVALID_USAGE, "this communicator was destroyed")
        return handle

    def destroy(self):
        """Frees the communicator (closing its Fuser first, see enable_fusion); calling it
        again does nothing. Not collective, except for closing the Fuser."""
        if getattr(self, "_fuser", None) is not None:
            self.disable_fusion()
        handle = getattr(self, "_handle", None)
        if not handle:
            return
        # Who numbered this communicator (ddl.jax) forgets it before it is freed.
        for forget in getattr(self, "_on_destroy", ()):
            forget()
        self._handle = None
        rc = self._fns.ddl_comm_destroy(handle)
        if rc:
            raise Error(rc, _last_error(None))

    def abort(self):
        """Marks the communicator failed: a call waiting in another thread returns with an
        error at once, and every later call fails. Destroy it afterwards."""
        handle = self._live()
        rc = self._fns.ddl_comm_abort(handle)
        if rc:
            _raise_for(rc, handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass  # a finaliser must not raise; destroy() errors are reported when called

    def __repr__(self):
        state = "" if getattr(self, "_handle", None) else " destroyed"
        return f"<ddl.Communicator rank {getattr(self, 'rank', '?')} of " \
               f"{getattr(self, 'size', '?')}{state}>"

    # -- plumbing shared by the collectives

    def _issue(self, name, async_, keep, result, blocking_call, nonblocking_fn, args,
               handle_at=-1, source=None):
        """Runs one collective: blocking, nonblocking (a Request) or recorded in a group.
        handle_at: where the communicator is among args; source: a receive's sender cell."""
        handle = args[handle_at]
        if async_:
            if nonblocking_fn is None:
                raise LibraryTooOldError("ddl_i" + name)
            _sweep_orphans(self._fns)
            req = ctypes.c_void_p()
            rc = nonblocking_fn(*args, ctypes.byref(req))
            if rc:
                _raise_for(rc, handle)
            if _group.depth:
                _group.handles.append(handle)
            return Request(req, (keep, source), self, name, source)
        if blocking_call is None:
            raise LibraryTooOldError("ddl_" + name)
        rc = blocking_call(*args)
        if rc:
            _raise_for(rc, handle)
        if _group.depth:
            # Recorded only: ddl fills the buffers at the group's end.
            _group.keep.append(keep)
            _group.handles.append(handle)
        return result

    # -- fusion

    def enable_fusion(self, fusion_bytes=None, cycle_ms=None, timeout_ms=None):
        """Collective. From now on allreduce(..., async_=True) outside ddl.group() goes
        through a ddl.Fuser (Horovod-style negotiated fusion, see ddl.fusion) and returns
        its Handle; `name=` then matches tensors across ranks by name. Such allreduces run
        on the Fuser's own communicator: they are not ordered with this communicator's other
        calls. Returns the Fuser; calling it again returns the same one."""
        if self._fuser is None:
            from .fusion import Fuser
            self._live()
            self._fuser = Fuser(self, fusion_bytes=fusion_bytes, cycle_ms=cycle_ms,
                                timeout_ms=timeout_ms)
        return self._fuser

    def disable_fusion(self, timeout=10.0):
        """Collective: closes the Fuser of enable_fusion (Fuser.close: drains what every
        rank submitted, never hangs past `timeout` seconds and a grace period)."""
        fuser, self._fuser = self._fuser, None
        if fuser is not None:
            fuser.close(timeout)

    # -- collectives

    def allreduce(self, send, recv=None, op=SUM, async_=False, name=None):
        """Reduces send across ranks into recv (in place in send when recv is None).
        Returns recv (or send), or a Request when async_. With enable_fusion(), async_
        calls go through the Fuser and return a ddl.fusion.Handle; `name` (used only then)
        matches the tensor across ranks by name instead of by call order."""
        handle = self._live()
        if async_ and self._fuser is not None and not _group.depth:
            return self._fuser.allreduce_async(send, op=op, name=name, out=recv)
        op = _op(op)
        s, r, recv = resolve_pair(send, recv, "allreduce", "send", "recv")
        return self._issue("allreduce", async_, (s.keep, r.keep), recv,
                           self._fns.ddl_allreduce, self._fns.ddl_iallreduce,
                           (s.address, r.address, s.count, int(s.dtype), int(op), handle))

    def scan(self, send, recv=None, op=SUM, async_=False):
        """Rank r's recv receives the reduction of ranks 0..r's send (MPI_Scan; in place
        in send when recv is None). Every op but AVG. Returns recv (or send), or a Request."""
        return self._prefix("scan", send, recv, op, async_)

    def exscan(self, send, recv=None, op=SUM, async_=False):
        """Rank r's recv receives the reduction of ranks 0..r-1's send (MPI_Exscan); rank
        0's recv is left as it was. Otherwise as scan."""
        return self._prefix("exscan", send, recv, op, async_)

    def _prefix(self, name, send, recv, op, async_):
        handle = self._live()
        op = _op(op)
        s, r, recv = resolve_pair(send, recv, name, "send", "recv")
        return self._issue(name, async_, (s.keep, r.keep), recv,
                           getattr(self._fns, "ddl_" + name), getattr(self._fns, "ddl_i" + name),
                           (s.address, r.address, s.count, int(s.dtype), int(op), handle))

    def broadcast(self, buf, root=0, async_=False):
        """Copies root's buf into every rank's buf. Returns buf, or a Request when async_."""
        handle = self._live()
        root = int(root)
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root} is not a rank of this communicator "
                             f"(0..{self.size - 1})")
        b = as_buffer(buf, "broadcast: buf", writable=root != self.rank)
        return self._issue("broadcast", async_, b.keep, buf,
                           self._fns.ddl_broadcast, self._fns.ddl_ibroadcast,
                           (b.address, b.count, int(b.dtype), root, handle))

    def allgather(self, send, recv, async_=False):
        """recv (size * len(send) elements) receives every rank's send, in rank order.
        Returns recv, or a Request when async_."""
        handle = self._live()
        s = as_buffer(send, "allgather: send", writable=False)
        r = as_buffer(recv, "allgather: recv", writable=True)
        check_same_dtype(s, "send", r, "allgather: recv")
        if r.count != s.count * self.size:
            raise ValueError(f"allgather: recv has {r.count} elements; it must hold size * "
                             f"len(send) = {self.size} * {s.count} = {s.count * self.size}")
        return self._issue("allgather", async_, (s.keep, r.keep), recv,
                           self._fns.ddl_allgather, self._fns.ddl_iallgather,
                           (s.address, r.address, s.count, int(s.dtype), handle))

    def reduce_scatter(self, send, recv, op=SUM, async_=False):
        """send holds size * len(recv) elements; rank r receives block r of the reduction.
        Returns recv, or a Request when async_."""
        handle = self._live()
        op = _op(op)
        s = as_buffer(send, "reduce_scatter: send", writable=False)
        r = as_buffer(recv, "reduce_scatter: recv", writable=True)
        check_same_dtype(s, "send", r, "reduce_scatter: recv")
        if s.count != r.count * self.size:
            raise ValueError(f"reduce_scatter: send has {s.count} elements; it must hold "
                             f"size * len(recv) = {self.size} * {r.count} = "
                             f"{r.count * self.size}")
        return self._issue("reduce_scatter", async_, (s.keep, r.keep), recv,
                           self._fns.ddl_reduce_scatter, self._fns.ddl_ireduce_scatter,
                           (s.address, r.address, r.count, int(s.dtype), int(op), handle))

    def barrier(self, async_=False):
        """Returns once every rank has entered the barrier (a Request when async_)."""
        handle = self._live()
        return self._issue("barrier", async_, None, None,
                           self._fns.ddl_barrier, self._fns.ddl_ibarrier, (handle,))

    # -- alltoall, reduce, gather, scatter

    def _root(self, root, what):
        root = int(root)
        if not 0 <= root < self.size:
            raise ValueError(f"{what}: root {root} is not a rank of this communicator "
                             f"(0..{self.size - 1})")
        return root

    def alltoall(self, send, recv=None, async_=False):
        """Block j of send (len(send) / size elements) goes to rank j; block j of recv comes
        from rank j. In place in send when recv is None. Returns recv, or a Request."""
        handle = self._live()
        s, r, recv = resolve_pair(send, recv, "alltoall", "send", "recv")
        if s.count % self.size or r.count != s.count:
            raise ValueError(f"alltoall: send and recv must hold the same multiple of size "
                             f"({self.size}) elements, not {s.count} and {r.count}")
        return self._issue("alltoall", async_, (s.keep, r.keep), recv,
                           self._fns.ddl_alltoall, self._fns.ddl_ialltoall,
                           (s.address, r.address, s.count // self.size, int(s.dtype), handle))

    def reduce(self, send, recv=None, root=0, op=SUM, async_=False):
        """Reduces send across ranks into root's recv (in place in send when recv is None;
        other ranks' recv is ignored). Returns recv (or send), or a Request."""
        handle = self._live()
        root, op = self._root(root, "reduce"), _op(op)
        if self.rank == root or recv is not None:
            s, r, recv = resolve_pair(send, recv, "reduce", "send", "recv")
        else:
            s = as_buffer(send, "reduce: send", writable=False)
            r = None
        return self._issue("reduce", async_, (s.keep, r and r.keep), recv,
                           self._fns.ddl_reduce, self._fns.ddl_ireduce,
                           (s.address, r.address if r else None, s.count, int(s.dtype), int(op),
                            root, handle))

    def gather(self, send, recv=None, root=0, async_=False):
        """The root's recv (size * len(send) elements) receives every rank's send in rank
        order; recv is needed on the root only. Returns recv, or a Request."""
        handle = self._live()
        root = self._root(root, "gather")
        s = as_buffer(send, "gather: send", writable=False)
        r = None
        if self.rank == root:
            if recv is None:
                raise ValueError("gather: the root needs recv (size * len(send) elements)")
            r = as_buffer(recv, "gather: recv", writable=True)
            check_same_dtype(s, "send", r, "gather: recv")
            if r.count != s.count * self.size:
                raise ValueError(f"gather: recv has {r.count} elements; it must hold size * "
                                 f"len(send) = {s.count * self.size}")
        return self._issue("gather", async_, (s.keep, r and r.keep), recv,
                           self._fns.ddl_gather, self._fns.ddl_igather,
                           (s.address, r.address if r else None, s.count, int(s.dtype), root,
                            handle))

    def scatter(self, send, recv, root=0, async_=False):
        """Block i of the root's send (size * len(recv) elements) goes to rank i's recv;
        send is needed on the root only. Returns recv, or a Request."""
        handle = self._live()
        root = self._root(root, "scatter")
        r = as_buffer(recv, "scatter: recv", writable=True)
        s = None
        if self.rank == root:
            if send is None:
                raise ValueError("scatter: the root needs send (size * len(recv) elements)")
            s = as_buffer(send, "scatter: send", writable=False)
            check_same_dtype(s, "send", r, "scatter: recv")
            if s.count != r.count * self.size:
                raise ValueError(f"scatter: send has {s.count} elements; it must hold size * "
                                 f"len(recv) = {r.count * self.size}")
        return self._issue("scatter", async_, (s and s.keep, r.keep), recv,
                           self._fns.ddl_scatter, self._fns.ddl_iscatter,
                           (s.address if s else None, r.address, r.count, int(r.dtype), root,
                            handle))

    def split(self, color, key=0):
        """ddl_comm_split: the ranks passing the same color >= 0 form a new Communicator,
        ordered by key (ties by rank); SPLIT_NOCOLOR gives None. Collective."""
        handle = self._live()
        new = ctypes.c_void_p()
        rc = self._fns.ddl_comm_split(handle, int(color), int(key), ctypes.byref(new))
        if rc:
            _raise_for(rc, handle)
        if not new:
            return None
        return Communicator._from_handle(new)


def init():
    """A communicator from the launcher's environment (ddl_comm_init_from_env): DDL_RANK,
    DDL_WORLD_SIZE, DDL_ROOT (ddlrun), mpirun, srun or torchrun variables. Collective."""
    fns = _library.lib()
    handle = ctypes.c_void_p()
    rc = fns.ddl_comm_init_from_env(ctypes.byref(handle))
    if rc:
        _raise_for(rc, None)
    return Communicator._from_handle(handle)

"""Horovod-style tensor fusion: many small allreduces submitted asynchronously, negotiated
across ranks by a background thread, and run as a few allreduces of one packed buffer.

    fuser = ddl.fusion.Fuser(comm)                     # collective (splits comm)
    handles = [fuser.allreduce_async(g, name=n) for n, g in grads]
    for h in handles:
        h.wait()                                       # each g now holds the sum, in place
    fuser.close()                                      # collective; never hangs

Why a negotiation. A fused allreduce is only correct if every rank packs the same tensors,
in the same order, into the same buffer. A flush triggered by a timer or by a byte count
fires at different moments on different ranks (each rank's backward pass produces its
gradients at its own pace, in its own order), so ranks would disagree on what goes in. As in
Horovod, every cycle (`cycle_ms`) the background threads of all ranks run one small
allreduce (MIN) over a readiness vector, and reduce exactly the tensors that every rank has
submitted, in one agreed order:

  * tensors with a name are matched by name, whatever order each rank submits them in.
    A name gets a slot (an index into the readiness vector) the first time it is seen: the
    names a rank has not seen agreed yet are exchanged once (an allgather of their bytes)
    and every rank appends them to its table in the same order. Slots are kept, so a name
    submitted again (every training step) costs one element of the vector, nothing more;
  * tensors without a name are matched by submission order (the k-th unnamed tensor of
    each rank goes together): the vector carries how many each rank has submitted, and the
    minimum across ranks says how many are ready everywhere.

The tensors ready everywhere are then grouped by (dtype, op), packed in the agreed order
into buffers of at most `fusion_bytes`, allreduced with ddl's own call (ctypes releases the
GIL meanwhile) and unpacked into each tensor; a tensor larger than `fusion_bytes` is reduced
alone in place, without a copy. Before that, one more tiny allreduce compares a checksum of
the batch's layout (dtype, op and element count of every tensor) across ranks: a tensor
submitted with a different shape, dtype or op on some rank fails on every rank with an
error naming it and what each rank submitted, instead of mixing up its neighbours.

Why a communicator of its own. ddl matches calls on a communicator by their order, and
refuses concurrent calls on one communicator from two threads. The background thread's
calls (negotiation and fused allreduces, in an order every rank derives from the same
negotiation results) therefore go over a private communicator split from the user's: they
cannot interleave with the user's own calls on `comm`, which may go on meanwhile. One
communicator serves both negotiation and data: a single thread issues both in one agreed
sequence, and a second communicator would buy nothing without a second thread.

Semantics, as Horovod's allreduce_async_: in place by default (or into `out`); the tensor
must not be read or written until its handle completes; wait() returns the result. A
fused allreduce is not ordered with the user's calls on `comm`.

Never hang: wait() has a deadline (DDL_TIMEOUT_MS unless given); close() drains what every
rank submitted, then, past its deadline, tells the other ranks to stop (their pending
handles fail, naming the rank that closed), and as a last resort aborts the private
communicator, which ends any call still waiting for a peer that stopped cycling. A failure
of ddl (a dead peer, a deadline) fails every pending handle with the same ddl.Error.
"""

import atexit
import collections
import ctypes
import os
import re
import threading
import time
import weakref
import zlib

from . import _library
from ._buffers import _ITEMSIZE, DataType, resolve_pair
from ._core import ERR_INVALID_USAGE, Communicator, Error, Op, _op, init

__all__ = ["Fuser", "Handle", "synchronize", "DEFAULT_FUSION_BYTES", "DEFAULT_CYCLE_MS"]

ERR_INTERNAL = 4
ERR_TIMEOUT = 6

# Horovod's HOROVOD_FUSION_THRESHOLD default: big enough that a step's gradients go in a
# few buffers. (ddl's C groups default DDL_FUSION_BYTES to 64 KiB: they pack in C, where a
# buffer that stays in cache is fastest, bench/one-host.md; here Python's per-tensor work
# dominates and fewer, larger buffers cost less.)
DEFAULT_FUSION_BYTES = 64 << 20
# Horovod's HOROVOD_CYCLE_TIME default. Shorter cycles cut latency but cost a negotiation
# each (tens of microseconds of Python per cycle here); longer ones fuse more per cycle.
DEFAULT_CYCLE_MS = 1.0
# Distinct names kept in the slot table before it is cleared (and in-use names are
# exchanged again): the readiness vector has one 4-byte element per slot.
DEFAULT_MAX_NAMES = 4096

# The readiness vector's head (int32, reduced with MIN, so a maximum is sent negated).
_H_ANNOUNCE = 0  # -(bytes of new names this rank announces): MIN gives -(largest)
_H_FORCE = 1     # -(rank + 1) of a rank that gives up closing: everybody stops now
_H_DRAINED = 2   # 1 if this rank is closing with nothing pending: all 1 -> clean stop
_H_UNNAMED = 3   # unnamed tensors submitted beyond those agreed: MIN = ready everywhere
_HEAD = 4
_INT32_MAX = 2**31 - 1

_PENDING, _DONE, _FAILED = 0, 1, 2

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)(i?b)?\s*$", re.IGNORECASE)


def _env_bytes(var, default):
    """A size from the environment: bytes, or with K/M/G (powers of 1024, as ddl's C
    reads DDL_FUSION_BYTES)."""
    text = os.environ.get(var)
    if not text:
        return default
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"{var}={text!r}: expected a size like 65536, 64K or 64M")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def _env_float(var, default):
    text = os.environ.get(var)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{var}={text!r}: expected a number of milliseconds") from None
    return value


# op as users pass it (Op, int, "sum") -> its value, without Op()'s microsecond per call.
_OP_VALUES = {key: int(o) for o in Op for key in (o, int(o), o.name.lower(), o.name)}


def _describe(dtype, op, count):
    return f"{DataType(dtype).name.lower()}[{count}] {Op(op).name.lower()}"


class Handle:
    """One tensor's allreduce submitted to a Fuser. wait() returns the reduced tensor.

    `name` is the name it was submitted with, or None (matched by submission order).
    """

    __slots__ = ("name", "output", "_fuser", "_state", "_error", "_src", "_dst", "_count",
                 "_dtype", "_op", "_nbytes", "_keep", "_order", "_seq")

    def __repr__(self):
        state = ("pending", "done", "failed")[self._state]
        return f"<ddl.fusion.Handle {self.label} {_describe(self._dtype, self._op, self._count)} {state}>"

    @property
    def label(self):
        """How errors name this tensor: 'x' or 'unnamed #k' (k-th unnamed on this Fuser)."""
        return repr(self.name) if self.name is not None else f"unnamed #{self._seq}"

    @property
    def done(self):
        """True once the allreduce finished or failed. Never raises."""
        return self._state != _PENDING

    def test(self):
        """True if finished, False if still pending; raises ddl.Error if it failed."""
        if self._state == _FAILED:
            raise self._error
        return self._state == _DONE

    def wait(self, timeout=None):
        """Blocks until this tensor is reduced and returns it (the output: the input itself
        in place). Raises ddl.Error if it failed, or DDL_ERR_TIMEOUT after `timeout` seconds
        (default: the Fuser's timeout); a timed-out tensor stays pending."""
        if self._state == _PENDING:
            fuser = self._fuser
            limit = fuser.timeout_s if timeout is None else float(timeout)
            deadline = time.monotonic() + limit
            with fuser._finished:
                while self._state == _PENDING:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Error(ERR_TIMEOUT, fuser._stall_words(self, limit))
                    fuser._finished.wait(left)
        if self._state == _FAILED:
            raise self._error
        return self.output

    synchronize = wait


def synchronize(handle, timeout=None):
    """Horovod's spelling of handle.wait()."""
    return handle.wait(timeout)


# Fusers still running at interpreter exit are closed (briefly) so that their threads are
# not frozen inside a ddl call while Python tears down.
_live = weakref.WeakSet()


@atexit.register
def _close_live_fusers():
    for fuser in list(_live):
        try:
            fuser.close(timeout=2.0)
        except Exception:
            pass


class Fuser:
    """Fuses allreduces submitted with allreduce_async() (see the module's docstring).

    comm          the user's Communicator; the Fuser splits a private one from it, so the
                  constructor is collective over comm (every rank, same order as comm's other
                  calls). None: a communicator of its own from ddl.init() (the launcher's
                  environment).
    fusion_bytes  most bytes per fused buffer; bigger tensors go alone, without a copy;
                  0 reduces every tensor alone (still negotiated). Default: DDL_FUSION_BYTES
                  if set, else 64 MiB.
    cycle_ms      the time between negotiations. Default: DDL_CYCLE_TIME_MS, else 1 ms.
    timeout_ms    default deadline of Handle.wait(). Default: DDL_TIMEOUT_MS, else 300 s.
    max_names     distinct names remembered before the table is rebuilt.

    Every rank must create, use and close its Fuser alike; ranks may submit in any order and
    at their own pace. Submitting is thread-safe.
    """

    def __init__(self, comm=None, fusion_bytes=None, cycle_ms=None, timeout_ms=None,
                 max_names=DEFAULT_MAX_NAMES):
        self.fusion_bytes = int(fusion_bytes if fusion_bytes is not None
                                else _env_bytes("DDL_FUSION_BYTES", DEFAULT_FUSION_BYTES))
        if self.fusion_bytes < 0:
            raise ValueError(f"fusion_bytes={self.fusion_bytes}: must be >= 0")
        self.cycle_ms = float(cycle_ms if cycle_ms is not None
                              else _env_float("DDL_CYCLE_TIME_MS", DEFAULT_CYCLE_MS))
        if not self.cycle_ms > 0:
            raise ValueError(f"cycle_ms={self.cycle_ms}: must be > 0")
        if timeout_ms is None:
            timeout_ms = _env_float("DDL_TIMEOUT_MS", 300000.0)
        self.timeout_s = float(timeout_ms) / 1000.0
        self.max_names = max(1, int(max_names))

        if comm is None:
            self._comm = init()
        else:
            if not isinstance(comm, Communicator):
                raise TypeError(f"comm: expected a ddl.Communicator, got {type(comm).__name__}")
            self._comm = comm.split(0, key=comm.rank)
        self.rank, self.size = self._comm.rank, self._comm.size
        self._fns = _library.lib()

        # Shared between submitters and the background thread.
        self._lock = threading.Lock()          # submission order, names in use, state
        self._finished = threading.Condition()  # notified when handles complete
        self._inbox = collections.deque()      # submitted, not yet seen by the thread
        self._names_in_use = set()             # names submitted and not complete here
        self._submitted = 0                    # handles ever submitted (their order)
        self._unnamed_submitted = 0
        self._closing = False                  # close() called: submissions refused
        self._force = False                    # close() gave up draining
        self._error = None                     # the failure that stopped the thread
        self._wake = threading.Event()

        # The background thread's own state (identical on every rank where it says agreed).
        self._slots = []           # agreed: slot -> name
        self._slot_of = {}         # agreed: name -> slot
        self._unnamed_agreed = 0   # agreed: unnamed tensors reduced (or failed) so far
        self._unannounced = []     # named handles whose name has no slot yet
        self._pending_named = {}   # name -> handle, name has a slot, not yet reduced
        self._unnamed = collections.deque()  # unnamed handles not yet reduced, in order
        self._batch = []           # agreed ready in this cycle, being reduced
        self._buffer = None        # the fusion buffer, grown on demand
        self._doing = ("starting",)  # what the thread is calling ddl for, for errors
        self._aborted_after = None   # seconds close() waited before aborting the comm
        self.stats = {"cycles": 0, "tensors": 0, "allreduces": 0, "fused_allreduces": 0,
                      "bytes": 0, "names_exchanged": 0}

        self._thread = threading.Thread(target=self._run, name=f"ddl-fusion-r{self.rank}",
                                        daemon=True)
        _live.add(self)
        self._thread.start()

    # ---- submitting ---------------------------------------------------------------------

    def allreduce_async(self, tensor, op=Op.SUM, name=None, out=None):
        """Queues the allreduce of `tensor` (numpy array, PyTorch CPU tensor, buffer) and
        returns a Handle at once. In place unless `out` (same dtype and size) is given.
        Tensors with a `name` are matched across ranks by name, the others by submission
        order; a name may be reused once its previous tensor completed on this rank."""
        try:
            op_value = _OP_VALUES.get(op)
        except TypeError:  # unhashable
            op_value = None
        if op_value is None:
            op_value = int(_op(op))  # raises ValueError naming the op
        src, dst, out = resolve_pair(tensor, out, "allreduce_async", "tensor", "out")
        h = Handle()
        h.name = name
        h.output = out
        h._fuser = self
        h._state = _PENDING
        h._error = None
        h._src, h._dst, h._count, h._dtype, h._op = src.address, dst.address, src.count, \
            int(src.dtype), op_value
        h._nbytes = src.count * _ITEMSIZE[src.dtype]
        h._keep = (src.keep, dst.keep)
        if name is not None:
            if not isinstance(name, str) or not name or "\0" in name:
                raise ValueError(f"allreduce_async: name {name!r}: expected a non-empty "
                                 "string without NUL characters")
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._closing:
                raise Error(ERR_INVALID_USAGE, f"fusion on rank {self.rank}: this Fuser is "
                                               "closed; no more tensors can be submitted")
            if name is not None:
                if name in self._names_in_use:
                    raise ValueError(f"fusion on rank {self.rank}: a tensor named {name!r} "
                                     "is still pending; wait for it before submitting the "
                                     "name again")
                self._names_in_use.add(name)
                h._seq = -1
            else:
                h._seq = self._unnamed_submitted
                self._unnamed_submitted += 1
            h._order = self._submitted
            self._submitted += 1
            self._inbox.append(h)
        if not h._order & 31:
            # Submitting is pure Python: a burst of it never releases the GIL, and the
            # background thread, back from a ddl call, would wait for the interpreter's
            # switch interval (5 ms) each time, in every rank's cycle. Yield now and then.
            time.sleep(0)
        return h

    def allreduce(self, tensor, op=Op.SUM, name=None, out=None, timeout=None):
        """allreduce_async(...).wait(): blocking, through the negotiation (for tests and
        for mixing with fused tensors; a lone blocking call is faster on comm itself)."""
        return self.allreduce_async(tensor, op, name, out).wait(timeout)

    # ---- closing ------------------------------------------------------------------------

    @property
    def closed(self):
        return not self._thread.is_alive()

    def close(self, timeout=10.0):
        """Collective: stops the background thread once every rank has closed and every
        tensor submitted everywhere is reduced. Past `timeout` seconds the other ranks are
        told to stop (their pending handles fail naming this rank), and if the thread is
        still stuck in a call a second later, the private communicator is aborted. Pending
        handles then fail with ddl.Error. Returns None; calling it again does nothing."""
        with self._lock:
            self._closing = True
        self._wake.set()
        deadline = time.monotonic() + max(0.0, float(timeout))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._force = True  # sent in the next negotiation; its peers stop too
            self._thread.join(1.0 + 3 * self.cycle_ms / 1000.0)
        if self._thread.is_alive():
            # Stuck in a call whose peers stopped cycling (stopped, hung, or gone in a way
            # the transport has not noticed yet): abort ends the call at once.
            self._aborted_after = time.monotonic() - deadline + float(timeout)
            try:
                self._comm.abort()
            except Error:
                pass
            self._thread.join(10.0)
        if not self._thread.is_alive():
            comm, self._comm = self._comm, None
            if comm is not None:
                try:
                    comm.destroy()
                except Error:
                    pass
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else "running"
        return (f"<ddl.fusion.Fuser rank {self.rank} of {self.size}, fusion_bytes "
                f"{self.fusion_bytes}, cycle {self.cycle_ms} ms, {state}>")

    # ---- the background thread -----------------------------------------------------------

    def _run(self):
        """Runs cycles until every rank has closed, a rank forces a stop, or ddl fails."""
        error = None
        try:
            next_tick = time.monotonic()
            while True:
                next_tick += self.cycle_ms / 1000.0
                left = next_tick - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                else:
                    next_tick = time.monotonic()  # late (a long cycle): do not catch up
                if not self._cycle():
                    break
        except Error as e:
            doing = self._doing_words()
            if self._aborted_after is not None:
                doing += (f"; close() aborted the Fuser's communicator after waiting "
                          f"{self._aborted_after:.1f} s for the other ranks, which stopped "
                          "taking part in the cycles (a frozen or hung process?)")
            error = Error(e.code, f"fusion on rank {self.rank} ({doing}): {e.message}")
        except BaseException as e:  # a bug here must not leave waiters hanging
            error = Error(ERR_INTERNAL, f"fusion on rank {self.rank}: background thread "
                                        f"failed: {e!r}")
        if error is None:
            error = Error(ERR_INVALID_USAGE, f"fusion on rank {self.rank}: the Fuser was "
                                             "closed before this tensor was reduced")
        self._stop(error)

    def _stop(self, error):
        """Fails everything still pending with `error`; later submissions raise it."""
        with self._lock:
            if self._error is None:
                self._error = error
            self._closing = True
            pending = list(self._inbox) + self._unannounced + \
                list(self._pending_named.values()) + list(self._unnamed) + \
                [h for h in self._batch if h._state == _PENDING]
            self._inbox.clear()
        self._unannounced, self._pending_named, self._batch = [], {}, []
        self._unnamed.clear()
        self._complete(pending, error)

    def _allreduce(self, array, op):
        """One blocking allreduce of a numpy array on the private communicator, in place."""
        self._comm.allreduce(array, op=op)

    def _doing_words(self):
        """self._doing in words (formatted only when an error needs them)."""
        what = self._doing
        if what[0] == "negotiation":
            return f"negotiation of cycle {what[1]}"
        if what[0] == "names":
            return f"exchange of new tensor names in cycle {what[1]}"
        if what[0] == "layout":
            return f"check of the layout of {what[1]} tensors ready everywhere"
        if what[0] == "reduce":
            chunk = what[1]
            names = ", ".join(h.label for h in chunk[:3]) + (", ..." if len(chunk) > 3 else "")
            head = chunk[0]
            kind = f"{DataType(head._dtype).name.lower()} {Op(head._op).name.lower()}"
            return (f"allreduce of {len(chunk)} tensor(s), {kind}: {names}" if len(chunk) > 1
                    else f"allreduce of tensor {names} alone")
        return what[0]

    def _take_inbox(self):
        """Moves new submissions to the thread's tables; returns how many."""
        n = 0
        inbox = self._inbox
        while inbox:
            h = inbox.popleft()
            n += 1
            if h.name is None:
                self._unnamed.append(h)
            elif h.name in self._slot_of:
                self._pending_named[h.name] = h
            else:
                self._unannounced.append(h)
        return n

    def _cycle(self):
        """One negotiation and the allreduces it agrees on. False: stop the thread."""
        import numpy as np  # a Fuser needs numpy; `import ddl` alone does not
        self._take_inbox()
        self.stats["cycles"] += 1

        names = b"\0".join(h.name.encode() for h in self._unannounced)
        head = np.zeros(_HEAD + len(self._slots), dtype=np.int32)
        head[_H_ANNOUNCE] = -len(names)
        head[_H_FORCE] = -(self.rank + 1) if self._force else 0
        idle = not (self._unannounced or self._pending_named or self._unnamed or self._inbox)
        head[_H_DRAINED] = 1 if self._closing and idle else 0
        head[_H_UNNAMED] = min(len(self._unnamed), _INT32_MAX)
        if self._pending_named:
            slot_of = self._slot_of
            head[[_HEAD + slot_of[n] for n in self._pending_named]] = 1
        self._doing = ("negotiation", self.stats["cycles"])
        self._allreduce(head, Op.MIN)

        # Ready everywhere: named ones by slot order, then unnamed ones by submission order.
        ready = [self._pending_named.pop(self._slots[s])
                 for s in np.flatnonzero(head[_HEAD:]).tolist()]
        unnamed_ready = int(head[_H_UNNAMED])
        ready += [self._unnamed.popleft() for _ in range(unnamed_ready)]
        self._unnamed_agreed += unnamed_ready

        if head[_H_ANNOUNCE] < 0:
            self._exchange_names(names, int(-head[_H_ANNOUNCE]))
        if ready:
            self._batch = ready
            self._reduce(ready)
            self._batch = []
        if head[_H_FORCE] < 0:
            who = int(-head[_H_FORCE]) - 1
            if who == self.rank:
                words = "close() timed out before this tensor was submitted by every rank"
            else:
                words = (f"rank {who} closed its Fuser (its close() timed out) before this "
                         "tensor was submitted by every rank")
            self._stop(Error(ERR_INVALID_USAGE, f"fusion on rank {self.rank}: {words}"))
            return False
        return not head[_H_DRAINED]

    def _exchange_names(self, mine, longest):
        """Every rank's new names (an allgather of their bytes, padded to the longest) get
        slots in rank order, then each rank's submission order: the same table everywhere."""
        import numpy as np
        send = np.zeros(longest, dtype=np.uint8)
        send[:len(mine)] = np.frombuffer(mine, dtype=np.uint8)
        recv = np.empty(longest * self.size, dtype=np.uint8)
        self._doing = ("names", self.stats["cycles"])
        self._comm.allgather(send, recv)
        new = []
        seen = set()
        for r in range(self.size):
            blob = recv[r * longest:(r + 1) * longest].tobytes()
            for raw in blob.split(b"\0"):
                if raw and raw not in seen:  # padding gives empty pieces
                    seen.add(raw)
                    name = raw.decode()
                    if name not in self._slot_of:
                        new.append(name)
        self.stats["names_exchanged"] += len(new)
        if self._slots and len(self._slots) + len(new) > self.max_names:
            # Table full: start again. Names in use are announced again next cycle (an empty
            # table takes any number of names, so this cannot repeat forever).
            self._slots, self._slot_of = [], {}
            self._unannounced += self._pending_named.values()
            self._unannounced.sort(key=lambda h: h._order)
            self._pending_named = {}
            return
        for name in new:
            self._slot_of[name] = len(self._slots)
            self._slots.append(name)
        for h in self._unannounced:
            self._pending_named[h.name] = h
        self._unannounced = []

    def _reduce(self, ready):
        """Checks that every rank's batch has the same layout, then reduces it: per (dtype,
        op), packed into buffers of at most fusion_bytes."""
        import numpy as np
        layout = np.array([(h._dtype, h._op, h._count) for h in ready], dtype=np.int64)
        crc = zlib.crc32(layout.tobytes())
        check = np.array([crc, -crc], dtype=np.int64)
        self._doing = ("layout", len(ready))
        self._allreduce(check, Op.MIN)
        if check[0] != -check[1]:
            ready = self._drop_mismatched(ready, layout)

        groups = {}
        for h in ready:
            groups.setdefault((h._dtype, h._op), []).append(h)
        limit = self.fusion_bytes
        for (dtype, op), members in sorted(groups.items()):
            chunk, size = [], 0
            for h in members:
                if h._nbytes > limit:
                    self._reduce_chunk([h], h._nbytes, dtype, op)
                    continue
                if size + h._nbytes > limit:
                    self._reduce_chunk(chunk, size, dtype, op)
                    chunk, size = [], 0
                chunk.append(h)
                size += h._nbytes
            if chunk:
                self._reduce_chunk(chunk, size, dtype, op)

    def _reduce_chunk(self, chunk, nbytes, dtype, op):
        """One allreduce: a lone tensor directly (no copy), several through the buffer."""
        fns = self._fns
        handle = self._comm._live()
        stats = self.stats
        stats["allreduces"] += 1
        stats["tensors"] += len(chunk)
        stats["bytes"] += nbytes
        self._doing = ("reduce", chunk)
        if len(chunk) == 1:
            h = chunk[0]
            rc = fns.ddl_allreduce(h._src, h._dst, h._count, dtype, op, handle)
        else:
            stats["fused_allreduces"] += 1
            if self._buffer is None or len(self._buffer) < nbytes:
                self._buffer = (ctypes.c_char * max(nbytes, 1 << 20))()
            base = ctypes.addressof(self._buffer)
            move = ctypes.memmove
            offset = 0
            for h in chunk:
                move(base + offset, h._src, h._nbytes)
                offset += h._nbytes
            count = nbytes // _ITEMSIZE[DataType(dtype)]
            rc = fns.ddl_allreduce(base, base, count, dtype, op, handle)
            if rc == 0:
                offset = 0
                for h in chunk:
                    move(h._dst, base + offset, h._nbytes)
                    offset += h._nbytes
        if rc:
            message = fns.ddl_comm_last_error(handle)
            # The communicator is failed now: the caller stops the thread and every pending
            # handle, these included, gets this error.
            raise Error(rc, message.decode("utf-8", "replace") if message else "allreduce "
                        "of a fusion buffer failed")
        self._complete(chunk, None)

    def _drop_mismatched(self, ready, layout):
        """Some rank's batch differs: every rank gathers every layout, fails the tensors
        that differ (naming what each rank submitted) and keeps the others."""
        import numpy as np
        every = np.empty(self.size * layout.size, dtype=np.int64)
        self._doing = ("layout", len(ready))
        self._comm.allgather(layout.ravel(), every)
        every = every.reshape(self.size, len(ready), 3)
        differs = (every != every[0]).any(axis=(0, 2))
        keep, bad = [], []
        for i, h in enumerate(ready):
            if not differs[i]:
                keep.append(h)
                continue
            what = ", ".join(f"rank {r}: {_describe(*map(int, every[r, i]))}"
                             for r in range(self.size))
            bad.append((h, Error(ERR_INVALID_USAGE, f"fusion on rank {self.rank}: tensor "
                                 f"{h.label} was submitted differently by the ranks "
                                 f"({what})")))
        for h, e in bad:
            self._complete([h], e)
        return keep

    def _complete(self, handles, error):
        """Marks handles done (or failed with `error`) and wakes their waiters."""
        if not handles:
            return
        state = _DONE if error is None else _FAILED
        names = self._names_in_use
        with self._lock:
            for h in handles:
                h._error = error
                h._keep = None
                h._state = state
                if h.name is not None:
                    names.discard(h.name)
        with self._finished:
            self._finished.notify_all()

    def _stall_words(self, handle, waited):
        """The words of a wait that timed out."""
        if self._error is not None:
            return str(self._error)
        return (f"fusion on rank {self.rank}: tensor {handle.label} "
                f"({_describe(handle._dtype, handle._op, handle._count)}) not reduced after "
                f"{waited:g} s: not every rank has submitted it yet "
                f"({self.stats['cycles']} negotiation cycles ran here)")

"""What ddl.Communicator does after a failure (ddl.h, "Fault tolerance"): revoke, agree,
failed_ranks, shrink and grow, over libddl's ddl_comm_* calls of the same names."""

import ctypes

from . import _core  # Communicator's module, which imports this one: names used at call time


class ElasticMixin:
    """Communicator's fault-tolerance methods (self is a ddl.Communicator)."""

    def _elastic(self, name):
        fn = getattr(self._fns, name, None)
        if fn is None:
            raise _core.LibraryTooOldError(name)
        return fn

    def revoke(self):
        """ddl_comm_revoke: every later call on this communicator fails, on every rank, so
        that nobody waits out a deadline for ranks that went to shrink() instead."""
        handle = self._live()
        rc = self._elastic("ddl_comm_revoke")(handle)
        if rc:
            _core._raise_for(rc, handle)

    def agree(self, value, op="and"):
        """ddl_comm_agree: the bitwise AND (op="and") or OR ("or") of the 64-bit values of
        the live ranks, the same on every one of them even when ranks die meanwhile. The
        ranks found failed are in failed_ranks() afterwards (then only shrink() goes on)."""
        handle = self._live()
        ops = {"and": 0, "or": 1}
        if op not in ops:
            raise ValueError(f"agree: op {op!r} is not 'and' or 'or'")
        v = ctypes.c_uint64(int(value) & (2**64 - 1))
        rc = self._elastic("ddl_comm_agree")(handle, ops[op], ctypes.byref(v))
        if rc:
            _core._raise_for(rc, handle)
        return v.value

    def failed_ranks(self):
        """The ranks of this communicator that the last agree() or shrink() agreed had
        failed, ascending."""
        handle = self._live()
        fn = self._elastic("ddl_comm_failed_ranks")
        count = ctypes.c_int()
        rc = fn(handle, None, 0, ctypes.byref(count))
        if rc:
            _core._raise_for(rc, handle)
        ranks = (ctypes.c_int * max(1, count.value))()
        rc = fn(handle, ranks, count.value, ctypes.byref(count))
        if rc:
            _core._raise_for(rc, handle)
        return list(ranks[:count.value])

    def shrink(self, exclude=()):
        """ddl_comm_shrink: a new Communicator of the live ranks, in their order here (ranks
        in exclude are left out on purpose and must not call). Collective over the live
        ranks; this one is revoked and can only be destroyed. Raises Error on a rank the
        others declared failed, and on the minority side of a network partition."""
        handle = self._live()
        exclude = [int(r) for r in exclude]
        array = (ctypes.c_int * max(1, len(exclude)))(*exclude)
        new = ctypes.c_void_p()
        rc = self._elastic("ddl_comm_shrink")(handle, array if exclude else None, len(exclude),
                                             ctypes.byref(new))
        if rc:
            _core._raise_for(rc, handle)
        return type(self)._from_handle(new)

    def grow(self, size, root_addr):
        """ddl_comm_grow: a Communicator of size ranks, this one's ranks first (same ranks),
        then new processes that join with Communicator(size, rank, root_addr, job_token)
        (the job's token). Rank 0 here serves the rendezvous at root_addr ("host:port")."""
        handle = self._live()
        new = ctypes.c_void_p()
        rc = self._elastic("ddl_comm_grow")(handle, int(size), str(root_addr).encode(),
                                           ctypes.byref(new))
        if rc:
            _core._raise_for(rc, handle)
        return type(self)._from_handle(new)

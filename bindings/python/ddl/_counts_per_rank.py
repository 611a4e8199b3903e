"""ddl.Communicator's collectives with a count per rank (ddl.h's v forms): alltoallv,
allgatherv, reduce_scatterv, gatherv and scatterv, over their blocking and nonblocking C calls."""

import ctypes

from . import _core  # Communicator's module, which imports this one: names used at call time
from ._buffers import _ITEMSIZE, as_buffer, check_same_dtype


class CountsPerRankMixin:
    """Communicator's v forms (self is a ddl.Communicator)."""

    def _counts(self, values, what, default=None):
        """A C array of `size` counts or displacements (None: `default`'s). The arrays of
        recent lists are kept (ddl only reads them, and copies them at the call): a loop that
        repeats its counts builds them once."""
        if values is None:
            values = default
        key = tuple(int(v) for v in values)
        cache = self.__dict__.setdefault("_count_arrays", {})
        array = cache.get(key)
        if array is not None:
            return array
        if len(key) != self.size:
            raise ValueError(f"{what}: {len(key)} entries, not one per rank ({self.size})")
        if any(v < 0 for v in key):
            raise ValueError(f"{what}: negative entries {list(key)}")
        if len(cache) >= 64:
            cache.clear()
        array = cache[key] = (ctypes.c_size_t * self.size)(*key)
        return array

    @staticmethod
    def _packed(counts):
        """Displacements of blocks laid out one after another."""
        displs, at = [], 0
        for c in counts:
            displs.append(at)
            at += int(c)
        return displs

    def alltoallv(self, send, send_counts, recv, recv_counts, send_displs=None,
                  recv_displs=None, async_=False):
        """A count per peer (torch's split sizes): send_counts[j] elements go to rank j,
        recv_counts[j] come from rank j; displacements default to the blocks packed in rank
        order. recv is send for in place (then send_counts must equal recv_counts). Returns
        recv, or a Request."""
        handle = self._live()
        in_place = recv is send
        s = as_buffer(send, "alltoallv: send", writable=in_place)
        r = s if in_place else as_buffer(recv, "alltoallv: recv", writable=True)
        check_same_dtype(s, "send", r, "alltoallv: recv")
        sc = self._counts(send_counts, "alltoallv: send_counts")
        rc_ = self._counts(recv_counts, "alltoallv: recv_counts")
        sd = self._counts(send_displs, "alltoallv: send_displs", self._packed(sc))
        rd = self._counts(recv_displs, "alltoallv: recv_displs", self._packed(rc_))
        for name, buf, counts, displs in (("send", s, sc, sd), ("recv", r, rc_, rd)):
            end = max((d + c for c, d in zip(counts, displs) if c), default=0)
            if end > buf.count:
                raise ValueError(f"alltoallv: {name} has {buf.count} elements; its blocks "
                                 f"reach element {end}")
        arrays = (sc, sd, rc_, rd)
        return self._issue("alltoallv", async_, (s.keep, r.keep, arrays), recv,
                           self._fns.ddl_alltoallv, self._fns.ddl_ialltoallv,
                           (s.address, sc, sd, r.address, rc_, rd, int(s.dtype), handle))

    def allgatherv(self, send, recv, recv_counts, displs=None, async_=False):
        """As allgather with a count per rank: recv gets recv_counts[i] elements of rank i at
        displs[i] (default: packed in rank order). In place when send is None (this rank's
        block already at its place in recv). Returns recv, or a Request when async_."""
        handle = self._live()
        if self._fns.ddl_allgatherv is None:
            raise _core.LibraryTooOldError("ddl_allgatherv")
        r = as_buffer(recv, "allgatherv: recv", writable=True)
        counts = self._counts(recv_counts, "allgatherv: recv_counts")
        where = self._counts(displs, "allgatherv: displs", self._packed(counts))
        if send is None:
            address = r.address + where[self.rank] * _ITEMSIZE[r.dtype]
            count = counts[self.rank]
            keep = (r.keep, counts, where)
        else:
            s = as_buffer(send, "allgatherv: send", writable=False)
            check_same_dtype(s, "send", r, "allgatherv: recv")
            address, count, keep = s.address, s.count, (s.keep, r.keep, counts, where)
        return self._issue("allgatherv", async_, keep, recv, self._fns.ddl_allgatherv,
                           self._fns.ddl_iallgatherv,
                           (address, count, r.address, counts, where, int(r.dtype), handle))

    def reduce_scatterv(self, send, recv, recv_counts, op="sum", async_=False):
        """As reduce_scatter with a count per rank: send holds sum(recv_counts) elements;
        block j (recv_counts[j] elements, packed in rank order) of the reduction lands in rank
        j's recv. Returns recv, or a Request when async_."""
        handle = self._live()
        if self._fns.ddl_reduce_scatterv is None:
            raise _core.LibraryTooOldError("ddl_reduce_scatterv")
        op = _core._op(op)
        s = as_buffer(send, "reduce_scatterv: send", writable=False)
        r = as_buffer(recv, "reduce_scatterv: recv", writable=True)
        check_same_dtype(s, "send", r, "reduce_scatterv: recv")
        counts = self._counts(recv_counts, "reduce_scatterv: recv_counts")
        return self._issue("reduce_scatterv", async_, (s.keep, r.keep, counts), recv,
                           self._fns.ddl_reduce_scatterv, self._fns.ddl_ireduce_scatterv,
                           (s.address, r.address, counts, int(s.dtype), int(op), handle))

    def gatherv(self, send, recv=None, recv_counts=None, displs=None, root=0, async_=False):
        """As gather with a count per rank: the root's recv gets recv_counts[i] elements of
        rank i at displs[i] (default: packed in rank order). Returns recv, or a Request."""
        handle = self._live()
        root = self._root(root, "gatherv")
        s = as_buffer(send, "gatherv: send", writable=False)
        r, counts, where = None, None, None
        if self.rank == root:
            if recv is None or recv_counts is None:
                raise ValueError("gatherv: the root needs recv and recv_counts")
            r = as_buffer(recv, "gatherv: recv", writable=True)
            check_same_dtype(s, "send", r, "gatherv: recv")
            counts = self._counts(recv_counts, "gatherv: recv_counts")
            where = self._counts(displs, "gatherv: displs", self._packed(counts))
        return self._issue("gatherv", async_, (s.keep, r and r.keep, counts, where), recv,
                           self._fns.ddl_gatherv, self._fns.ddl_igatherv,
                           (s.address, s.count, r.address if r else None, counts, where,
                            int(s.dtype), root, handle))

    def scatterv(self, send, send_counts, recv, displs=None, root=0, async_=False):
        """As scatter with a count per rank: send_counts[i] elements at displs[i] of the
        root's send go to rank i (send, send_counts and displs are read on the root only).
        Returns recv, or a Request."""
        handle = self._live()
        root = self._root(root, "scatterv")
        r = as_buffer(recv, "scatterv: recv", writable=True)
        s, counts, where = None, None, None
        if self.rank == root:
            s = as_buffer(send, "scatterv: send", writable=False)
            check_same_dtype(s, "send", r, "scatterv: recv")
            counts = self._counts(send_counts, "scatterv: send_counts")
            where = self._counts(displs, "scatterv: displs", self._packed(counts))
        return self._issue("scatterv", async_, (s and s.keep, r.keep, counts, where), recv,
                           self._fns.ddl_scatterv, self._fns.ddl_iscatterv,
                           (s.address if s else None, counts, where, r.address, r.count,
                            int(r.dtype), root, handle))

"""ddl.Communicator's point-to-point calls (ddl.h, "Point to point"): send and recv, with
tags and receives from any source, over ddl_send(_tag)/ddl_recv(_tag) and their nonblocking
forms."""

import ctypes

from . import _core  # Communicator's module, which imports this one: names used at call time
from ._buffers import as_buffer

ANY_SOURCE = -1  # recv's peer: a message from any rank (DDL_ANY_SOURCE)
TAG_UB = (1 << 22) - 1  # the largest message tag (DDL_TAG_UB)


class PointToPointMixin:
    """Communicator's send and receive methods (self is a ddl.Communicator)."""

    def _peer(self, peer, what):
        peer = int(peer)
        if not 0 <= peer < self.size or peer == self.rank:
            raise ValueError(f"{what}: peer {peer} is not another rank of this communicator "
                             f"(0..{self.size - 1}, not {self.rank})")
        return peer

    def _tag(self, tag, what):
        tag = int(tag)
        if not 0 <= tag <= TAG_UB:
            raise ValueError(f"{what}: tag {tag} is not a message tag (0..{TAG_UB})")
        if tag and self._fns.ddl_send_tag is None:
            raise _core.LibraryTooOldError("ddl_send_tag")
        return tag

    def send(self, buf, peer, async_=False, tag=0):
        """Sends buf to rank peer, which receives it with recv (same count and dtype).
        Messages between two ranks with one tag are matched in order (tags 0..TAG_UB, each
        its own order); exchanges go in `with ddl.group()` or use async_. Returns None, or
        a Request."""
        handle = self._live()
        peer = self._peer(peer, "send")
        tag = self._tag(tag, "send")
        b = as_buffer(buf, "send: buf", writable=False)
        args = (b.address, b.count, int(b.dtype), peer)
        if tag == 0:
            return self._issue("send", async_, b.keep, None, self._fns.ddl_send,
                               self._fns.ddl_isend, args + (handle,))
        return self._issue("send_tag", async_, b.keep, None, self._fns.ddl_send_tag,
                           self._fns.ddl_isend_tag, args + (tag, handle))

    def recv(self, buf, peer, async_=False, tag=0):
        """Receives into buf what rank peer sends with tag; peer ANY_SOURCE takes the first
        such message from any rank (recv_any, or the Request's source, tells whose).
        Returns buf, or a Request."""
        return self._receive(buf, peer, async_, tag)[0]

    def recv_any(self, buf, tag=0, async_=False):
        """Receives into buf the first message with tag from any rank. Returns (buf, the
        sender's rank), or a Request whose source is the sender once it has finished."""
        result, source = self._receive(buf, ANY_SOURCE, async_, tag)
        return result if async_ else (result, source.value)

    def _receive(self, buf, peer, async_, tag):
        handle = self._live()
        if peer != ANY_SOURCE:
            peer = self._peer(peer, "recv")
        tag = self._tag(tag, "recv")
        b = as_buffer(buf, "recv: buf", writable=True)
        args = (b.address, b.count, int(b.dtype), peer)
        source = ctypes.c_int(peer)
        if tag == 0 and peer != ANY_SOURCE:
            return self._issue("recv", async_, b.keep, buf, self._fns.ddl_recv,
                               self._fns.ddl_irecv, args + (handle,), source=source), source
        if self._fns.ddl_recv_tag is None:
            raise _core.LibraryTooOldError("ddl_recv_tag")
        return self._issue("recv_tag", async_, (b.keep, source), buf, self._fns.ddl_recv_tag,
                           self._fns.ddl_irecv_tag,
                           args + (tag, handle, ctypes.byref(source)), handle_at=-2,
                           source=source), source

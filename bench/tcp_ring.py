#!/usr/bin/env python3
"""What plain TCP achieves on the emulated links: the measured bound beside the nominal one.

Started once per emulated host by `ddlrun -H h0:1,h1:1,... --launch-agent AGENT -- python3
bench/tcp_ring.py --bytes B --rails R` (ddlrun gives each process DDL_RANK and
DDL_WORLD_SIZE; host i is rank i). On every rail k, host i sends B bytes to host i+1 and
receives B bytes from host i-1, all streams at once: the traffic pattern of a ring
allreduce, whose hosts each send and receive 2(h-1)/h x N bytes, with nothing but the kernel's
TCP in the way. Each host prints one line, `tcp_ring host I seconds S`, S from the moment
all its streams are connected to the last byte sent and received.

Why measure it: the nominal bound counts the link's rate as payload, but every 1448-byte TCP
segment travels in a 1514-byte frame that tc tbf charges whole, so no TCP stream reaches more
than ~95.6% of it (and the shared cores take their share). The bench reports both.
"""
import argparse
import os
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def address(host, rail):
    """emuhosts' plan: host hi has 10.<100+k>.0.<i+1> on rail k."""
    return "10.%d.0.%d" % (100 + rail, host + 1)


def send_all(sock, total, errors):
    try:
        block = memoryview(bytearray(CHUNK))
        left = total
        while left:
            n = sock.send(block[:min(left, CHUNK)])
            left -= n
        sock.shutdown(socket.SHUT_WR)
    except OSError as err:
        errors.append("sending: %s" % err)


def receive_all(sock, total, errors):
    try:
        block = bytearray(CHUNK)
        left = total
        while left:
            n = sock.recv_into(block, min(left, CHUNK))
            if n == 0:
                errors.append("receiving: the sender closed after %d of %d bytes" % (total - left, total))
                return
            left -= n
    except OSError as err:
        errors.append("receiving: %s" % err)


def connect(host, port, deadline):
    """Dials until the peer listens (hosts start at slightly different moments)."""
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.01)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bytes", type=int, required=True, help="bytes each host sends (and receives) per rail")
    p.add_argument("--rails", type=int, default=1, help="NICs per host, one stream pair each")
    p.add_argument("--port", type=int, default=47311, help="first port (rail k listens on port + k)")
    p.add_argument("--timeout", type=float, default=120, help="seconds before giving up")
    args = p.parse_args(argv)
    me, hosts = int(os.environ["DDL_RANK"]), int(os.environ["DDL_WORLD_SIZE"])
    if hosts < 2:
        raise SystemExit("tcp_ring: needs 2 or more hosts, one process each")
    nxt = (me + 1) % hosts
    deadline = time.time() + args.timeout
    listeners = []
    for k in range(args.rails):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address(me, k), args.port + k))
        s.listen(1)
        s.settimeout(args.timeout)
        listeners.append(s)
    outgoing = [connect(address(nxt, k), args.port + k, deadline) for k in range(args.rails)]
    incoming = [s.accept()[0] for s in listeners]
    for s in outgoing + incoming:
        s.settimeout(args.timeout)
    errors = []
    threads = [threading.Thread(target=send_all, args=(s, args.bytes, errors)) for s in outgoing]
    threads += [threading.Thread(target=receive_all, args=(s, args.bytes, errors)) for s in incoming]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    for s in outgoing + incoming + listeners:
        s.close()
    if errors:
        raise SystemExit("tcp_ring host %d: %s" % (me, "; ".join(errors)))
    print("tcp_ring host %d seconds %.6f" % (me, seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

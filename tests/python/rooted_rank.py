"""One rank of the Python tests of alltoall(v), reduce, gather(v), scatter(v), allgatherv, scan,
exscan and send/recv: `python rooted_rank.py SCENARIO`, started by conftest.run_ranks. Every rank computes what
every other rank sends, so each checks its own results exactly (float64 references)."""

import sys

import numpy as np

import ddl


def data(rank, n, offset=0):
    """What rank `rank` contributes: distinct per rank and element."""
    return np.arange(n, dtype=np.float64) + 1000.0 * rank + offset


def v_count(src, dst):
    """What rank src sends rank dst in the uneven alltoall: zeros included."""
    return (3 * src + 2 * dst) % 4


def check_alltoall(comm):
    r, n = comm.rank, comm.size
    send = data(r, 5 * n)
    recv = comm.alltoall(send, np.empty_like(send))
    for j in range(n):
        np.testing.assert_array_equal(recv[5 * j:5 * j + 5], data(j, 5 * n)[5 * r:5 * r + 5])
    inplace = data(r, 5 * n)
    comm.alltoall(inplace)
    np.testing.assert_array_equal(inplace, recv)
    req = comm.alltoall(send, np.empty_like(send), async_=True)
    req.wait()


def check_alltoallv(comm):
    r, n = comm.rank, comm.size
    send_counts = [v_count(r, j) for j in range(n)]
    recv_counts = [v_count(j, r) for j in range(n)]
    send = np.concatenate([data(r, c, 100 * j) for j, c in enumerate(send_counts)] + [[]])
    recv = np.full(sum(recv_counts), -1.0)
    comm.alltoallv(send, send_counts, recv, recv_counts)
    at = 0
    for j, c in enumerate(recv_counts):
        np.testing.assert_array_equal(recv[at:at + c], data(j, c, 100 * r))
        at += c
    # Explicit displacements with gaps, nonblocking, int32.
    displs = [sum(recv_counts[:j]) + 2 * j for j in range(n)]
    gapped = np.full(sum(recv_counts) + 2 * n, -7, dtype=np.int32)
    req = comm.alltoallv(send.astype(np.int32), send_counts, gapped, recv_counts,
                         recv_displs=displs, async_=True)
    req.wait()
    for j, c in enumerate(recv_counts):
        np.testing.assert_array_equal(gapped[displs[j]:displs[j] + c],
                                      data(j, c, 100 * r).astype(np.int32))


def check_reduce(comm):
    r, n = comm.rank, comm.size
    for root in range(n):
        for op, fold in (("sum", np.sum), ("max", np.max), ("min", np.min)):
            send = data(r, 7) * (1 if op == "sum" else (-1) ** r)
            out = np.zeros(7) if r == root else None
            got = comm.reduce(send, out, root=root, op=op)
            if r == root:
                want = fold(np.stack([data(k, 7) * (1 if op == "sum" else (-1) ** k)
                                      for k in range(n)]), axis=0)
                np.testing.assert_array_equal(got, want)
    x = data(r, 3)
    comm.reduce(x, root=0)  # in place on the root
    if r == 0:
        np.testing.assert_array_equal(x, sum(data(k, 3) for k in range(n)))


def check_scans(comm):
    r, n = comm.rank, comm.size
    prefix = np.stack([data(k, 9) for k in range(n)])
    got = comm.scan(data(r, 9), np.empty(9))
    np.testing.assert_array_equal(got, prefix[:r + 1].sum(axis=0))
    signed = data(r, 9) * (-1) ** r
    comm.scan(signed, op="max", async_=True).wait()  # in place
    np.testing.assert_array_equal(signed, (prefix[:r + 1] * [[(-1) ** k] for k in range(r + 1)])
                                  .max(axis=0))
    out = np.full(9, -7.0)
    comm.exscan(data(r, 9), out)
    want = prefix[:r].sum(axis=0) if r > 0 else np.full(9, -7.0)  # rank 0's: left as it was
    np.testing.assert_array_equal(out, want)
    try:
        comm.scan(data(r, 2), op="avg")
        raise AssertionError("scan took AVG")
    except ddl.Error as e:
        assert "DDL_AVG is not an op of scan" in str(e), e


def check_gather_scatter(comm):
    r, n = comm.rank, comm.size
    for root in range(n):
        out = np.empty(4 * n) if r == root else None
        comm.gather(data(r, 4), out, root=root)
        if r == root:
            np.testing.assert_array_equal(out, np.concatenate([data(k, 4) for k in range(n)]))
        got = comm.scatter(data(root, 4 * n) if r == root else None, np.empty(4), root=root)
        np.testing.assert_array_equal(got, data(root, 4 * n)[4 * r:4 * r + 4])
        counts = [k % 3 for k in range(n)]
        out = np.full(sum(counts), -1.0) if r == root else None
        comm.gatherv(data(r, counts[r]), out, counts, root=root)
        if r == root:
            np.testing.assert_array_equal(
                out, np.concatenate([data(k, counts[k]) for k in range(n)] + [[]]))
        whole = data(root, sum(counts))
        got = comm.scatterv(whole if r == root else None, counts, np.empty(counts[r]), root=root)
        np.testing.assert_array_equal(got, whole[sum(counts[:r]):sum(counts[:r + 1])])
    # Allgatherv: packed, with gaps (displs), in place, nonblocking.
    counts = [(2 * k + 1) % 4 for k in range(n)]
    packed = np.concatenate([data(k, counts[k]) for k in range(n)] + [[]])
    got = comm.allgatherv(data(r, counts[r]), np.full(sum(counts), -1.0), counts)
    np.testing.assert_array_equal(got, packed)
    displs = [sum(counts[:k]) + k for k in range(n)]  # one element apart
    spaced = np.full(sum(counts) + n, -1.0)
    spaced[displs[r]:displs[r] + counts[r]] = data(r, counts[r])
    comm.allgatherv(None, spaced, counts, displs)
    for k in range(n):
        np.testing.assert_array_equal(spaced[displs[k]:displs[k] + counts[k]], data(k, counts[k]))
    out = np.full(sum(counts), -1.0)
    comm.allgatherv(data(r, counts[r]), out, counts, async_=True).wait()
    np.testing.assert_array_equal(out, packed)
    # Reduce_scatterv: block r of the sum of every rank's vector.
    whole = sum(data(k, sum(counts)) for k in range(n))
    mine = comm.reduce_scatterv(data(r, sum(counts)), np.empty(counts[r]), counts)
    np.testing.assert_array_equal(mine, whole[sum(counts[:r]):sum(counts[:r + 1])])
    comm.reduce_scatterv(data(r, sum(counts)), mine, counts, op="max", async_=True).wait()
    np.testing.assert_array_equal(mine, data(n - 1, sum(counts))[sum(counts[:r]):
                                                                 sum(counts[:r + 1])])


def check_send_recv(comm):
    r, n = comm.rank, comm.size
    if n == 1:
        return
    to, frm = (r + 1) % n, (r - 1) % n
    got = np.empty(100000)
    with ddl.group():  # a ring exchange: cannot deadlock
        comm.send(data(r, 100000), to)
        comm.recv(got, frm)
    np.testing.assert_array_equal(got, data(frm, 100000))
    got = np.empty(10, dtype=np.float32)
    reqs = [comm.recv(got, frm, async_=True), comm.send(data(r, 10).astype(np.float32), to,
                                                        async_=True)]
    for q in reqs:
        q.wait()
    np.testing.assert_array_equal(got, data(frm, 10).astype(np.float32))


def check_tags_and_any_source(comm):
    r, n = comm.rank, comm.size
    if n == 1:
        return
    to, frm = (r + 1) % n, (r - 1) % n
    # Two tags to the next rank, received in the other order.
    reqs = [comm.send(data(r, 50), to, async_=True, tag=5),
            comm.send(data(r, 60), to, async_=True, tag=3)]
    sixty, fifty = np.empty(60), np.empty(50)
    comm.recv(sixty, frm, tag=3)
    comm.recv(fifty, frm, tag=5)
    for q in reqs:
        q.wait()
    np.testing.assert_array_equal(sixty, data(frm, 60))
    np.testing.assert_array_equal(fifty, data(frm, 50))
    # Every other rank sends rank 0 one message; rank 0 takes them from any source.
    if r != 0:
        comm.send(np.full(3, float(r)), 0, tag=ddl.TAG_UB)
    else:
        seen = []
        for k in range(n - 1):
            buf = np.empty(3)
            if k % 2:
                q = comm.recv_any(buf, tag=ddl.TAG_UB, async_=True)
                q.wait()
                src = q.source
            else:
                buf, src = comm.recv_any(buf, tag=ddl.TAG_UB)
            np.testing.assert_array_equal(buf, np.full(3, float(src)))
            seen.append(src)
        assert sorted(seen) == list(range(1, n)), seen
    comm.barrier()


def check_bad_arguments(comm):
    r, n = comm.rank, comm.size
    for call in (lambda: comm.reduce(data(r, 2), root=n),
                 lambda: comm.send(data(r, 2), r),
                 lambda: comm.send(data(r, 2), (r + 1) % n, tag=-1),
                 lambda: comm.recv(np.empty(2), (r + 1) % n, tag=ddl.TAG_UB + 1),
                 lambda: comm.alltoallv(data(r, 2), [1] * (n + 1), np.empty(2), [1] * n)):
        try:
            call()
        except ValueError:
            continue
        raise AssertionError("a bad argument was accepted")
    # Refused by the library itself (the own block's counts differ): ddl.Error, comm intact.
    counts = [0] * n
    counts[r] = 1
    try:
        comm.alltoallv(data(r, 1), counts, np.empty(2), [0 if j != r else 2 for j in range(n)])
        raise AssertionError("mismatched own-block counts were accepted")
    except ddl.Error as e:
        assert "to itself" in str(e), e
    comm.barrier()


SCENARIOS = {"alltoall": check_alltoall, "alltoallv": check_alltoallv, "reduce": check_reduce,
             "scans": check_scans,
             "gather_scatter": check_gather_scatter, "send_recv": check_send_recv,
             "tags_and_any_source": check_tags_and_any_source,
             "bad_arguments": check_bad_arguments}


def main():
    comm = ddl.init()
    names = list(SCENARIOS) if sys.argv[1] == "all" else sys.argv[1:]
    for name in names:
        SCENARIOS[name](comm)
    comm.destroy()
    print(f"ok rank {comm.rank}")


if __name__ == "__main__":
    main()

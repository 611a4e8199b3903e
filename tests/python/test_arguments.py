"""Argument checks, in this process on a one-rank communicator: bad buffers are refused
with a TypeError/ValueError naming the argument, before ddl is called."""

import array
import types

import numpy as np
import pytest

import ddl
from conftest import free_port


@pytest.fixture
def comm():
    c = ddl.Communicator(1, 0, f"127.0.0.1:{free_port()}", job_token="t", timeout_ms=10000)
    yield c
    c.destroy()


def test_constants_and_version():
    assert [ddl.SUM, ddl.PROD, ddl.MIN, ddl.MAX, ddl.AVG] == [0, 1, 2, 3, 4]
    assert ddl.SPLIT_NOCOLOR == -1
    major, minor, patch = ddl.version()
    assert major == 0 and minor >= 1
    assert ddl.library_path().endswith("libddl.so.0")


def test_single_rank_collectives(comm):
    assert (comm.rank, comm.size) == (0, 1)
    x = np.arange(5, dtype=np.float32)
    assert comm.allreduce(x, op="max") is x
    assert np.array_equal(x, np.arange(5))
    out = np.zeros(5, dtype=np.float32)
    comm.allgather(x, out)
    assert np.array_equal(out, x)
    comm.reduce_scatter(x, out, op=ddl.AVG)
    assert np.array_equal(out, x)
    comm.broadcast(x)
    comm.barrier()


@pytest.mark.parametrize("bad, what, words", [
    (np.zeros(4, dtype=np.int16), TypeError, "send: numpy dtype int16 is not supported"),
    (np.zeros(4, dtype=bool), TypeError, "numpy dtype bool"),
    (np.zeros(4, dtype=np.complex64), TypeError, "complex64"),
    (np.zeros(4, dtype=">f4"), TypeError, "big-endian"),
    (np.zeros((4, 4))[:, 1], ValueError, "send: numpy array is not C-contiguous"),
    (array.array("h", [1, 2]), TypeError, "format 'h'"),
    ("text", TypeError, "str is not a buffer"),
    (3.0, TypeError, "float is not a buffer"),
])
def test_bad_send_buffers(comm, bad, what, words):
    with pytest.raises(what, match="allreduce: ") as e:
        comm.allreduce(bad, np.zeros(4))
    assert words in str(e.value)


def test_read_only_outputs(comm):
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="allreduce: send \\(in place\\): numpy array is read-only"):
        comm.allreduce(ro)
    with pytest.raises(ValueError, match="allreduce: recv: .*read-only"):
        comm.allreduce(np.zeros(4), ro)
    with pytest.raises(ValueError, match="allgather: recv: buffer is read-only"):
        comm.allgather(bytearray(2), b"ab")
    # A read-only input is fine.
    out = np.zeros(4)
    comm.allreduce(ro, out)


def test_mismatched_send_and_recv(comm):
    with pytest.raises(TypeError, match="allreduce: recv is float64 but send is float32"):
        comm.allreduce(np.zeros(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="allreduce: recv has 5 elements but send has 4"):
        comm.allreduce(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match="allgather: recv has 3 elements; .* = 4"):
        comm.allgather(np.zeros(4), np.zeros(3))
    with pytest.raises(ValueError, match="reduce_scatter: send has 3 elements"):
        comm.reduce_scatter(np.zeros(3), np.zeros(4))


def test_bad_op_and_root(comm):
    with pytest.raises(ValueError, match="op: 'median'"):
        comm.allreduce(np.zeros(2), op="median")
    with pytest.raises(ValueError, match="op: 9"):
        comm.allreduce(np.zeros(2), op=9)
    with pytest.raises(ValueError, match="broadcast: root 1 is not a rank"):
        comm.broadcast(np.zeros(2), root=1)


def fake_tensor(device="cpu", dtype="torch.float32", contiguous=True):
    # Duck-typed like torch.Tensor, so this test needs no torch.
    return types.SimpleNamespace(
        data_ptr=lambda: 0, numel=lambda: 4, element_size=lambda: 4, dtype=dtype,
        is_contiguous=lambda: contiguous, device=types.SimpleNamespace(type=device))


def test_tensors_refused(comm):
    with pytest.raises(ValueError, match="allreduce: send \\(in place\\): a cuda tensor"):
        comm.allreduce(fake_tensor(device="cuda"))
    with pytest.raises(TypeError, match="tensor dtype torch.complex64 is not supported"):
        comm.allreduce(fake_tensor(dtype="torch.complex64"))
    with pytest.raises(ValueError, match="not contiguous"):
        comm.allreduce(fake_tensor(contiguous=False))


def test_destroyed_communicator(comm):
    comm.destroy()
    comm.destroy()  # idempotent
    with pytest.raises(ddl.Error, match="destroyed") as e:
        comm.allreduce(np.zeros(2))
    assert e.value.code == 2 and e.value.name == "DDL_ERR_INVALID_USAGE"


def test_with_statement_destroys():
    with ddl.Communicator(1, 0, f"127.0.0.1:{free_port()}") as c:
        c.barrier()
    with pytest.raises(ddl.Error):
        c.barrier()


def test_init_failure_is_an_error(monkeypatch):
    # A rank outside the job: ddl refuses before any network traffic.
    with pytest.raises(ddl.Error) as e:
        ddl.Communicator(2, 5, "127.0.0.1:1")
    assert e.value.code == 1 and e.value.name == "DDL_ERR_INVALID_ARGUMENT"
    assert e.value.message and e.value.message in str(e.value)


def test_error_object():
    e = ddl.Error(6, "allreduce #3: rank 1 did not answer")
    assert (e.code, e.name) == (6, "DDL_ERR_TIMEOUT")
    assert str(e) == "DDL_ERR_TIMEOUT: allreduce #3: rank 1 did not answer"
    assert isinstance(e, Exception)

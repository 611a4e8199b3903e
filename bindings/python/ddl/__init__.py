"""ddl: collectives for distributed deep learning, over libddl.so.0's C ABI.

    import ddl
    comm = ddl.init()                      # under ddlrun, mpirun, srun or torchrun
    comm.allreduce(grad)                   # in place, sum
    req = comm.allgather(x, out, async_=True); ...; req.wait()
    fuser = ddl.Fuser(comm)                # Horovod-style fusion of many small allreduces
    h = fuser.allreduce_async(grad, name="layer1.weight"); ...; h.wait()

Buffers are numpy arrays, PyTorch CPU tensors or anything with the buffer protocol; the GIL
is released while ddl works. Failures raise ddl.Error with ddl's code and message.
"""

from ._buffers import DataType
from ._core import (
    AVG,
    MAX,
    MIN,
    PROD,
    SPLIT_NOCOLOR,
    SUM,
    Communicator,
    Error,
    LibraryTooOldError,
    Op,
    Request,
    group,
    init,
    library_path,
    version,
)
from ._library import LibraryNotFoundError
from ._point_to_point import ANY_SOURCE, TAG_UB
from . import fusion
from .fusion import Fuser

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "AVG", "MAX", "MIN", "PROD", "SUM", "SPLIT_NOCOLOR", "TAG_UB", "Communicator",
    "DataType", "Error", "Fuser", "LibraryNotFoundError", "LibraryTooOldError", "Op", "Request", "group", "init",
    "library_path", "version",
]

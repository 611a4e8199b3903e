"""ddl under torchft (PyPI `torchft`: training that goes on when a replica group fails):
`ProcessGroupDDL`, a reconfigurable process group over ddl's torch backend, as torchft's own
ProcessGroupGloo and ProcessGroupNCCL wrap theirs.

    from ddl.torchft import ProcessGroupDDL
    pg = ProcessGroupDDL(timeout=timedelta(seconds=10))
    manager = torchft.Manager(pg=pg, ...)

torchft's Manager calls `configure(store_addr, replica_id, rank, world_size, ...)` at every new
quorum: the previous communicator is aborted (ddl_comm_abort: every call on it fails at once)
and a new one made through the quorum's store prefix. `abort()` aborts the current one;
`errored()` is torchft's (the last Work's error). CPU tensors, and CUDA tensors as the ddl
backend takes them.
"""

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft.process_group import ProcessGroupWrapper

import ddl.torch as _ddl_torch

__all__ = ["ProcessGroupDDL"]


class ProcessGroupDDL(ProcessGroupWrapper):
    """A reconfigurable process group whose collectives run on ddl (torchft's wrapper)."""

    def _create_pg(self, store, rank, world_size):
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        backend = _ddl_torch._create_backend(store, rank, world_size, self._timeout)
        for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
            pg._register_backend(torch.device(device), BaseProcessGroup.BackendType.CUSTOM,
                                 backend)
        return pg

    def getBackendName(self):
        return "torchft-ddl"

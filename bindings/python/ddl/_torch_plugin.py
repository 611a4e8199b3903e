"""torch's plugin hook for ddl: makes the backend name "ddl" known to torch.distributed in
every process that imports torch, whether or not it imports ddl.

torch calls the functions of the "torch.backends" entry points (pyproject.toml) at the end of
`import torch` (TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off). So code that never imports
ddl can still ask for it: Ray Train's workers (`TorchConfig(backend="ddl")`), Accelerate,
Lightning, DeepSpeed, a script's `init_process_group("ddl")`. It also fills in what env://
reads from ddlrun's, mpirun's or srun's variables (_launch_env.py), as `import ddl.torch`
does, so that those launchers start such code too. Only the name is registered here; ddl.torch
itself (its compiled backend, the launchers' variables) is imported when the
first "ddl" process group is made, so an `import torch` that never makes one pays for a
dictionary entry, not for loading ddl.
"""

import warnings


def register():
    """The entry point. Never raises: a plugin that raises makes `import torch` fail."""
    try:
        import torch.distributed as dist

        from ddl import _launch_env

        _launch_env.torch_env_from_launcher()
        if dist.is_available() and "ddl" not in dist.Backend.backend_list:
            dist.Backend.register_backend("ddl", _create_backend, devices=["cpu", "cuda"])
    except Exception as e:  # noqa: BLE001 - torch must import whatever happens here
        warnings.warn(f"ddl: could not register the torch.distributed backend 'ddl' ({e}); "
                      f"`import ddl.torch` registers it", RuntimeWarning)


def _create_backend(store, rank, size, timeout):
    import ddl.torch  # registers nothing more: the name is taken (ddl.torch._register)

    return ddl.torch._create_backend(store, rank, size, timeout)

"""ddl's collectives for JAX on CPU: `import ddl.jax`, then inside or outside `jax.jit`:

    import ddl.jax
    ddl.jax.init()                                   # under ddlrun, mpirun, srun or torchrun
    grads = ddl.jax.allreduce(grads, op="avg")       # any pytree of arrays

allreduce, allgather, reduce_scatter, broadcast and alltoall are XLA FFI custom calls
(ffi_calls.cc): XLA hands each its operand and result in host memory and ddl's blocking C
call fills the result, with no copy beyond what the call needs. allreduce and broadcast
work in place: their result takes their operand's buffer (XLA's input_output_aliases), so a
value computed in the step (a gradient) is reduced where it lies, with no new buffer
(bench/frameworks.md); an argument of the jitted function is copied by XLA first, unless it
is donated (`jax.jit(..., donate_argnums=...)`). They differentiate
(`jax.grad`): allreduce's cotangent is allreduced, allgather's reduce-scattered,
reduce_scatter's allgathered, alltoall's sent back by alltoall, broadcast's summed onto the
root. On a pytree, allreduce and broadcast make one call for all its leaves (flattened into
one vector, as Horovod's fusion does); the others go leaf by leaf.

Shapes follow the leading axis, as `jax.lax.all_gather(..., tiled=True)` and
`jax.lax.psum_scatter(..., tiled=True)`: allgather returns the ranks' operands one after the
other along axis 0; reduce_scatter and alltoall cut axis 0 into one block per rank.

Order: XLA may run operations that do not depend on each other in any order, or at once; every
rank must make ddl's calls in the same order. So each call of one traced function takes the
previous call's result as an operand it never reads, and XLA runs them in program order.

The handler library comes built in a wheel made where jax was installed (for that jax
version); otherwise, or under another jax, it is compiled against the installed jaxlib's FFI
headers on first use and cached (~/.cache/ddl/jax, or $DDL_JAX_CACHE): that needs a C++
compiler the first time.
"""

import threading

import numpy as np
import jax
import jax.numpy as jnp

import ddl
from .._framework import Binding

__all__ = ["allgather", "allreduce", "alltoall", "broadcast", "communicator", "init",
           "reduce_scatter"]

_TARGETS = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall")
_BINDING = Binding("jax", "ffi_calls.cc", "_ffi_calls.so", "JAX_VERSION", "ddl_jax",
                   "DDL_JAX_CACHE")

_lock = threading.Lock()


def _handler_library():
    """The XLA handlers (ffi_calls.cc) for this jax, loaded, bound to the ddl package's libddl
    and registered with XLA (once per process)."""
    with _lock:
        if _BINDING.lib is None:
            lib = _BINDING.load(_BINDING.path(jax.__version__, [f"-I{jax.ffi.include_dir()}"]))
            for name in _TARGETS:
                jax.ffi.register_ffi_target(f"ddl_{name}",
                                            jax.ffi.pycapsule(getattr(lib, f"ddl_jax_{name}")),
                                            platform="cpu")
    return _BINDING.lib


# -- the communicator


def init(comm=None):
    """Sets the communicator ddl.jax's calls use: `comm`, else ddl.init() (the launcher's
    ranks: ddlrun, mpirun, srun, torchrun). Returns it. Loads (or builds) the handlers."""
    _handler_library()
    return _BINDING.init(comm)


def communicator():
    """The communicator of init(); raises if init() was not called."""
    return _BINDING.communicator()


def _attrs(comm):
    """The communicator of a call and the number its handlers know it by (a compiled function
    keeps that number; a destroyed communicator's is forgotten, and its calls fail saying so)."""
    comm = _BINDING.communicator(comm)
    _handler_library()
    return comm, np.int64(_BINDING.number(comm))


# -- program order inside one trace, and gradients


class _Order:
    """The last call's result while a function is traced: the next call of the same trace
    takes it as an operand (never read), so that XLA runs the calls in program order."""

    last = None

    @classmethod
    def after(cls, x):
        last = cls.last
        if (last is not None and isinstance(x, jax.core.Tracer)
                and isinstance(last, jax.core.Tracer) and last._trace is x._trace):
            return last
        return np.zeros((0,), np.uint8)

    @classmethod
    def record(cls, y):
        cls.last = y if isinstance(y, jax.core.Tracer) else None
        return y


def _collective(name, x, shape, backward, in_place=False, **attrs):
    """One FFI call of `name` on array x (its result: `shape`, x's dtype, in x's buffer when
    in_place), differentiable with `backward` (the cotangent's collective), after the
    previous call of the same trace."""
    call = jax.ffi.ffi_call(f"ddl_{name}", jax.ShapeDtypeStruct(shape, x.dtype),
                            has_side_effect=True, vmap_method="sequential",
                            input_output_aliases={0: 0} if in_place else None)

    @jax.custom_vjp
    def f(x, after):
        return call(x, after, **attrs)

    def fwd(x, after):
        return f(x, after), after

    def bwd(after, ct):
        # The order operand has no gradient (zeros; float0 for an integer one).
        none = (np.zeros(after.shape, jax.dtypes.float0)
                if not jnp.issubdtype(after.dtype, jnp.inexact) else jnp.zeros_like(after))
        return backward(ct), none

    f.defvjp(fwd, bwd)
    return _Order.record(f(x, _Order.after(x)))


def _blocks(x, comm, what):
    if x.ndim == 0 or x.shape[0] % comm.size:
        raise ValueError(f"ddl.jax {what}: axis 0 of an array of shape {x.shape} does not split "
                         f"into {comm.size} equal blocks (one per rank)")
    return x.shape[0] // comm.size


def _linear_only(op, what):
    if op not in (ddl.SUM, ddl.AVG):
        def refuse(ct):
            raise NotImplementedError(f"ddl.jax.{what}: no gradient for op {ddl.Op(op).name}")
        return refuse
    return None


# -- the collectives on one array


def _allreduce_array(x, op, comm):
    c, handle = _attrs(comm)
    x = jnp.asarray(x)
    backward = _linear_only(op, "allreduce") or (lambda ct: _allreduce_array(ct, op, c))
    return _collective("allreduce", x, x.shape, backward, in_place=True, comm=handle,
                       op=np.int32(op))


def _broadcast_array(x, root, comm):
    c, handle = _attrs(comm)
    x = jnp.asarray(x)

    def backward(ct):
        total = _allreduce_array(ct, ddl.SUM, c)
        return total if c.rank == root else jnp.zeros_like(total)

    return _collective("broadcast", x, x.shape, backward, in_place=True, comm=handle,
                       root=np.int32(root))


def allgather(x, comm=None):
    """Every rank's x one after the other along axis 0 (a 0-d x: a vector of one per rank)."""
    c, handle = _attrs(comm)
    x = jnp.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    return _collective("allgather", x, (x.shape[0] * c.size,) + x.shape[1:],
                       lambda ct: reduce_scatter(ct, "sum", c), comm=handle)


def reduce_scatter(x, op="sum", comm=None):
    """x reduced across ranks, this rank's block of axis 0 (cut into one block per rank)."""
    c, handle = _attrs(comm)
    x = jnp.asarray(x)
    op = _BINDING.op(op)
    block = _blocks(x, c, "reduce_scatter")
    scale = 1.0 / c.size if op == ddl.AVG else 1.0
    backward = _linear_only(op, "reduce_scatter") or (lambda ct: allgather(ct, c) * scale)
    return _collective("reduce_scatter", x, (block,) + x.shape[1:], backward, comm=handle,
                       op=np.int32(op))


def alltoall(x, comm=None):
    """Block k of x's axis 0 (one block per rank) goes to rank k; block k of the result came
    from rank k."""
    c, handle = _attrs(comm)
    x = jnp.asarray(x)
    _blocks(x, c, "alltoall")
    return _collective("alltoall", x, x.shape, lambda ct: alltoall(ct, c), comm=handle)


# -- pytrees: one call for all leaves


def _fused(tree, one_array):
    """Applies one_array to every leaf of tree at once: leaves of one dtype flattened into one
    vector, one call per dtype, then cut back into the tree's shapes."""
    leaves, structure = jax.tree_util.tree_flatten(tree)
    leaves = [jnp.asarray(leaf) for leaf in leaves]
    if len(leaves) == 1:
        return jax.tree_util.tree_unflatten(structure, [one_array(leaves[0])])
    out = [None] * len(leaves)
    for dtype in dict.fromkeys(leaf.dtype for leaf in leaves):
        mine = [i for i, leaf in enumerate(leaves) if leaf.dtype == dtype]
        flat = one_array(jnp.concatenate([leaves[i].ravel() for i in mine]))
        at = 0
        for i in mine:
            out[i] = flat[at:at + leaves[i].size].reshape(leaves[i].shape)
            at += leaves[i].size
    return jax.tree_util.tree_unflatten(structure, out)


def allreduce(tree, op="sum", comm=None):
    """Every leaf of tree reduced across ranks (op: "sum", "avg", "prod", "min", "max"); one
    call for all leaves of one dtype."""
    op = _BINDING.op(op)
    return _fused(tree, lambda x: _allreduce_array(x, op, comm))


def broadcast(tree, root=0, comm=None):
    """Every leaf of tree as rank `root` has it; one call for all leaves of one dtype."""
    c = _BINDING.communicator(comm)
    if not 0 <= root < c.size:
        raise ValueError(f"ddl.jax.broadcast: root {root} is not a rank of {c.size}")
    return _fused(tree, lambda x: _broadcast_array(x, root, c))


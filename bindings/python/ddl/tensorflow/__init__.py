"""ddl's collectives for TensorFlow and Keras on CPU: `import ddl.tensorflow`, then

    import ddl.tensorflow as ddl_tf
    ddl_tf.init()                                        # under ddlrun, mpirun, srun, torchrun
    model.compile(optimizer=ddl_tf.DistributedOptimizer(keras.optimizers.SGD(0.05)), ...)
    model.fit(x_shard, y_shard, callbacks=[ddl_tf.BroadcastInitialVariables()])

allreduce, allgather, reduce_scatter, broadcast and alltoall are TensorFlow ops (ops.cc:
asynchronous kernels, as Horovod's, whose calls one thread of the library makes in the order
they were started), usable eagerly and inside `tf.function`, with gradients registered
(allreduce's gradient is allreduced, allgather's reduce-scattered, reduce_scatter's
allgathered, alltoall's sent back, broadcast's summed onto the root). On a list or nest of
tensors, allreduce makes one call per dtype for all of them (flattened into one vector, as
Horovod's fusion does). Shapes follow axis 0 as ddl.jax's do.

`DistributedOptimizer(optimizer)` wraps a Keras optimizer so that it averages the gradients
across the ranks before applying them (Horovod's DistributedOptimizer); the
`BroadcastInitialVariables` callback gives every rank rank 0's weights when training starts.

The ops come built in a wheel made where TensorFlow was installed (for that version);
otherwise, or under another TensorFlow, they are compiled against the installed one on first
use and cached (~/.cache/ddl/tensorflow, or $DDL_TF_CACHE): that needs a C++ compiler the
first time.
"""

import threading

import tensorflow as tf

import ddl
from .._framework import Binding

__all__ = ["BroadcastInitialVariables", "DistributedOptimizer", "allgather", "allreduce",
           "alltoall", "broadcast", "broadcast_variables", "communicator", "init",
           "reduce_scatter"]

_BINDING = Binding("tensorflow", "ops.cc", "_ops.so", "TF_VERSION", "ddl_tf", "DDL_TF_CACHE")

_lock = threading.Lock()
_module = None  # the ops, as tf.load_op_library gives them


def _ops():
    """The ops (ops.cc) for this TensorFlow, loaded and bound to the ddl package's libddl
    (once per process)."""
    global _module
    with _lock:
        if _module is None:
            flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
            path = _BINDING.path(tf.__version__, flags)
            # TensorFlow's loader first: it sees the ops register as the library loads.
            module = tf.load_op_library(path)
            _BINDING.load(path)
            _module = module
    return _module


# -- the communicator


def init(comm=None):
    """Sets the communicator the ops use: `comm`, else ddl.init() (the launcher's ranks).
    Returns it. Loads (or builds) the ops."""
    _ops()
    return _BINDING.init(comm)


def communicator():
    """The communicator of init(); raises if init() was not called."""
    return _BINDING.communicator()


def _number(comm):
    """The communicator of a call and the number the ops know it by (a traced function keeps
    that number; a destroyed communicator's is forgotten, and its ops fail saying so)."""
    comm = _BINDING.communicator(comm)
    _ops()
    return comm, _BINDING.number(comm)


def _op(op):
    return int(_BINDING.op(op))


# -- one tensor


def _allreduce_tensor(x, op, comm):
    _, number = _number(comm)
    return _ops().ddl_allreduce(x, comm=number, op=op)


def _broadcast_tensor(x, root, comm):
    c, number = _number(comm)
    if not 0 <= root < c.size:
        raise ValueError(f"ddl.tensorflow.broadcast: root {root} is not a rank of {c.size}")
    return _ops().ddl_broadcast(x, comm=number, root=root)


def allgather(x, comm=None):
    """Every rank's x one after the other along axis 0."""
    c, number = _number(comm)
    return _ops().ddl_allgather(x, comm=number, size=c.size)


def reduce_scatter(x, op="sum", comm=None):
    """x reduced across ranks, this rank's block of axis 0 (one block per rank)."""
    c, number = _number(comm)
    return _ops().ddl_reduce_scatter(x, comm=number, op=_op(op), size=c.size)


def alltoall(x, comm=None):
    """Block k of x's axis 0 (one block per rank) goes to rank k; block k of the result came
    from rank k."""
    _, number = _number(comm)
    return _ops().ddl_alltoall(x, comm=number)


# -- nests: one call per dtype


def _fused(nest, one_tensor):
    """one_tensor applied to every tensor of the nest at once: those of one dtype flattened
    into one vector, one call per dtype, then cut back into their shapes. None stays None (a
    gradient of an unused variable)."""
    flat = tf.nest.flatten(nest)
    out = list(flat)
    present = [i for i, t in enumerate(flat) if t is not None]
    tensors = {i: tf.convert_to_tensor(flat[i]) for i in present}
    for dtype in dict.fromkeys(t.dtype for t in tensors.values()):
        mine = [i for i in present if tensors[i].dtype == dtype]
        if len(mine) == 1:
            out[mine[0]] = one_tensor(tensors[mine[0]])
            continue
        joined = one_tensor(tf.concat([tf.reshape(tensors[i], [-1]) for i in mine], 0))
        pieces = tf.split(joined, [tf.size(tensors[i]) for i in mine])
        for i, piece in zip(mine, pieces):
            out[i] = tf.reshape(piece, tf.shape(tensors[i]))
    return tf.nest.pack_sequence_as(nest, out)


def allreduce(nest, op="sum", comm=None):
    """Every tensor of nest (a tensor, list, dict, ...) reduced across ranks (op: "sum",
    "avg", "prod", "min", "max"); one call per dtype for all of them."""
    op = _op(op)
    return _fused(nest, lambda x: _allreduce_tensor(x, op, comm))


def broadcast(nest, root=0, comm=None):
    """Every tensor of nest as rank `root` has it; one call per dtype."""
    return _fused(nest, lambda x: _broadcast_tensor(x, root, comm))


# -- gradients (the op's own communicator, by its number)


@tf.RegisterGradient("DdlAllreduce")
def _allreduce_grad(op, grad):
    kind = op.get_attr("op")
    if kind not in (int(ddl.SUM), int(ddl.AVG)):
        raise NotImplementedError(f"ddl.tensorflow.allreduce: no gradient for op "
                                  f"{ddl.Op(kind).name}")
    return _ops().ddl_allreduce(grad, comm=op.get_attr("comm"), op=kind)


@tf.RegisterGradient("DdlBroadcast")
def _broadcast_grad(op, grad):
    total = _ops().ddl_allreduce(grad, comm=op.get_attr("comm"), op=int(ddl.SUM))
    mine = _BINDING.communicator_numbered(op.get_attr("comm")).rank == op.get_attr("root")
    return total if mine else tf.zeros_like(total)


@tf.RegisterGradient("DdlAllgather")
def _allgather_grad(op, grad):
    return _ops().ddl_reduce_scatter(grad, comm=op.get_attr("comm"), op=int(ddl.SUM),
                                        size=op.get_attr("size"))


@tf.RegisterGradient("DdlReduceScatter")
def _reduce_scatter_grad(op, grad):
    kind = op.get_attr("op")
    if kind not in (int(ddl.SUM), int(ddl.AVG)):
        raise NotImplementedError(f"ddl.tensorflow.reduce_scatter: no gradient for op "
                                  f"{ddl.Op(kind).name}")
    size = op.get_attr("size")
    gathered = _ops().ddl_allgather(grad, comm=op.get_attr("comm"), size=size)
    return gathered / size if kind == int(ddl.AVG) else gathered


@tf.RegisterGradient("DdlAlltoall")
def _alltoall_grad(op, grad):
    return _ops().ddl_alltoall(grad, comm=op.get_attr("comm"))


# -- Keras


def DistributedOptimizer(optimizer, op="avg", comm=None):
    """A copy of the Keras `optimizer` (same class and config) that allreduces the gradients
    (averaged by default) across the ranks, in one call per dtype, before applying them."""
    base = type(optimizer)

    class Distributed(base):
        def apply(self, grads, trainable_variables=None):
            return super().apply(allreduce(list(grads), op=op, comm=comm), trainable_variables)

    Distributed.__name__ = f"Distributed{base.__name__}"
    return Distributed.from_config(optimizer.get_config())


def broadcast_variables(variables, root=0, comm=None):
    """Assigns every variable rank `root`'s value (one call per dtype)."""
    variables = list(variables)
    for v, value in zip(variables, broadcast([v.value for v in variables], root, comm)):
        v.assign(value)


def _keras_callback_base():
    import keras
    return keras.callbacks.Callback


class BroadcastInitialVariables(_keras_callback_base()):
    """A Keras callback: when training starts, every rank takes rank `root`'s weights (and its
    optimizer's state, once it has any), as Horovod's BroadcastGlobalVariablesCallback."""

    def __init__(self, root=0, comm=None):
        super().__init__()
        self.root, self.comm = root, comm

    def on_train_begin(self, logs=None):
        broadcast_variables(self.model.variables, self.root, self.comm)

"""Turning the objects users pass (numpy arrays, PyTorch CPU tensors, anything with the
buffer protocol) into (address, element count, ddl datatype) for the C calls.

numpy and torch are never imported here: numpy arrays are recognised through
`__array_interface__` and tensors by their methods, so that `import ddl` costs nothing and
works without either installed.
"""

import ctypes
import enum


class DataType(enum.IntEnum):
    """ddl_datatype_t."""
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9


_ITEMSIZE = {
    DataType.INT8: 1, DataType.UINT8: 1, DataType.INT32: 4, DataType.UINT32: 4,
    DataType.INT64: 8, DataType.UINT64: 8, DataType.FLOAT16: 2, DataType.BFLOAT16: 2,
    DataType.FLOAT32: 4, DataType.FLOAT64: 8,
}

# numpy dtype names and torch dtype names (without "torch.") share these spellings;
# numpy's bfloat16 comes from ml_dtypes.
_BY_NAME = {t.name.lower(): t for t in DataType}

SUPPORTED = ", ".join(_BY_NAME)


class Buffer:
    """A resolved buffer. `keep` holds whatever must stay alive while ddl uses the memory."""

    __slots__ = ("address", "count", "dtype", "keep")

    def __init__(self, address, count, dtype, keep):
        self.address = address
        self.count = count
        self.dtype = dtype
        self.keep = keep


# Small calls pay for every microsecond of this module (1,000 allreduces of 4 KB): what a
# tensor's type, dtype and layout say is worked out once and looked up afterwards (about
# 2 us a tensor less than asking each time).
_TENSOR_TYPES = set()  # types found to be tensors (torch.Tensor, nn.Parameter, ...)
_TENSOR_KINDS = {}  # (dtype, layout) -> ddl type, once checked: strided, of the right size


def _is_tensor(obj):
    kind = type(obj)
    if kind in _TENSOR_TYPES:
        return True
    # Duck typing: torch.Tensor has all of these; numpy arrays and memoryviews do not.
    if (hasattr(obj, "data_ptr") and hasattr(obj, "numel")
            and hasattr(obj, "element_size") and hasattr(obj, "is_contiguous")):
        _TENSOR_TYPES.add(kind)
        return True
    return False


def _tensor_kind(t, what):
    """The ddl type of tensors of t's dtype and layout, checked once and remembered."""
    layout = getattr(t, "layout", None)
    key = (t.dtype, layout)
    dtype = _TENSOR_KINDS.get(key)
    if dtype is not None:
        return dtype
    if layout is not None and str(layout) != "torch.strided":
        raise ValueError(f"{what}: a tensor with layout {layout}; only dense (strided) "
                         "tensors are supported")
    name = str(t.dtype).replace("torch.", "")
    dtype = _BY_NAME.get(name)
    if dtype is None:
        raise TypeError(f"{what}: tensor dtype {t.dtype} is not supported (ddl takes {SUPPORTED})")
    if t.element_size() != _ITEMSIZE[dtype]:
        raise TypeError(f"{what}: element size {t.element_size()} does not match {name}")
    _TENSOR_KINDS[key] = dtype
    return dtype


def _from_tensor(t, what, writable):
    if getattr(t, "is_cpu", None) is not True:
        device = getattr(getattr(t, "device", None), "type", "cpu")
        if device != "cpu":
            raise ValueError(f"{what}: a {device} tensor; ddl's Python package takes CPU "
                             "tensors only (move it with .cpu())")
    dtype = _tensor_kind(t, what)
    if not t.is_contiguous():
        raise ValueError(f"{what}: tensor is not contiguous; pass .contiguous() (and copy "
                         "the result back if it is an output)")
    return Buffer(t.data_ptr(), t.numel(), dtype, t)


# numpy dtype -> ddl type, filled as dtypes are met. dtype.name is computed in Python by
# numpy (microseconds per call), a dict lookup by the dtype object is not: small calls pay
# for every microsecond here (1,000 allreduces of 4 KB).
_NUMPY_TYPES = {}


def _numpy_type(dt, what):
    dtype = _NUMPY_TYPES.get(dt)
    if dtype is not None:
        return dtype
    dtype = _BY_NAME.get(dt.name)
    if dtype is None or dt.itemsize != _ITEMSIZE[dtype]:
        hint = " (numpy's bfloat16 needs the ml_dtypes package)" if "bfloat" in dt.name else ""
        raise TypeError(f"{what}: numpy dtype {dt} is not supported (ddl takes "
                        f"{SUPPORTED}){hint}")
    if dt.byteorder == ">":
        raise TypeError(f"{what}: numpy dtype {dt} is big-endian; convert it with "
                        ".astype(dtype.newbyteorder('='))")
    _NUMPY_TYPES[dt] = dtype
    return dtype


def _from_numpy(a, what, writable):
    dtype = _numpy_type(a.dtype, what)
    flags = a.flags
    if not flags.c_contiguous:
        raise ValueError(f"{what}: numpy array is not C-contiguous; pass "
                         "numpy.ascontiguousarray(...) (and copy the result back if it is an "
                         "output)")
    if writable and not flags.writeable:
        raise ValueError(f"{what}: numpy array is read-only, but ddl writes its result there")
    address = None
    if flags.writeable and a.size and a.dtype not in _NOT_EXPORTABLE:
        # Cheaper than building __array_interface__'s dict (which also works read-only).
        try:
            address = ctypes.addressof(_BYTE.from_buffer(a))
        except (ValueError, TypeError):  # a dtype the buffer protocol cannot describe
            _NOT_EXPORTABLE.add(a.dtype)  # (ml_dtypes' bfloat16)
    if address is None:
        address = a.__array_interface__["data"][0]
    return Buffer(address, a.size, dtype, a)


_BYTE = ctypes.c_char
_NOT_EXPORTABLE = set()


# Buffer-protocol format codes (native byte order) -> ddl type, by kind and item size.
_SIGNED = {1: DataType.INT8, 4: DataType.INT32, 8: DataType.INT64}
_UNSIGNED = {1: DataType.UINT8, 4: DataType.UINT32, 8: DataType.UINT64}
_FLOAT = {"e": DataType.FLOAT16, "f": DataType.FLOAT32, "d": DataType.FLOAT64}


def _format_dtype(fmt, itemsize):
    code = fmt
    if code[:1] in ("@", "=", "<"):  # native / little-endian on the platforms ddl runs on
        code = code[1:]
    if len(code) != 1:
        return None
    if code in _FLOAT:
        return _FLOAT[code]
    if code in "bhilq":
        return _SIGNED.get(itemsize)
    if code in "BHILQc":
        return _UNSIGNED.get(itemsize)
    return None


def _from_buffer_protocol(obj, what, writable):
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what}: {type(obj).__name__} is not a buffer: pass a numpy array, "
                        "a PyTorch CPU tensor or an object with the buffer protocol "
                        "(bytearray, memoryview, array.array)") from None
    dtype = _format_dtype(view.format, view.itemsize)
    if dtype is None:
        raise TypeError(f"{what}: buffer format {view.format!r} (item size {view.itemsize}) is "
                        f"not supported (ddl takes {SUPPORTED})")
    if not view.c_contiguous:
        raise ValueError(f"{what}: buffer is not C-contiguous")
    count = view.nbytes // view.itemsize
    if view.readonly:
        if writable:
            raise ValueError(f"{what}: buffer is read-only ({type(obj).__name__}), but ddl "
                             "writes its result there")
        # ctypes can only take the address of writable memory; an input may be a copy.
        holder = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
    else:
        # Holding this array keeps the exporter pinned (a bytearray cannot be resized).
        holder = (ctypes.c_char * view.nbytes).from_buffer(view)
    return Buffer(ctypes.addressof(holder), count, dtype, (obj, holder))


def as_buffer(obj, what, writable):
    """Resolves obj; `what` names the argument in errors; `writable`: ddl writes into it."""
    if _is_tensor(obj):
        return _from_tensor(obj, what, writable)
    # Looked up on the type: reading obj.__array_interface__ would build its dict.
    kind = type(obj)
    if hasattr(kind, "__array_interface__") and hasattr(kind, "flags") and hasattr(kind, "dtype"):
        return _from_numpy(obj, what, writable)
    return _from_buffer_protocol(obj, what, writable)


def resolve_pair(send, recv, what, send_name, recv_name):
    """The buffers of an elementwise call (allreduce): (src, dst, result), in place in send when
    recv is None or send itself; out of place the two must match in dtype and count."""
    if recv is None or recv is send:
        src = dst = as_buffer(send, f"{what}: {send_name} (in place)", writable=True)
        return src, dst, send
    src = as_buffer(send, f"{what}: {send_name}", writable=False)
    dst = as_buffer(recv, f"{what}: {recv_name}", writable=True)
    check_same_dtype(src, send_name, dst, f"{what}: {recv_name}")
    if dst.count != src.count:
        raise ValueError(f"{what}: {recv_name} has {dst.count} elements but {send_name} has "
                         f"{src.count}: they must be the same")
    return src, dst, recv


def check_same_dtype(a, a_name, b, b_name):
    if a.dtype != b.dtype:
        raise TypeError(f"{b_name} is {b.dtype.name.lower()} but {a_name} is "
                        f"{a.dtype.name.lower()}: they must have the same dtype")

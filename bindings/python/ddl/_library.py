"""Finding and loading libddl.so.0, and declaring the C functions ddl's bindings call.

The library is loaded on first use, not at import, so that `import ddl` works (for
constants, docs, packaging checks) on a machine where ddl is not built yet; the first call
that needs it raises LibraryNotFoundError naming every place that was tried.
"""

import ctypes
import os
import sys
import sysconfig
import threading

SONAME = "libddl.so.0"


class LibraryNotFoundError(OSError):
    """libddl.so.0 could not be found or loaded; the message lists every place tried."""

    __module__ = "ddl"


def _source_root_in_place():
    """The checkout this file sits in when run from the source tree (in place or editable)."""
    here = os.path.dirname(os.path.abspath(__file__))  # <root>/bindings/python/ddl
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(root, "include", "ddl", "ddl.h")):
        return root
    return None


def _packaged():
    """The libddl a wheel put inside the package (bindings/python/CMakeLists.txt)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), SONAME)


def _installed_dirs():
    """Library directories where `cmake --install` may have put libddl (GNUInstallDirs)."""
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = []
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        for sub in ("lib", "lib64") + ((os.path.join("lib", multiarch),) if multiarch else ()):
            d = os.path.join(prefix, sub)
            if d not in dirs:
                dirs.append(d)
    return dirs


def _loaded_path(fallback):
    """Where the dynamic loader found the library (for ddl.library_path())."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libddl.so"):
                    return path
    except OSError:
        pass
    return fallback


def _fix_hint():
    return (
        "To fix it, do one of:\n"
        "  - install the package with its library: pip install ./bindings/python (a ddl\n"
        "    checkout; it builds libddl into the package);\n"
        "  - build ddl: scripts/build.sh in the ddl checkout (puts libddl.so.0 in build/), or set\n"
        "    DDL_BUILD_DIR to the build directory you used;\n"
        "  - set DDL_LIBRARY to the full path of libddl.so.0;\n"
        "  - install it: cmake --install build --prefix PREFIX, then add PREFIX/lib to\n"
        "    LD_LIBRARY_PATH (or run ldconfig for a system prefix)."
    )


def find_and_load():
    """Returns (ctypes.CDLL, path). Raises LibraryNotFoundError listing every place tried."""
    tried = []  # lines "place: what happened"

    def attempt(path):
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            return None

    # Explicit settings are strict: if the user names a library or a build, loading some
    # other libddl instead would hide their mistake.
    explicit = os.environ.get("DDL_LIBRARY")
    if explicit:
        lib = attempt(explicit)
        if lib is not None:
            return lib, os.path.abspath(explicit)
        raise LibraryNotFoundError(
            f"cannot load libddl from $DDL_LIBRARY:\n  {tried[-1]}\n" + _fix_hint())
    tried.append("$DDL_LIBRARY: not set")

    build_dir = os.environ.get("DDL_BUILD_DIR")
    if build_dir:
        path = os.path.join(build_dir, SONAME)
        if os.path.exists(path):
            lib = attempt(path)
            if lib is not None:
                return lib, os.path.abspath(path)
        else:
            tried.append(f"{path}: no such file")
        raise LibraryNotFoundError(
            f"cannot load libddl from $DDL_BUILD_DIR={build_dir}:\n  {tried[-1]}\n"
            "(unset DDL_BUILD_DIR to search elsewhere)\n" + _fix_hint())
    tried.append("$DDL_BUILD_DIR: not set")

    candidates = [(_packaged(), "inside the installed package")]
    root = _source_root_in_place()
    if root:
        candidates.append((os.path.join(root, "build", SONAME), "checkout this package runs from"))
    for d in _installed_dirs():
        candidates.append((os.path.join(d, SONAME), "installed"))

    for path, how in candidates:
        if not os.path.exists(path):
            tried.append(f"{path} ({how}): no such file")
            continue
        lib = attempt(path)
        if lib is not None:
            return lib, path

    # Last, the loader's own search: LD_LIBRARY_PATH, the ld.so cache, RUNPATHs.
    try:
        return ctypes.CDLL(SONAME), _loaded_path(SONAME)
    except OSError as e:
        tried.append(f"the loader's search path for {SONAME} (LD_LIBRARY_PATH="
                     f"{os.environ.get('LD_LIBRARY_PATH', '')!r}, the ld.so cache): {e}")

    raise LibraryNotFoundError(
        "cannot find libddl.so.0. Looked in:\n  " + "\n  ".join(tried) + "\n" + _fix_hint())


# --- C prototypes --------------------------------------------------------------------------

_c_int_p = ctypes.POINTER(ctypes.c_int)
_handle = ctypes.c_void_p  # ddl_comm_t, ddl_request_t: opaque pointers


class Config(ctypes.Structure):
    """ddl_config_t; fields in the header's order (they are only ever appended)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("version", ctypes.c_uint32),
        ("timeout_ms", ctypes.c_int32),
        ("job_token", ctypes.c_char_p),
        ("chunk_bytes", ctypes.c_size_t),
        ("log_level", ctypes.c_int32),
    ]


CONFIG_VERSION = 1

_R = ctypes.c_int  # ddl_result_t
_P = ctypes.c_void_p
_N = ctypes.c_size_t
_I = ctypes.c_int
_PH = ctypes.POINTER(_handle)

# name -> (restype, argtypes). Functions marked optional may be absent in older builds.
_PROTOTYPES = {
    "ddl_get_version": (_R, [_c_int_p, _c_int_p, _c_int_p]),
    "ddl_comm_init_from_env": (_R, [_PH]),
    "ddl_comm_init": (_R, [_PH, _I, _I, ctypes.c_char_p, ctypes.POINTER(Config)]),
    "ddl_comm_destroy": (_R, [_handle]),
    "ddl_comm_abort": (_R, [_handle]),
    "ddl_comm_rank": (_R, [_handle, _c_int_p]),
    "ddl_comm_size": (_R, [_handle, _c_int_p]),
    "ddl_comm_split": (_R, [_handle, _I, _I, _PH]),
    "ddl_allreduce": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_broadcast": (_R, [_P, _N, _I, _I, _handle]),
    "ddl_allgather": (_R, [_P, _P, _N, _I, _handle]),
    "ddl_reduce_scatter": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_barrier": (_R, [_handle]),
    "ddl_result_string": (ctypes.c_char_p, [_R]),
    "ddl_comm_last_error": (ctypes.c_char_p, [_handle]),
    "ddl_datatype_size": (_N, [_I]),
}

# Nonblocking collectives and groups: newer than the first libddl.so.0.
_OPTIONAL_PROTOTYPES = {
    "ddl_iallreduce": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
    "ddl_ibroadcast": (_R, [_P, _N, _I, _I, _handle, _PH]),
    "ddl_iallgather": (_R, [_P, _P, _N, _I, _handle, _PH]),
    "ddl_ireduce_scatter": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
    "ddl_ibarrier": (_R, [_handle, _PH]),
    "ddl_test": (_R, [_handle, _c_int_p]),
    "ddl_wait": (_R, [_handle]),
    "ddl_request_free": (_R, [_handle]),
    "ddl_group_start": (_R, []),
    "ddl_group_end": (_R, []),
}

# Alltoall, reduce, gather, scatter and point to point: newer still.
_SP = ctypes.POINTER(ctypes.c_size_t)  # const size_t *: counts and displacements
_OPTIONAL_PROTOTYPES.update({
    "ddl_alltoall": (_R, [_P, _P, _N, _I, _handle]),
    "ddl_alltoallv": (_R, [_P, _SP, _SP, _P, _SP, _SP, _I, _handle]),
    "ddl_reduce": (_R, [_P, _P, _N, _I, _I, _I, _handle]),
    "ddl_gather": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_gatherv": (_R, [_P, _N, _P, _SP, _SP, _I, _I, _handle]),
    "ddl_scatter": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_scatterv": (_R, [_P, _SP, _SP, _P, _N, _I, _I, _handle]),
    "ddl_send": (_R, [_P, _N, _I, _I, _handle]),
    "ddl_recv": (_R, [_P, _N, _I, _I, _handle]),
    "ddl_ialltoall": (_R, [_P, _P, _N, _I, _handle, _PH]),
    "ddl_ialltoallv": (_R, [_P, _SP, _SP, _P, _SP, _SP, _I, _handle, _PH]),
    "ddl_ireduce": (_R, [_P, _P, _N, _I, _I, _I, _handle, _PH]),
    "ddl_igather": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
    "ddl_igatherv": (_R, [_P, _N, _P, _SP, _SP, _I, _I, _handle, _PH]),
    "ddl_iscatter": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
    "ddl_iscatterv": (_R, [_P, _SP, _SP, _P, _N, _I, _I, _handle, _PH]),
    "ddl_isend": (_R, [_P, _N, _I, _I, _handle, _PH]),
    "ddl_irecv": (_R, [_P, _N, _I, _I, _handle, _PH]),
})

# Tagged point to point and receives from any source: newer still.
_OPTIONAL_PROTOTYPES.update({
    "ddl_send_tag": (_R, [_P, _N, _I, _I, _I, _handle]),
    "ddl_recv_tag": (_R, [_P, _N, _I, _I, _I, _handle, _c_int_p]),
    "ddl_isend_tag": (_R, [_P, _N, _I, _I, _I, _handle, _PH]),
    "ddl_irecv_tag": (_R, [_P, _N, _I, _I, _I, _handle, _c_int_p, _PH]),
})

# Allgather and reduce-scatter with a count per rank.
_OPTIONAL_PROTOTYPES.update({
    "ddl_allgatherv": (_R, [_P, _N, _P, _SP, _SP, _I, _handle]),
    "ddl_iallgatherv": (_R, [_P, _N, _P, _SP, _SP, _I, _handle, _PH]),
    "ddl_reduce_scatterv": (_R, [_P, _P, _SP, _I, _I, _handle]),
    "ddl_ireduce_scatterv": (_R, [_P, _P, _SP, _I, _I, _handle, _PH]),
})

# Prefix reductions (MPI_Scan, MPI_Exscan).
_OPTIONAL_PROTOTYPES.update({
    "ddl_scan": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_exscan": (_R, [_P, _P, _N, _I, _I, _handle]),
    "ddl_iscan": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
    "ddl_iexscan": (_R, [_P, _P, _N, _I, _I, _handle, _PH]),
})

# Fault tolerance: revoke, agree, shrink, grow.
_OPTIONAL_PROTOTYPES.update({
    "ddl_comm_revoke": (_R, [_handle]),
    "ddl_comm_agree": (_R, [_handle, _I, ctypes.POINTER(ctypes.c_uint64)]),
    "ddl_comm_failed_ranks": (_R, [_handle, _c_int_p, _I, _c_int_p]),
    "ddl_comm_shrink": (_R, [_handle, _c_int_p, _I, _PH]),
    "ddl_comm_grow": (_R, [_handle, _I, ctypes.c_char_p, _PH]),
})


class _Functions:
    """The loaded library's functions as attributes; optional ones absent are None."""

    def __init__(self, lib, path):
        self.path = path
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise LibraryNotFoundError(
                    f"{path} has no {name}: it is not a libddl.so.0 this package can use "
                    "(rebuild ddl, or point DDL_LIBRARY at a current build)") from None
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)
        for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)


_functions = None
_lock = threading.Lock()


def lib():
    """The loaded library's functions, loading it on first use."""
    global _functions
    if _functions is None:
        with _lock:
            if _functions is None:
                cdll, path = find_and_load()
                _functions = _Functions(cdll, path)
    return _functions

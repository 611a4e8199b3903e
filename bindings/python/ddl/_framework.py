"""What ddl.jax and ddl.tensorflow share: their native library (the package's own, built by
the wheel against the framework there; in a checkout, the project's build's; else compiled
here on first use against the installed framework and cached), bound to the libddl the
package loaded, and the numbers by which a compiled program names its communicator
(framework_abi.h)."""

import ctypes
import fcntl
import glob
import hashlib
import importlib
import os
import runpy
import subprocess
import tempfile
import weakref

from . import _core

_OPS = {"sum": _core.SUM, "prod": _core.PROD, "min": _core.MIN, "max": _core.MAX,
        "avg": _core.AVG}

HERE = os.path.dirname(os.path.abspath(__file__))


def module_in_build(package, pattern, version_name, version, sources):
    """The path of the module that the project's build made for ddl.`package` (file `pattern`,
    bindings/python/frameworks.cmake) in python/ddl/`package` beside the libddl this package
    loaded, if its _build_info.py names this framework `version` and it is no older than its
    `sources`; else None (a checkout without such a build, or edited since: the caller
    compiles one)."""
    folder = os.path.join(os.path.dirname(_core.library_path()), "python", "ddl", package)
    found = glob.glob(os.path.join(folder, pattern))
    info = os.path.join(folder, "_build_info.py")
    if len(found) != 1 or not os.path.exists(info):
        return None
    if runpy.run_path(info).get(version_name) != version:
        return None
    built = os.path.getmtime(found[0])
    if any(os.path.getmtime(source) > built for source in sources):
        return None
    return found[0]


class Binding:
    """One framework's native library: `package` (ddl/jax, ddl/tensorflow), its `source` there,
    `built` the wheel's build of it (with `_build_info.<version_name>` naming the framework's
    version it was built for), `prefix` of its exported functions (ddl_jax_load, ...)."""

    def __init__(self, name, source, built, version_name, prefix, cache_env):
        self.name, self.source, self.built = name, source, built
        self.version_name, self.prefix, self.cache_env = version_name, prefix, cache_env
        self.lib = None
        self.comm = None  # init()'s
        self._by_number = {}  # number -> weak reference to its communicator

    def load(self, path):
        """The library at `path` (path()'s), loaded and bound to libddl (once)."""
        if self.lib is None:
            lib = ctypes.CDLL(path)
            load = getattr(lib, f"{self.prefix}_load")
            load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
            attach = getattr(lib, f"{self.prefix}_attach")
            attach.argtypes, attach.restype = [ctypes.c_void_p], ctypes.c_int64
            getattr(lib, f"{self.prefix}_detach").argtypes = [ctypes.c_int64]
            why = ctypes.create_string_buffer(512)
            if load(_core.library_path().encode(), why, len(why)) != 0:
                raise ImportError(f"ddl.{self.name}: cannot bind libddl: {why.value.decode()}")
            self.lib = lib
        return self.lib

    def init(self, comm):
        """Sets the communicator the binding's calls use: `comm`, else ddl.init() (the
        launcher's ranks: ddlrun, mpirun, srun, torchrun). Returns it."""
        self.comm = comm if comm is not None else _core.init()
        return self.comm

    def communicator(self, comm=None):
        """`comm`, else init()'s; raises if there is none."""
        if comm is not None:
            return comm
        if self.comm is None:
            raise RuntimeError(f"ddl.{self.name}: call ddl.{self.name}.init() (or init(comm)) "
                               "before a collective")
        return self.comm

    def number(self, comm):
        """The number the library knows `comm` by (given at the first call, forgotten when
        the communicator is destroyed, so that its compiled calls fail saying so)."""
        attribute = f"_{self.prefix}_number"
        number = getattr(comm, attribute, None)
        if number is None:
            lib = self.lib
            number = getattr(lib, f"{self.prefix}_attach")(comm._live())
            setattr(comm, attribute, number)
            comm._on_destroy.append(lambda: getattr(lib, f"{self.prefix}_detach")(number))
            self._by_number[number] = weakref.ref(comm)
        return number

    def communicator_numbered(self, number):
        """The live communicator the library knows by `number` (for a gradient's op)."""
        comm = self._by_number.get(number, lambda: None)()
        if comm is None:
            raise RuntimeError(f"ddl.{self.name}: communicator {number} is gone")
        return comm

    def op(self, op):
        """A reduce op given as "sum", "avg", "prod", "min", "max" or ddl.Op: its ddl.Op."""
        if isinstance(op, str):
            try:
                return _OPS[op.lower()]
            except KeyError:
                raise ValueError(f"ddl.{self.name}: op {op!r} is not one of "
                                 f"{', '.join(_OPS)}") from None
        return _core.Op(op)

    def path(self, version, compile_flags):
        """The package's build for `version`, else the project's build's (a checkout's), else
        one compiled for it (per version and source digest: a native library built against one
        framework's headers is not promised to load into another)."""
        package = os.path.join(HERE, self.name)
        try:
            info = importlib.import_module(f"ddl.{self.name}._build_info")
            if getattr(info, self.version_name) == version:
                return os.path.join(package, self.built)
        except ImportError:
            pass
        sources = [os.path.join(package, self.source), os.path.join(HERE, "framework_abi.h")]
        in_build = module_in_build(self.name, self.built, self.version_name, version, sources)
        if in_build is not None:
            return in_build
        digest = hashlib.sha256()
        for source in sources:
            with open(source, "rb") as f:
                digest.update(f.read())
        cache = os.environ.get(self.cache_env) or os.path.join(
            os.path.expanduser("~"), ".cache", "ddl", self.name)
        os.makedirs(cache, exist_ok=True)
        target = os.path.join(cache, f"{self.prefix}_{version.replace('.', '_')}_"
                                     f"{digest.hexdigest()[:12]}.so")
        if os.path.exists(target):
            return target
        # Every rank of a job imports at once: one compiles, the others wait for it.
        with open(os.path.join(cache, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(target):
                self._compile(sources[0], target, compile_flags)
        return target

    def _compile(self, source, target, flags):
        compiler = os.environ.get("CXX", "c++")
        fd, partial = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
        os.close(fd)
        command = ([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-w", f"-I{HERE}", source,
                    "-o", partial] + flags + ["-ldl"])
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:
            os.unlink(partial)
            raise ImportError(f"ddl.{self.name}: cannot run the C++ compiler {compiler!r} to "
                              f"build its native library: {e}") from None
        if done.returncode != 0:
            os.unlink(partial)
            raise ImportError(f"ddl.{self.name}: building its native library failed "
                              f"({' '.join(command)}):\n{done.stderr}")
        os.replace(partial, target)

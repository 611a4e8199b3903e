"""The console commands `ddlrun`, `ddl_perf` and `ddl_topo` of an installed package: each
runs the program of that name that the wheel put in ddl/bin (bindings/python/CMakeLists.txt),
with the same arguments, in place of this process."""

import os
import sys


def _run(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: this ddl package has no {path}: it was not installed from a wheel "
                 "built by bindings/python/CMakeLists.txt (in a checkout, the tools are in "
                 "build/bin after scripts/build.sh)")
    os.execv(path, [name] + sys.argv[1:])


def ddlrun():
    _run("ddlrun")


def ddl_perf():
    _run("ddl_perf")


def ddl_topo():
    _run("ddl_topo")

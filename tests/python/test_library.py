"""Finding libddl.so.0: the error when it cannot, and the order of the places it looks."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, INSTALLED, PACKAGE_DIR

if INSTALLED:
    pytest.skip("how the checkout's package finds its library: not an installed one",
                allow_module_level=True)


def run_python(code, pythonpath, **env_changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DDL_LIBRARY", "DDL_BUILD_DIR", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    env["PYTHONPATH"] = pythonpath
    # -I would drop PYTHONPATH; -s keeps the user's site-packages out instead.
    return subprocess.run([sys.executable, "-s", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd="/")


@pytest.fixture
def detached_package(tmp_path):
    """A copy of the package outside any checkout, as an sdist unpacked elsewhere would be."""
    shutil.copytree(os.path.join(PACKAGE_DIR, "ddl"), tmp_path / "ddl",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so*", "torch"))
    return str(tmp_path)


def test_not_found_lists_every_place(detached_package):
    p = run_python("import ddl\nprint(ddl.SUM)\nddl.library_path()", detached_package)
    if p.returncode == 0:
        pytest.skip("a libddl.so.0 is installed where the loader finds it")
    assert p.stdout.strip() == "0", "import ddl must work without the library: " + p.stderr
    err = p.stderr
    assert "ddl.LibraryNotFoundError: cannot find libddl.so.0. Looked in:" in err, err
    for place in ("$DDL_LIBRARY: not set", "$DDL_BUILD_DIR: not set",
                  "(inside the installed package): no such file",
                  os.path.join(sys.prefix, "lib", "libddl.so.0"), "/usr/local/lib/libddl.so.0",
                  "the loader's search path for libddl.so.0 (LD_LIBRARY_PATH=''"):
        assert place in err, f"{place!r} missing from:\n{err}"
    for fix in ("scripts/build.sh", "DDL_BUILD_DIR", "DDL_LIBRARY", "cmake --install"):
        assert fix in err, f"{fix!r} missing from:\n{err}"


def test_explicit_settings_are_strict(detached_package, tmp_path):
    p = run_python("import ddl; ddl.library_path()", detached_package,
                   DDL_LIBRARY=str(tmp_path / "nowhere" / "libddl.so.0"))
    assert p.returncode != 0
    assert "cannot load libddl from $DDL_LIBRARY" in p.stderr, p.stderr
    assert str(tmp_path / "nowhere" / "libddl.so.0") in p.stderr, p.stderr
    p = run_python("import ddl; ddl.library_path()", detached_package,
                   DDL_BUILD_DIR=str(tmp_path))
    assert p.returncode != 0
    assert f"{tmp_path}/libddl.so.0: no such file" in p.stderr, p.stderr


def test_search_order(detached_package):
    lib = os.path.join(BUILD_DIR, "libddl.so.0")
    p = run_python("import ddl; print(ddl.library_path())", detached_package, DDL_LIBRARY=lib)
    assert p.stdout.strip() == lib, p.stderr
    p = run_python("import ddl; print(ddl.library_path())", detached_package,
                   DDL_BUILD_DIR=BUILD_DIR)
    assert p.stdout.strip() == lib, p.stderr
    # Through the loader's search path, reported as the file it mapped (unless an installed
    # copy comes first).
    from ddl import _library
    if any(os.path.exists(os.path.join(d, "libddl.so.0")) for d in _library._installed_dirs()):
        return
    p = run_python("import ddl; print(ddl.library_path())", detached_package,
                   LD_LIBRARY_PATH=BUILD_DIR)
    assert p.returncode == 0, p.stderr
    assert os.path.realpath(p.stdout.strip()) == os.path.realpath(lib), p.stdout


def test_the_packaged_library_comes_first_after_the_settings(detached_package):
    """A wheel puts libddl.so.0 inside the package (bindings/python/CMakeLists.txt): found
    there without settings, before any checkout or installed copy; DDL_LIBRARY still wins."""
    packaged = os.path.join(detached_package, "ddl", "libddl.so.0")
    shutil.copy(os.path.join(BUILD_DIR, "libddl.so.0"), packaged)
    p = run_python("import ddl; print(ddl.library_path())", detached_package)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == packaged, p.stdout + p.stderr
    lib = os.path.join(BUILD_DIR, "libddl.so.0")
    p = run_python("import ddl; print(ddl.library_path())", detached_package, DDL_LIBRARY=lib)
    assert p.stdout.strip() == lib, p.stderr

"""bench/plot.py: every result shape it reads gives a chart, and a bad file a clear error.

The JSON files here are TEST INPUTS made up by the test (a few sizes with round numbers in
each shape the project's tools write); they are not measurements.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOT = os.path.join(REPO, "bench", "plot.py")
SIZES = [8, 1024, 1 << 20]


def ddl_perf_input():
    # tools/ddl_perf/perf_report.cc's -J output
    rows = [{"size": s, "count": s // 4, "type": "float32", "redop": "sum", "root": -1,
             "out_of_place": {"time_us": 10.0 + s / 1e3, "algbw_gbs": 0, "busbw_gbs": 0, "wrong": None},
             "in_place": None} for s in SIZES]
    return {"tool": "ddl_perf", "library": "test-lib", "collective": "allreduce", "nranks": 2,
            "bus_factor": 1.0, "iters": 1, "warmup_iters": 0, "check": False, "results": rows,
            "out_of_bounds": 0, "avg_busbw_gbs": 0}


def allreduce_vs_mpi_input():
    table = [{"size": s, "ddl_time_us": 10.0 + s / 1e3, "mpi_time_us": 20.0 + s / 1e3,
              "bound_time_us": s / 5e3} for s in SIZES]
    return {"ranks": 2, "bus_factor": 1.0, "libraries": {"ddl": "test ddl", "mpi": "test mpi"},
            "bound_busbw_gbs": 5.0, "table": table}


def collectives_vs_mpi_input():
    def table(scale):
        return [{"size": s, "ddl_time_us": scale * (10.0 + s / 1e3), "mpi_time_us": 20.0 + s / 1e3}
                for s in SIZES]
    return {"ranks": 2, "libraries": {"ddl": "test ddl", "mpi": "test mpi"},
            "tables": {"broadcast": table(1), "allgather": table(2),
                       "barrier": [{"size": 8, "ddl_time_us": 5.0, "mpi_time_us": 6.0}]}}


def multihost_input():
    setup = {"name": "2x2", "hosts": 2, "per_host": 2, "rails": 1, "sizes": [1 << 24, 1 << 26]}
    runs = {lib: [{"times": {str(1 << 24): t, str(1 << 26): 4 * t}} for t in (1e5, 1.2e5, 1.1e5)]
            for lib in ("ddl:default", "mpi")}
    table = [{"size": s, "bound_us": s / 125.0} for s in setup["sizes"]]
    return {"results": [{"setup": setup, "runs": runs, "names": {"mpi": "test mpi"},
                         "libs": ["ddl:default", "mpi"], "table": table}],
            "argv": [], "rate_bps": 125e6}


def torch_vs_gloo_input():
    samples = [{"case": "all_reduce", "bytes": s, "who": who, "seconds": [1e-5 * k, 2e-5 * k]}
               for s in SIZES for who, k in (("ddl", 1), ("gloo", 3), ("floor", 0.1))]
    samples.append({"case": "ddp step", "bytes": 32, "who": "ddl", "seconds": [0.01]})
    return {"torch": "0.0-test", "nprocs": 2, "rounds": 2, "samples": samples}


def plot(tmp_path, *args):
    return subprocess.run([sys.executable, PLOT] + [str(a) for a in args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("make,extra", [
    (ddl_perf_input, []),
    (allreduce_vs_mpi_input, []),
    (collectives_vs_mpi_input, ["--collective", "allgather"]),
    (multihost_input, []),
    (torch_vs_gloo_input, ["--metric", "busbw"]),
])
def test_each_shape_gives_a_png(tmp_path, make, extra):
    src = write(tmp_path, "test-input.json", make())
    out = tmp_path / "chart.png"
    r = plot(tmp_path, src, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000


def test_several_files_on_one_svg(tmp_path):
    a = write(tmp_path, "a.json", ddl_perf_input())
    b = write(tmp_path, "b.json", ddl_perf_input())  # same label: each gets its file's name
    c = write(tmp_path, "c.json", allreduce_vs_mpi_input())
    out = tmp_path / "chart.svg"
    r = plot(tmp_path, a, b, c, "-o", out, "--title", "test")
    assert r.returncode == 0, r.stderr
    svg = out.read_text()
    assert "<svg" in svg and "a: test-lib" in svg and "b: test-lib" in svg


@pytest.mark.parametrize("content,words", [
    ("{not json", "not JSON"),
    ({"hello": 1}, "not a format this knows"),
    ({"tool": "ddl_perf", "results": [{"size": 8}]}, "malformed"),
    ({"ranks": 2, "tables": {"broadcast": []}}, "no measured sizes"),
])
def test_bad_file_is_a_clear_error(tmp_path, content, words):
    src = write(tmp_path, "bad.json", content)
    r = plot(tmp_path, src, "-o", tmp_path / "chart.png")
    assert r.returncode == 1
    assert words in r.stderr and "bad.json" in r.stderr, r.stderr
    assert not (tmp_path / "chart.png").exists()


def test_unknown_collective_names_the_ones_there(tmp_path):
    src = write(tmp_path, "test-input.json", collectives_vs_mpi_input())
    r = plot(tmp_path, src, "-o", tmp_path / "chart.png", "--collective", "alltoall")
    assert r.returncode == 1 and "broadcast, allgather" in r.stderr, r.stderr

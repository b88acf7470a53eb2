"""The command line: ``hpccoll bench`` under mpiexec (table, JSON, exit status), ``verify``
and ``list``; user errors as one line and exit status 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

MPIEXEC = shutil.which("mpiexec")


def hpccoll(*args: str, ranks: int | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "hpccoll", *args]
    if ranks is not None:
        command = [MPIEXEC, "-n", str(ranks), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"})


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce", "alltoall"])
def test_bench_writes_checked_results(collective, tmp_path):
    out = tmp_path / "bench.json"
    # sizes by a factor of 8 (4 B to 16 KiB): both size bands of the summary, five cells
    done = hpccoll("bench", collective, "-a", "all", "-m", "4:16K:8", "-i", "5", "-x", "1",
                   "--min-time", "0.01", "--json", str(out), ranks=3)
    assert done.returncode == 0, done.stderr
    lines = [l for l in done.stdout.splitlines() if l and not l.startswith("#")]
    report = json.loads(out.read_text())
    results = report["results"]
    assert report["meta"]["ranks"] == 3 and "hpccoll bench" in report["meta"]["command"]
    assert (report["meta"]["min_iterations"], report["meta"]["min_time"]) == (5, 0.01)
    assert report["meta"]["rounds"] == 5        # the algorithms of a size take turns
    assert len(lines) == len(results)
    sizes = sorted({r["bytes"] for r in results})
    assert sizes == [4 << 3 * k for k in range(5)]
    for size in sizes:
        rows = [r for r in results if r["bytes"] == size]
        assert rows[0]["algorithm"] == "native" and rows[0]["vs_native"] == pytest.approx(1.0)
        assert {"native", "ring", "direct"} <= {r["algorithm"] for r in rows}
        native = rows[0]["time_us"]
        for row in rows:
            assert row["wrong"] == 0 and row["time_us"] > 0 and row["mean_us"] > 0
            # the spread brackets the median, and the timed iterations add up to the budget
            assert row["min_us"] <= row["p10_us"] <= row["time_us"] <= row["p90_us"] \
                <= row["max_us"]
            assert row["iterations"] >= 5 and row["timed_s"] >= 0.01
            assert row["timed_s"] >= row["iterations"] * row["mean_us"] * 1e-6
            assert row["vs_native"] == pytest.approx(native / row["time_us"])
            factor = 2 * 2 / 3 if collective == "allreduce" else 2 / 3
            assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * factor)
    table = hpccoll("report", str(out))
    assert table.returncode == 0
    assert f"### {collective}, 3 ranks, float32" in table.stdout
    body = [l for l in table.stdout.splitlines() if l.startswith("| ") and "size" not in l]
    assert len(body) == len(sizes) and body[0].startswith("| 4 |")
    assert "#wrong over the run: 0" in table.stdout
    assert "best vs native by size band: <= 4K: " in table.stdout and "; 8K-512K: " in table.stdout


def test_bench_iterations_follow_the_floor_and_the_time_budget(tmp_path):
    """-i is a floor at every size (2 MiB included), --min-time 0 makes it the exact count,
    and a budget adds iterations until the timed ones (barriers included) last that long;
    the table shows the count and the spread of every cell."""
    out = tmp_path / "bench.json"
    done = hpccoll("bench", "allreduce", "-a", "ring", "-m", "2M", "-i", "4", "-x", "1",
                   "--min-time", "0", "--json", str(out), ranks=2)
    assert done.returncode == 0, done.stderr
    assert [r["iterations"] for r in json.loads(out.read_text())["results"]] == [4, 4]
    done = hpccoll("bench", "allreduce", "-a", "ring", "-m", "2K:4K", "-i", "2", "-x", "2",
                   "--min-time", "0.05", "--rounds", "1", "--json", str(out), ranks=2)
    assert done.returncode == 0, done.stderr
    assert "; one algorithm after another" in done.stdout
    results = json.loads(out.read_text())["results"]
    assert len(results) == 4
    for row in results:
        assert row["iterations"] >= 2 and row["timed_s"] >= 0.05
        assert row["min_us"] <= row["p10_us"] <= row["time_us"] <= row["p90_us"] <= \
            row["max_us"]
    header, *rows = [l.split() for l in done.stdout.splitlines() if not l.startswith("# ")
                     or "size(B)" in l]
    assert header[1:6] == ["size(B)", "algorithm", "iters", "time(us)", "spread"]
    for row, result in zip(rows, results):
        assert int(row[2]) == result["iterations"]
        spread = (result["p90_us"] - result["p10_us"]) / result["time_us"]
        assert row[4] == f"{spread:.0%}"


def test_band_summary_gives_the_range_and_the_winners_per_band():
    from hpccoll.tools.results import band_summary
    best = {8: {"algorithm": "ring", "vs_native": 0.5}, 4096: {"algorithm": "direct",
            "vs_native": 0.25}, 2048: {"algorithm": "ring", "vs_native": 0.3},
            1 << 20: {"algorithm": "bruck", "vs_native": 1.5}}
    assert band_summary(best) == ("best vs native by size band: <= 4K: 0.25-0.50x "
                                  "(ring, direct); >= 1M: 1.50-1.50x (bruck)")


def test_bench_rejects_an_algorithm_that_does_not_apply():
    done = hpccoll("bench", "alltoall", "-a", "xor", "-m", "8", ranks=3)
    assert done.returncode == 2
    assert "cannot serve alltoall on 3 ranks" in done.stderr


def test_bench_rejects_bad_sizes():
    done = hpccoll("bench", "allreduce", "-m", "64:8", ranks=1)
    assert done.returncode == 2 and "bad size range" in done.stderr


@pytest.mark.mpi(ranks=[2], timeout=60)
def test_data_check_counts_wrong_elements(mpi_ranks, comm):
    """A run that leaves the output alone is counted wrong element by element, on all ranks."""
    from hpccoll.tools import bench
    case = bench.Case(comm, "allgather", 64, np.dtype("float32"))
    assert case.wrong(case.runner("ring")) == 0
    nonzero = comm.allreduce(int(np.count_nonzero(case.expected)))
    assert nonzero > 0
    assert case.wrong(lambda: None) == nonzero


def test_verify_command_reports_each_algorithm():
    done = hpccoll("verify", "--collective", "allgather", "--max-ranks", "6",
                   "--max-power-of-two", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = done.stdout.splitlines()[1:]
    assert {r.split()[1] for r in rows} >= {"ring", "direct"}
    assert all(r.endswith("ok") for r in rows)


def test_list_markdown_has_every_algorithm():
    from hpccoll import registry
    done = hpccoll("list", "--markdown")
    assert done.returncode == 0
    rows = done.stdout.splitlines()[2:]
    assert len(rows) == len(registry.algorithms())


def test_bench_plots(tmp_path):
    png = tmp_path / "bench.png"
    done = hpccoll("bench", "allgather", "-a", "ring", "-m", "8:1K", "-i", "3", "-x", "1",
                   "--min-time", "0", "--plot", str(png), ranks=2)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_tune_writes_a_table_that_auto_follows(tmp_path):
    from hpccoll import tuning
    table = tmp_path / "tuning.json"
    for ranks in (2, 3):          # merged: both rank counts end up in one table
        done = hpccoll("tune", "allreduce", "alltoall", "-m", "8:4K:8", "-i", "5",
                       "--min-time", "0", "-x", "1", "--out", str(table), ranks=ranks)
        assert done.returncode == 0, done.stderr
    loaded = tuning.load_table(str(table), table.stat().st_mtime)
    assert [e["ranks"] for e in loaded["collectives"]["allreduce"]] == [[2, 2], [3, 3]]
    vendor = subprocess.run([sys.executable, "-c", "from mpi4py import MPI; "
                             "print(MPI.get_vendor()[0])"], capture_output=True, text=True)
    entry, rule = tuning.lookup(loaded, "alltoall", 3, 64, vendor.stdout.strip())
    name = rule["algorithm"]
    assert entry["ranks"] == [3, 3] and entry["library"] == vendor.stdout.strip()
    assert tuning.lookup(loaded, "alltoall", 3, 64, "another MPI") is None
    explained = subprocess.run(
        [sys.executable, "-m", "hpccoll", "explain", "alltoall", "--bytes", "64",
         "--ranks", "3"], capture_output=True, text=True,
        env={**os.environ, "HPCCOLL_TUNING_FILE": str(table)})
    assert f"auto picks {name} (tuning file" in explained.stdout


def test_tune_decides_from_the_sweeps_of_several_launches(tmp_path):
    """--sweeps: each launch adds its sweeps to the file and decides from all of them; a file
    whose sweeps timed other algorithms is refused (exit 2, nothing written over)."""
    sweeps, table = tmp_path / "sweeps.json", tmp_path / "tuning.json"
    quick = ["allreduce", "-m", "8:64:8", "-i", "3", "--min-time", "0", "-x", "1",
             "--repeat", "1", "--sweeps", str(sweeps), "--out", str(table)]
    for launch in (1, 2):
        done = hpccoll("tune", *quick, ranks=2)
        assert done.returncode == 0, done.stderr
        (key, recorded), = json.loads(sweeps.read_text()).items()
        assert key.startswith("allreduce, 2 ranks, ") and ", blocking, float32, " in key
        assert {size for size, _, _ in recorded} == {8, 64}
        assert {"native", "ring"} <= {name for _, name, _ in recorded}
        assert all(len(times) == launch and min(times) > 0 for _, _, times in recorded)
    written = table.read_text()
    edited = json.loads(sweeps.read_text())
    edited[key].append([8, "another", [1.0]])       # timed once, by another algorithm set
    sweeps.write_text(json.dumps(edited))
    done = hpccoll("tune", *quick, ranks=2)
    assert done.returncode == 2
    assert "timed other algorithms or sizes than this run: start a new file" in done.stderr
    assert table.read_text() == written


def test_bench_and_tune_time_the_nonblocking_and_persistent_forms(tmp_path):
    """--form times every algorithm and native (mpi4py's I<Collective> + Wait, or a
    <Collective>_init request started and waited on, freed after its cell: MPICH names any
    left at exit) in that form, each result checked; tune
    --form writes an entry for that form, which auto follows for calls of that form only."""
    out = tmp_path / "bench.json"
    for form, header in (("nonblocking", "non-blocking calls (start, wait)"),
                         ("persistent", "persistent calls (one request a cell; start, wait)")):
        done = hpccoll("bench", "allreduce", "-a", "ring,hpccoll-native", "-m", "8:4K:8",
                       "-i", "5", "-x", "1", "--min-time", "0", "--form", form, "--json",
                       str(out), ranks=2)
        assert done.returncode == 0, done.stderr
        assert "persistent request" not in done.stderr, done.stderr     # (all freed)
        assert f"2 ranks, float32, {header}" in done.stdout, done.stdout
        report = json.loads(out.read_text())
        assert report["meta"]["form"] == form
        rows = report["results"]
        assert {r["algorithm"] for r in rows} == {"native", "ring", "hpccoll-native"}
        assert len(rows) == 3 * 4 and all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows)
    table = tmp_path / "tuning.json"
    for form in ("blocking", "persistent"):
        done = hpccoll("tune", "allreduce", "-m", "8:64:8", "-i", "5", "--min-time", "0",
                       "-x", "1", "--repeat", "1", "--form", form, "--out", str(table),
                       ranks=2)
        assert done.returncode == 0, done.stderr
    from hpccoll import tuning
    loaded = tuning.load_table(str(table), table.stat().st_mtime)
    assert [e.get("form") for e in loaded["collectives"]["allreduce"]] == [None, "persistent"]
    persistent = loaded["collectives"]["allreduce"][1]
    persistent["rules"] = [{"max_bytes": None, "algorithm": "direct"}]     # (a choice to see)
    table.write_text(json.dumps(loaded))
    for form, picks in (("persistent", "direct"), ("blocking", None)):
        explained = subprocess.run(
            [sys.executable, "-m", "hpccoll", "explain", "allreduce", "--bytes", "8",
             "--ranks", "2", "--form", form], capture_output=True, text=True,
            env={**os.environ, "HPCCOLL_TUNING_FILE": str(table)})
        assert explained.returncode == 0, explained.stderr
        assert ("on persistent calls" in explained.stdout) == (picks is not None)
        if picks:
            assert f"allreduce, persistent, 8 B, 2 rank(s): auto picks {picks} (tuning file" \
                in explained.stdout


def test_explain_uses_the_environment_then_the_cost_model():
    env = {**os.environ, "HPCCOLL_ALLGATHER_ALGORITHM": "ring"}
    done = subprocess.run([sys.executable, "-m", "hpccoll", "explain", "allgather",
                           "--bytes", "1M", "--ranks", "4"], capture_output=True, text=True,
                          env=env)
    assert "auto picks ring (environment: HPCCOLL_ALLGATHER_ALGORITHM=ring)" in done.stdout
    assert "executor: hpccoll's schedule executor in Python for a call's first run, " \
        "compiled from its second run" in done.stdout and \
        "without --ranks, for this library's answer" in done.stdout
    assert "blocking repeat on a compiled executor: served from C (the arguments matched" \
        in done.stdout          # (the C entry is built: tests/unit/test_entry.py)
    done = subprocess.run([sys.executable, "-m", "hpccoll", "explain", "allgather",
                           "--bytes", "1M", "--ranks", "4", "--dtype", "float16"],
                          capture_output=True, text=True, env=env)
    assert "executor: hpccoll's schedule executor in Python (the compiled executor takes no " \
        "float16)" in done.stdout      # (the predicate the library's answer comes from too)
    one_rank = "executor: on one rank, a blocking call repeated on the arrays of the first " \
        "is NumPy's copy"
    assert one_rank not in done.stdout
    for dtype, executor in (          # without --ranks (in a job: here a singleton one)
            ("float32", r"executor: compiled from a call's second run on the same buffers: "
                        r"each step's MPI_Irecv, MPI_Isend and MPI_Testsome of (MPICH|Open "
                        r"MPI)"),
            ("float16", r"executor: hpccoll's schedule executor in Python \(the compiled "
                        r"executor takes no float16\)")):
        done = subprocess.run([sys.executable, "-m", "hpccoll", "explain", "allgather",
                               "--bytes", "1M", "--dtype", dtype], capture_output=True,
                              text=True, env=env)
        assert re.search(executor, done.stdout), done.stdout + done.stderr
        assert one_rank in done.stdout
    env = {**os.environ, "HPCCOLL_ALLTOALL_ALGORITHM": "xor"}
    done = subprocess.run([sys.executable, "-m", "hpccoll", "explain", "alltoall",
                           "--bytes", "8", "--ranks", "6"], capture_output=True, text=True,
                          env=env)
    assert "passed over: HPCCOLL_ALLTOALL_ALGORITHM=xor does not apply" in done.stdout
    assert "xor                  does not apply: needs p is a power of two" in done.stdout


def test_bench_straggler_injection(tmp_path):
    """A rank that starts every call 20 ms late makes every algorithm's time at least 20 ms;
    one that pauses 5 ms before every step (probability 1) adds 5 ms per step of a scheduled
    algorithm: the ring allreduce on 3 ranks has 4 steps."""
    out = tmp_path / "late.json"
    done = hpccoll("bench", "allreduce", "-a", "ring,direct", "-m", "1K", "-i", "3", "-x", "1",
                   "--min-time", "0", "--delay", "1:20000", "--json", str(out), ranks=3)
    assert done.returncode == 0, done.stderr
    assert "straggler: rank 1 starts 20000 us late" in done.stdout
    assert all(r["time_us"] >= 20000 for r in json.loads(out.read_text())["results"])
    done = hpccoll("bench", "allreduce", "-a", "ring", "-m", "1K", "-i", "3", "-x", "1",
                   "--min-time", "0", "--pause", "2:1:5000", "--json", str(out), ranks=3)
    assert done.returncode == 0, done.stderr
    ring = [r for r in json.loads(out.read_text())["results"] if r["algorithm"] == "ring"]
    assert ring[0]["time_us"] >= 4 * 5000
    done = hpccoll("bench", "allreduce", "-m", "1K", "--pause", "1:2:5", ranks=2)
    assert done.returncode == 2 and "probability must be in [0, 1]" in done.stderr


def test_rules_keep_a_choice_within_five_percent():
    from hpccoll import tuning
    timings = {8: {"a": [1.0], "b": [2.0]}, 16: {"a": [1.03], "b": [1.0]},
               32: {"a": [2.0], "b": [1.0]}, 64: {"a": [2.0], "b": [1.0]}}
    assert tuning.rules_from_timings(timings) == [{"max_bytes": 16, "algorithm": "a"},
                                                  {"max_bytes": None, "algorithm": "b"}]


@pytest.mark.parametrize("args, message", [
    (["explain", "allreduce", "--bytes", "12Q"],
     "hpccoll explain: error: argument --bytes: bad size '12Q'"),
    (["explain", "--ranks", "0", "allreduce", "--bytes", "8"],
     "hpccoll explain: error: argument --ranks: must be at least 1, got 0"),
    (["explain", "allreduce"],
     "hpccoll explain: error: the following arguments are required: --bytes"),
    (["explain", "allreduce", "--bytes", "8", "--ranks", "2", "--topology", "nonsense"],
     "hpccoll explain: error: bad topology spec 'nonsense'"),
    (["bench", "--dtype", "bogus", "allreduce"],
     "hpccoll bench: error: argument --dtype: unsupported dtype 'bogus'"),
    (["bench", "allreduce", "--json", "/nonexistent/dir/x.json"],
     "hpccoll bench: error: argument --json: cannot write /nonexistent/dir/x.json: "
     "no directory /nonexistent/dir"),
    (["bench", "allreduce", "-i", "0"],
     "hpccoll bench: error: argument -i/--iterations: must be at least 1"),
    (["bench", "allreduce", "--min-time", "-1"],
     "hpccoll bench: error: argument --min-time: must be a finite number of seconds >= 0, "
     "got -1"),
    (["bench", "allreduce", "--min-time", "soon"],
     "hpccoll bench: error: argument --min-time: must be a number of seconds, got 'soon'"),
    (["bench", "allreduce", "-a", "nosuch", "-m", "8"],
     "hpccoll bench: error: unknown algorithm 'nosuch'"),
    (["tune", "nosuch"], "hpccoll tune: error: argument COLLECTIVE: unknown collective 'nosuch'"),
    (["bench", "allreduce", "-m", "8", "--form", "persistent", "--cold"],
     "hpccoll bench: error: a persistent request's buffers are fixed: --cold cannot rotate"),
    (["tune", "allreduce", "--simulate", "--platform", "switch:n=4", "--form", "nonblocking"],
     "hpccoll tune: error: --simulate replays schedules, not an MPI library's calls"),
    (["report", "missing.json"], "hpccoll report: error: argument FILE: cannot read missing.json"),
    (["verify", "--algorithm", "nosuch"], "hpccoll verify: error: no algorithm 'nosuch'"),
    (["nosuch"], "hpccoll: error: argument command: invalid choice: 'nosuch'"),
    (["jobs", "status", "/nonexistent/run"],
     "hpccoll jobs status: error: /nonexistent/run: no such run directory"),
])
def test_user_errors_are_one_line_and_exit_2(args, message):
    done = hpccoll(*args)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(message), done.stderr


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = hpccoll("report", str(bad))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert f"hpccoll report: error: argument FILE: {bad} is not JSON" in done.stderr
    other = tmp_path / "other.json"
    other.write_text("[]")
    done = hpccoll("report", str(other))
    assert done.returncode == 2
    assert f"{other} is not an 'hpccoll bench --json' file" in done.stderr
    done = hpccoll("tune", "allreduce", "--out", str(bad), ranks=1)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert f"hpccoll tune: error: tuning file {bad} is not JSON" in done.stderr


@pytest.mark.parametrize("table", ["{not json", "[]", '{"format": "hpccoll-tuning/1", '
                                   '"collectives": {"allreduce": [{}]}}'])
def test_a_malformed_tuning_file_is_a_user_error(table, tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text(table)
    done = subprocess.run([sys.executable, "-m", "hpccoll", "explain", "allreduce", "--bytes",
                           "8", "--ranks", "2"], capture_output=True, text=True,
                          env={**os.environ, "HPCCOLL_TUNING_FILE": str(path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("hpccoll explain: error: ")
    assert len(done.stderr.splitlines()) == 1


def test_a_user_error_under_mpiexec_is_reported_once():
    for args in (["bench", "--dtype", "bogus", "allreduce"],          # while parsing
                 ["bench", "alltoall", "-a", "xor", "-m", "8"]):       # once MPI runs
        done = hpccoll(*args, ranks=3)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        # one line from hpccoll; Open MPI's launcher adds its own report of the exit status
        ours = [line for line in done.stderr.splitlines() if line.startswith("hpccoll")]
        assert len(ours) == 1 and ours[0].startswith("hpccoll bench: error: "), done.stderr

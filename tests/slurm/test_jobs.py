"""SLURM batch jobs: ``hpccoll jobs render`` (every template, and the requests it refuses),
``collect`` and ``status``; then every rendered template submitted with ``sbatch`` to a real
one-node SLURM started here (tests/slurm/slurm.py), including jobs that fail, which the tooling
must report as failed.

The SLURM tests install slurmctld/slurmd/slurm-client when they are missing (as root, with
apt-get) and are skipped only when that cannot be done.  The cluster starts once for this
module; every job is submitted at once and waited for together (2-4 tasks each, tiny sizes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurm

from hpccoll.tools import cli
from hpccoll.tools.jobs import rendering, scaling
from hpccoll.tools.jobs.slurm import status

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ("bench", "scaling", "verify", "tune")
JOB_ENV = ["--env", "MPIR_CVAR_ENABLE_HEAVY_YIELD=1", "--env", "HPCCOLL_TIMEOUT=120"]


def hpccoll(*args: str, env: dict | None = None, cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpccoll", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd or ROOT, check=False)


def render(tmp: Path, template: str, *args: str, name: str | None = None) -> Path:
    out = tmp / f"{name or template}.sbatch"
    code = cli.main(["jobs", "render", template, "--out", str(out),
                     "--output-dir", str(tmp / "runs"), *args])
    assert code == 0
    return out


# ------------------------------------------------------------------------------------------
# Rendering

def test_every_template_is_found_and_documents_its_variables():
    found = rendering.templates()
    assert set(TEMPLATES) <= set(found)
    for name in TEMPLATES:
        text = found[name].read_text()
        header = text.split("\n#SBATCH --job-name")[0]
        assert "Variables" in header and "Submit with" in header, name
        for variable in ("LAUNCHER", "OUTPUT_DIR", "HPCCOLL_PYTHON"):
            assert variable in header, (name, variable)
        variables = re.findall(r"^([A-Z_]+)=\(?\{\{", text, re.MULTILINE)
        assert variables, name
        for variable in variables:
            assert variable in header, (name, variable)


@pytest.mark.parametrize("template", TEMPLATES)
def test_render_fills_the_template(template, tmp_path):
    nodes = "1,2" if template == "scaling" else "2"
    out = render(tmp_path, template, "--nodes", nodes, "--ntasks-per-node", "4",
                 "--partition", "batch", "--time", "1-02:00:00", "--launcher", "mpiexec",
                 "--sbatch=--qos=debug", "--env", "A=b c", "--setup", "module load mpi")
    text = out.read_text()
    assert os.access(out, os.X_OK)
    assert "{{" not in text and "}}" not in text
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    sbatch = [l for l in text.splitlines() if l.startswith("#SBATCH")]
    assert "#SBATCH --partition=batch" in sbatch and "#SBATCH --time=1-02:00:00" in sbatch
    assert "#SBATCH --qos=debug" in sbatch
    assert f"#SBATCH --nodes={nodes.split(',')[0]}" in sbatch
    assert f"#SBATCH --output={tmp_path / 'runs'}/%x-%j.out" in sbatch
    assert not any("account" in l for l in sbatch), "empty --account must be left out"
    assert ("#SBATCH --exclusive" in sbatch) == (template != "verify")
    assert "LAUNCHER=mpiexec" in text and "export A='b c'" in text and "module load mpi" in text
    python, venv = rendering._python(None)     # this interpreter, and its venv if any
    assert python == sys.executable and f"HPCCOLL_PYTHON={python}" in text
    assert f"HPCCOLL_VENV={venv or chr(39) * 2}" in text
    assert (tmp_path / "runs").is_dir()
    if template == "scaling":
        assert "POINTS=(1x4 2x4)" in text


def test_render_points_at_another_python(tmp_path):
    """--python takes a virtual environment (activated in the job) or an interpreter."""
    _, venv = rendering._python(None)
    if not venv:
        pytest.skip("the tests do not run in a virtual environment")
    text = render(tmp_path, "bench", "--python", venv).read_text()
    assert f"HPCCOLL_VENV={venv}\n" in text and f"HPCCOLL_PYTHON={venv}/bin/python\n" in text
    system = shutil.which("bash")                      # an executable that is no Python
    code = cli.main(["jobs", "render", "bench", "--python", system])
    assert code == 2


@pytest.mark.parametrize("args, message", [
    (["bench", "--nodes", "0"], "--nodes must be at least 1"),
    (["bench", "--nodes", "two"], "whole number"),
    (["bench", "--ntasks-per-node", "-1"], "--ntasks-per-node must be at least 1"),
    (["bench", "--nodes", "1,2"], "scaling template"),
    (["scaling", "--nodes", "1,1"], "twice"),
    (["bench", "--time", "1:99"], "bad time"),
    (["bench", "--time", "soon"], "bad time"),
    (["bench", "--time", "0"], "zero"),
    (["nosuch"], "unknown template 'nosuch'; available: bench, scaling, tune, verify"),
    (["bench", "--launcher", "aprun"], "unknown launcher 'aprun'"),
    (["bench", "--collectives", "alltoallv"], "unknown collective 'alltoallv' (a collective "
                                              "hpccoll has, but no benchmark for it)"),
    (["bench", "--collectives", "alltoallv"], "no benchmark"),
    (["bench", "-a", "ring,nosuch"], "unknown algorithm 'nosuch'"),
    (["bench", "--collectives", "alltoall", "-a", "xor", "--ntasks-per-node", "3"],
     "cannot serve alltoall on 3 ranks"),
    (["bench", "-m", "64:8"], "bad size range"),
    (["bench", "--dtype", "float128"], "unsupported dtype"),
    (["bench", "--dtype", "nonsense"], "unsupported dtype"),
    (["bench", "-i", "0"], "--iterations must be at least 1"),
    (["bench", "--job-name", "a b"], "bad job name"),
    (["bench", "--partition", "a;rm"], "bad partition"),
    (["bench", "--bench-args", "--json x.json"], "set by the template"),
    (["bench", "--bench-args", "--bogus 1"], "unrecognized arguments"),
    (["bench", "--verify-args", "--max-ranks 4"], "does not apply to the bench template"),
    (["verify", "-i", "5"], "does not apply to the verify template"),
    (["verify", "--verify-args", "--max-ranks x"], "invalid int value"),
    (["tune", "-a", "ring"], "does not apply to the tune template"),
    (["bench", "--env", "1X=2"], "VARIABLE=VALUE"),
    (["bench", "--python", "/nonexistent/python"], "no executable interpreter"),
    (["bench", "--output-dir", "/tmp/with space"], "characters"),
])
def test_render_refuses_impossible_requests(args, message, tmp_path, capsys):
    code = cli.main(["jobs", "render", *args, "--out", str(tmp_path / "x.sbatch")])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "x.sbatch").exists()


def test_render_command_line(tmp_path):
    done = hpccoll("jobs", "render", "bench", "--nodes", "0")
    assert done.returncode == 2
    assert "hpccoll jobs render: error: --nodes must be at least 1" in done.stderr
    done = hpccoll("jobs", "render", "verify", "--output-dir", str(tmp_path))
    assert done.returncode == 0 and done.stdout.startswith("#!/bin/bash")


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("5:30", 330), ("01:00:00", 3600), ("2-0", 172800), ("1-02:03", 93780),
    ("1-00:00:01", 86401), ("UNLIMITED", None)])
def test_parse_time(text, seconds):
    assert rendering.parse_time(text) == seconds


# ------------------------------------------------------------------------------------------
# collect and status on run directories made by hand

def fake_run(root: Path, name: str, ranks: int, nodes: int, state: str | None,
             wrong: int = 0, time_us: float = 10.0) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "job.json").write_text(json.dumps({"template": "bench", "job_name": name,
                                              "job_id": f"local-{name}", "nodes": nodes,
                                              "ntasks": ranks, "log": str(run) + ".out"}))
    if state:
        failed = [] if state == "COMPLETED" else ["bench-allreduce"]
        (run / "status.json").write_text(json.dumps({
            "state": state, "exit_code": 0 if state == "COMPLETED" else 1, "phase": "done",
            "failed_steps": failed,
            "steps": [{"name": "bench-allreduce", "exit_code": 0 if not failed else 2}]}))
    rows = [{"collective": "allreduce", "algorithm": a, "ranks": ranks, "dtype": "float32",
             "bytes": b, "count": b // 4, "iterations": 3, "time_us": time_us * ranks,
             "algbw_gbs": 0.1, "busbw_gbs": 0.2 * ranks, "vs_native": 1.0, "wrong": wrong}
            for b in (8, 64) for a in ("native", "ring")]
    (run / "bench-allreduce.json").write_text(json.dumps({"meta": {"ranks": ranks},
                                                          "results": rows}))
    (run / "bench-allreduce.log").write_text("line 1\nTraceback: boom\n")
    return run


def test_collect_merges_runs_into_a_scaling_table(tmp_path, capsys):
    fake_run(tmp_path / "runs", "a-1", 2, 1, "COMPLETED")
    fake_run(tmp_path / "runs", "a-2", 8, 2, "COMPLETED")
    prefix = tmp_path / "out" / "table"
    code = scaling.collect([str(tmp_path / "runs")], str(prefix), with_plot=True)
    assert code == 0, capsys.readouterr()
    table = json.loads(Path(f"{prefix}.json").read_text())
    assert table["points"] == [{"ranks": 2, "nodes": 1}, {"ranks": 8, "nodes": 2}]
    assert len(table["results"]) == 8 and all(r["run"] for r in table["results"])
    md = Path(f"{prefix}.md").read_text()
    assert "| algorithm | size | 2 ranks (1 node) | 8 ranks (2 nodes) |" in md
    assert "| ring | 64 | 20.0 | 80.0 |" in md            # time table
    assert "| ring | 64 | 0.4 | 1.6 |" in md              # busbw table
    assert Path(f"{prefix}.png").stat().st_size > 0


def test_collect_and_status_report_failed_and_unfinished_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    good = fake_run(runs, "g-1", 2, 1, "COMPLETED")
    bad = fake_run(runs, "b-2", 2, 1, "FAILED")
    wrong = fake_run(runs, "w-3", 4, 1, "COMPLETED", wrong=5)
    gone = fake_run(runs, "k-4", 4, 1, None)
    code = scaling.collect([str(p) for p in (good, bad, wrong, gone)], str(tmp_path / "t"))
    captured = capsys.readouterr()
    assert code == 1
    assert "FAILED" in captured.err and "b-2" in captured.err and "w-3" in captured.err \
        and "k-4" in captured.err and "g-1" not in captured.err
    assert "step bench-allreduce exited 2" in captured.out and "Traceback: boom" in captured.out
    assert "20 wrong element(s)" in captured.out
    assert "no status.json" in captured.out
    md = (tmp_path / "t.md").read_text()
    assert "Runs that did not complete cleanly" in md
    assert status([str(good)]) == 0
    assert status([str(bad)]) == 1
    done = hpccoll("jobs", "collect", str(tmp_path / "nothing-here"))
    assert done.returncode == 2 and "no such run directory" in done.stderr


def test_a_rendered_job_runs_by_hand_without_slurm(tmp_path):
    """bash FILE outside SLURM: a local run with mpiexec (a way to try a template out)."""
    script = render(tmp_path, "bench", "--ntasks-per-node", "2", "--launcher", "mpiexec",
                    "--collectives", "allgather", "-a", "ring", "-m", "8", "-i", "2", "-x", "1",
                    "--job-name", "local", *JOB_ENV)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300,
                          env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = (tmp_path / "runs").glob("local-local-*")
    assert json.loads((run / "status.json").read_text())["state"] == "COMPLETED"
    results = json.loads((run / "bench-allgather.json").read_text())["results"]
    assert {r["algorithm"] for r in results} == {"native", "ring"}
    assert all(r["wrong"] == 0 and r["ranks"] == 2 for r in results)


# ------------------------------------------------------------------------------------------
# A real SLURM

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm.ensure_installed()
    if reason:
        pytest.skip(f"no SLURM: {reason}")
    cluster = slurm.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as error:
        cluster.shutdown()
        pytest.fail(f"SLURM did not start:\n{error}")
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    """Every template rendered and submitted at once, plus jobs that must fail; waits for all.
    Returns {label: job id} (scaling: a list), the work directory and the final states."""
    work = tmp_path_factory.mktemp("jobs")
    common = ["--time", "10", "--no-exclusive", "--partition", "test", *JOB_ENV]
    ids: dict[str, object] = {}
    # A job cancelled while its step runs (SIGTERM, as at the time limit): scancel'd below.
    ids["cancelled"] = cluster.sbatch(render(
        work, "bench", "--ntasks-per-node", "2", "--collectives", "allreduce", "-a", "ring",
        "-m", "8", "-i", "100000000", "--job-name", "t-cancelled", *common,
        name="cancelled"), cwd=work)
    ids["bench"] = cluster.sbatch(render(
        work, "bench", "--ntasks-per-node", "3", "--collectives", "allreduce,allgather",
        "-a", "ring,direct", "-m", "8:64", "-i", "2", "-x", "1", "--job-name", "t-bench",
        *common), cwd=work)
    ids["verify"] = cluster.sbatch(render(
        work, "verify", "--ntasks-per-node", "2", "--collectives", "allreduce,alltoall",
        "-a", "ring,direct", "-m", "4:32", "--job-name", "t-verify",
        "--verify-args", "--collective allreduce --algorithm ring --max-ranks 5 "
                         "--max-power-of-two 8", *common), cwd=work)
    ids["tune"] = cluster.sbatch(render(
        work, "tune", "--ntasks-per-node", "2", "--collectives", "allreduce", "-m", "8:32",
        "-i", "2", "-x", "1", "--job-name", "t-tune", "--tuning-table",
        str(work / "cluster-tuning.json"), *common), cwd=work)
    # A straggler past the collective deadline: the library raises CollectiveTimeout, the
    # ranks exit non-zero, the step and the job fail.
    ids["straggler"] = cluster.sbatch(render(
        work, "bench", "--ntasks-per-node", "2", "--collectives", "allreduce", "-a", "ring",
        "-m", "8", "-i", "1", "-x", "0", "--job-name", "t-straggler", *common,
        "--env", "HPCCOLL_TIMEOUT=0.5", "--bench-args", "--delay 1:1500000",
        name="straggler"), cwd=work)
    # A setup command that fails (a module that is not there): nothing runs, the job fails.
    ids["setup"] = cluster.sbatch(render(
        work, "verify", "--ntasks-per-node", "2", "--job-name", "t-setup", *common,
        "--setup", "module load hpccoll-no-such-module", name="setup"), cwd=work)
    # The scaling study submitted the wrong way (sbatch instead of bash): refused.
    scaling = render(work, "scaling", "--nodes", "1", "--ntasks-per-node", "2,3",
                     "--launcher", "mpiexec", "--collectives", "allreduce", "-a", "ring",
                     "-m", "8:16", "-i", "2", "-x", "1", "--job-name", "t-scaling", *common)
    ids["scaling-sbatch"] = cluster.sbatch(scaling, cwd=work)
    done = subprocess.run(["bash", str(scaling)], capture_output=True, text=True, timeout=120,
                          env=cluster.env, cwd=work, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ids["scaling"] = done.stdout.split()
    assert len(ids["scaling"]) == 2, done.stdout + done.stderr
    step_log = work / "runs" / f"t-cancelled-{ids['cancelled']}" / "bench-allreduce.log"
    deadline = time.monotonic() + 120
    while not (step_log.is_file() and "native" in step_log.read_text()):
        assert time.monotonic() < deadline, f"job {ids['cancelled']} did not start its step"
        time.sleep(0.5)
    cluster.command("scancel", ids["cancelled"], check=True)
    everything = [j for v in ids.values() for j in (v if isinstance(v, list) else [v])]
    states = cluster.wait(everything, timeout=600)
    return ids, work, states


def run_dir(work: Path, name: str, job_id: str) -> Path:
    path = work / "runs" / f"{name}-{job_id}"
    assert path.is_dir(), sorted(p.name for p in (work / "runs").iterdir())
    return path


def bench_rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def test_bench_job_completes_with_results(submitted, cluster):
    ids, work, states = submitted
    assert states[ids["bench"]] == "COMPLETED"
    run = run_dir(work, "t-bench", ids["bench"])
    job = json.loads((run / "job.json").read_text())
    assert (job["template"], job["nodes"], job["ntasks"], job["launcher"]) == \
        ("bench", 1, 3, "srun")
    assert json.loads((run / "status.json").read_text())["state"] == "COMPLETED"
    for collective in ("allreduce", "allgather"):
        rows = bench_rows(run / f"bench-{collective}.json")
        assert {r["algorithm"] for r in rows} == {"native", "ring", "direct"}
        assert {r["bytes"] for r in rows} == {8, 16, 32, 64}
        assert all(r["ranks"] == 3 and r["wrong"] == 0 for r in rows)
    assert (work / "runs" / f"t-bench-{ids['bench']}.out").is_file()
    assert cluster.job(ids["bench"])["ExitCode"] == "0:0"


def test_verify_job_checks_schedules_and_mpi_results(submitted):
    ids, work, states = submitted
    assert states[ids["verify"]] == "COMPLETED"
    run = run_dir(work, "t-verify", ids["verify"])
    log = (run / "verify.log").read_text()
    assert "allreduce" in log and " ok" in log and "FAILED" not in log
    for collective in ("allreduce", "alltoall"):
        rows = bench_rows(run / f"check-{collective}.json")
        assert rows and all(r["wrong"] == 0 and r["ranks"] == 2 for r in rows)


def test_tune_job_writes_the_decision_table(submitted):
    ids, work, states = submitted
    assert states[ids["tune"]] == "COMPLETED"
    run = run_dir(work, "t-tune", ids["tune"])
    for table in (run / "tuning.json", work / "cluster-tuning.json"):
        data = json.loads(table.read_text())
        assert data["format"] == "hpccoll-tuning/1"
        entry = data["collectives"]["allreduce"][0]
        assert entry["ranks"] == [2, 2] and entry["rules"][-1]["max_bytes"] is None


def test_scaling_study_runs_one_job_per_size_in_order(submitted, cluster):
    ids, work, states = submitted
    first, second = ids["scaling"]
    assert states[first] == states[second] == "COMPLETED"
    jobs_seen = [cluster.job(j) for j in (first, second)]
    assert jobs_seen[0]["NumTasks"] == "2" and jobs_seen[1]["NumTasks"] == "3"
    assert jobs_seen[1]["StartTime"] >= jobs_seen[0]["EndTime"], "afterany dependency"
    records = [json.loads((run_dir(work, "t-scaling", j) / "job.json").read_text())
               for j in (first, second)]
    assert records[0]["study"] == records[1]["study"] != ""
    assert [r["point"] for r in records] == ["1/2", "2/2"]
    assert [r["launcher"] for r in records] == ["mpiexec", "mpiexec"]
    for job_id, ranks in ((first, 2), (second, 3)):
        rows = bench_rows(run_dir(work, "t-scaling", job_id) / "bench-allreduce.json")
        assert {r["ranks"] for r in rows} == {ranks} and all(r["wrong"] == 0 for r in rows)


def test_failing_jobs_are_reported_failed(submitted, cluster):
    ids, work, states = submitted
    for label in ("straggler", "setup", "scaling-sbatch"):
        assert states[ids[label]] == "FAILED", (label, states)
        assert cluster.job(ids[label])["ExitCode"] != "0:0"
    straggler = run_dir(work, "t-straggler", ids["straggler"])
    status = json.loads((straggler / "status.json").read_text())
    assert status["state"] == "FAILED" and status["failed_steps"] == ["bench-allreduce"]
    assert "HPCCOLL_TIMEOUT" in (straggler / "bench-allreduce.log").read_text()
    setup = json.loads((run_dir(work, "t-setup", ids["setup"]) / "status.json").read_text())
    assert (setup["state"], setup["phase"], setup["steps"]) == ("FAILED", "setup", [])
    refused = run_dir(work, "t-scaling", ids["scaling-sbatch"])
    assert "submit it with 'bash FILE'" in \
        (work / "runs" / f"t-scaling-{ids['scaling-sbatch']}.out").read_text()
    assert json.loads((refused / "status.json").read_text())["state"] == "FAILED"

    cancelled = run_dir(work, "t-cancelled", ids["cancelled"])
    assert states[ids["cancelled"]] == "CANCELLED"
    status = json.loads((cancelled / "status.json").read_text())
    assert (status["state"], status["signal"], status["running_step"]) == \
        ("TERMINATED", "TERM", "bench-allreduce")

    done = hpccoll("jobs", "status", str(cancelled), env=cluster.env)
    assert done.returncode == 1 and "(SLURM: CANCELLED)" in done.stdout
    assert "during step bench-allreduce (signal TERM)" in done.stdout

    done = hpccoll("jobs", "status", str(straggler), env=cluster.env)
    assert done.returncode == 1
    assert "FAILED" in done.stdout and "(SLURM: FAILED)" in done.stdout
    assert "step bench-allreduce exited" in done.stdout


def test_collect_merges_the_jobs_and_reports_the_failures(submitted, cluster, tmp_path):
    ids, work, _ = submitted
    scaling = [run_dir(work, "t-scaling", j) for j in ids["scaling"]]
    bench = run_dir(work, "t-bench", ids["bench"])
    prefix = tmp_path / "scaling"
    done = hpccoll("jobs", "collect", *map(str, scaling + [bench]), "--out", str(prefix),
                   "--plot", env=cluster.env)
    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads(Path(f"{prefix}.json").read_text())
    assert table["points"] == [{"ranks": 2, "nodes": 1}, {"ranks": 3, "nodes": 1}]
    assert {r["collective"] for r in table["results"]} == {"allreduce", "allgather"}
    assert all(r["state"] == "COMPLETED" and r["ok"] for r in table["runs"])
    md = Path(f"{prefix}.md").read_text()
    assert "## allreduce, float32: bus bandwidth (GB/s)" in md
    assert "| ring | 8 |" in md and "2 ranks (1 node) | 3 ranks (1 node)" in md
    assert Path(f"{prefix}.png").stat().st_size > 0

    # Everything at once (the directory of run directories): the failed jobs make it exit 1.
    done = hpccoll("jobs", "collect", str(work / "runs"), "--out", str(tmp_path / "all"),
                   env=cluster.env)
    assert done.returncode == 1
    for label, name in (("straggler", "t-straggler"), ("setup", "t-setup"),
                        ("cancelled", "t-cancelled")):
        assert f"{name}-{ids[label]}" in done.stderr
    assert f"t-bench-{ids['bench']}" not in done.stderr

    # A run whose script never wrote status.json (killed): SLURM is asked.
    killed = tmp_path / "killed"
    shutil.copytree(bench, killed)
    (killed / "status.json").unlink()
    done = hpccoll("jobs", "status", str(killed), env=cluster.env)
    assert done.returncode == 1 and "SLURM says COMPLETED" in done.stdout

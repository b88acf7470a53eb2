"""``hpccoll jobs status``: run directories, their state as the job script and SLURM tell
it (``sacct``, ``sacct -c``, ``scontrol show job``), and their results."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import JobError

FINAL_OK = "COMPLETED"


@dataclass
class Run:
    path: Path
    job: dict[str, Any]
    status: dict[str, Any] | None
    state: str
    slurm_state: str | None = None
    problems: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)   # bench-*.json rows
    files: list[str] = field(default_factory=list)
    wrong: int = 0

    @property
    def ok(self) -> bool:
        return self.state == FINAL_OK and not self.problems

    @property
    def label(self) -> str:
        return self.path.name


def run_directories(paths: list[str]) -> list[Path]:
    """The run directories (holding job.json) named, or found one level inside those named."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if (path / "job.json").is_file():
            found.append(path)
        elif path.suffix == ".out" and path.is_file() and \
                (path.with_suffix("") / "job.json").is_file():
            continue                               # a run's SLURM log, caught by a glob
        elif path.is_dir():
            inner = sorted(p for p in path.iterdir() if (p / "job.json").is_file())
            if not inner:
                raise JobError(f"{given}: no hpccoll run directory (one with job.json) here")
            found.extend(inner)
        else:
            raise JobError(f"{given}: no such run directory")
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def slurm_state(job_id: str, timeout: float = 30) -> tuple[str, str] | None:
    """(state, where it came from) as SLURM tells it, or None where it cannot: sacct (the
    accounting database), ``sacct -c`` (the job-completion log), ``scontrol show job`` (jobs
    the controller still remembers)."""
    if not job_id or job_id.startswith("local-"):
        return None
    attempts = [("sacct", ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"]),
                ("sacct -c", ["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State"])]
    for source, command in attempts:
        done = _quietly(command, timeout)
        if done is None:
            continue
        for line in done.splitlines():
            fields = line.split("|")
            if len(fields) >= 2 and fields[0] == job_id and fields[1].strip():
                return fields[1].split()[0], source
    done = _quietly(["scontrol", "show", "job", "-o", job_id], timeout)
    match = re.search(r"\bJobState=(\S+)", done or "")
    return (match.group(1), "scontrol") if match else None


def _quietly(command: list[str], timeout: float) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def load_run(path: Path, ask_slurm: bool = False) -> Run:
    """A run directory: its job record, state and results.  SLURM is asked when the job left
    no status.json (still running, or killed outright), or always with ``ask_slurm``."""
    try:
        job = _json(path / "job.json")
    except (OSError, ValueError) as error:
        return Run(path, {}, None, "UNKNOWN", problems=[f"unreadable job.json: {error}"])
    status = None
    if (path / "status.json").is_file():
        try:
            status = _json(path / "status.json")
        except ValueError as error:
            run = Run(path, job, None, "UNKNOWN", problems=[f"unreadable status.json: {error}"])
            return run
    run = Run(path, job, status, status["state"] if status else "UNFINISHED")
    if status is None or ask_slurm:
        told = slurm_state(str(job.get("job_id", "")))
        if told:
            run.slurm_state = told[0]
    if status is None:
        if run.slurm_state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                               "REQUEUED", "RESIZING"):
            run.state = run.slurm_state
            run.problems.append(f"still {run.slurm_state.lower()} (SLURM)")
        elif run.slurm_state:
            run.state = run.slurm_state if run.slurm_state != FINAL_OK else "UNFINISHED"
            run.problems.append(f"the job script left no status.json; SLURM says "
                                f"{run.slurm_state} (killed: time limit, node failure, "
                                "scancel, out of memory?)")
        else:
            run.problems.append("no status.json: the job has not finished, or was killed "
                                f"before it could write one; see {job.get('log', 'its log')}")
    elif run.slurm_state and run.slurm_state not in (FINAL_OK, "COMPLETING") and \
            run.state == FINAL_OK:
        run.state = run.slurm_state
        run.problems.append(f"the script completed but SLURM says {run.slurm_state}")
    if status is not None and status.get("state") != FINAL_OK:
        failed = status.get("failed_steps") or []
        for step in failed:
            code = next((s["exit_code"] for s in status.get("steps", []) if s["name"] == step),
                        "?")
            run.problems.append(f"step {step} exited {code}" + _tail(path / f"{step}.log"))
        if not failed or status.get("signal"):
            why = f" (signal {status['signal']})" if status.get("signal") else ""
            step = status.get("running_step")
            where = f", during step {step}" if step else ""
            tail = _tail(path / f"{step}.log") if step else _tail_log(path, job)
            run.problems.append(f"job script exited {status.get('exit_code')} in its "
                                f"{status.get('phase', '?')} phase{where}{why}" + tail)
    for result in sorted(path.glob("*.json")):
        if result.name in ("job.json", "status.json"):
            continue
        run.files.append(result.name)
        try:
            data = _json(result)
        except ValueError as error:
            run.problems.append(f"unreadable {result.name}: {error}")
            continue
        if not (isinstance(data, dict) and "results" in data and "meta" in data):
            continue                               # tuning.json and the like
        wrong = sum(int(r.get("wrong", 0)) for r in data["results"])
        if wrong:
            run.wrong += wrong
            run.problems.append(f"{result.name}: {wrong} wrong element(s)")
        if result.name.startswith("bench-"):
            for row in data["results"]:
                run.results.append({**row, "ranks": data["meta"].get("ranks", row["ranks"])})
    return run


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return "".join(f"\n      | {l}" for l in text[-lines:])


def _tail_log(path: Path, job: dict[str, Any]) -> str:
    log = job.get("log")
    return _tail(Path(log)) if log else ""


def describe(run: Run) -> str:
    """One line: the run's state, directory, job and size."""
    job = run.job
    slurm = f" (SLURM: {run.slurm_state})" if run.slurm_state else ""
    return (f"{run.state:<10} {run.path!s:<40} job {job.get('job_id', '?')} "
            f"{job.get('template', '?')}, {job.get('nodes', '?')} node(s), "
            f"{job.get('ntasks', '?')} task(s){slurm}")


def status(paths: list[str], out: Any = None) -> int:
    """Print each run's state; 0 when every run completed cleanly."""
    out = out or sys.stdout
    runs = [load_run(p, ask_slurm=True) for p in run_directories(paths)]
    for run in runs:
        print(describe(run), file=out)
        for problem in run.problems:
            print(f"    {problem}", file=out)
    bad = [r for r in runs if not r.ok]
    if bad:
        print(f"{len(bad)} of {len(runs)} run(s) did not complete cleanly", file=out)
    return 1 if bad else 0

"""``hpccoll jobs collect``: the bench results of several run directories as one scaling
table (JSON, markdown, a plot)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from . import JobError
from .slurm import Run, describe, load_run, run_directories

def scaling_table(runs: list[Run]) -> dict[str, Any]:
    """Every bench result of the runs, one row per (collective, algorithm, dtype, size, nodes,
    ranks); a point measured by several runs keeps the later run's (argument order)."""
    rows: dict[tuple, dict[str, Any]] = {}
    replaced: dict[str, None] = {}
    for run in runs:
        nodes = int(run.job.get("nodes") or 1)
        for r in run.results:
            row = {"collective": r["collective"], "algorithm": r["algorithm"],
                   "dtype": r["dtype"], "bytes": r["bytes"], "nodes": nodes,
                   "ranks": r["ranks"], "time_us": r["time_us"], "algbw_gbs": r["algbw_gbs"],
                   "busbw_gbs": r["busbw_gbs"], "vs_native": r["vs_native"],
                   "wrong": r["wrong"], "iterations": r["iterations"], "run": str(run.path),
                   "job_id": run.job.get("job_id")}
            key = tuple(row[k] for k in ("collective", "algorithm", "dtype", "bytes", "nodes",
                                         "ranks"))
            if key in rows and rows[key]["run"] != row["run"]:
                replaced[f"{rows[key]['run']} -> {row['run']}"] = None
            rows[key] = row
    points = sorted({(r["ranks"], r["nodes"]) for r in rows.values()})
    return {
        "format": "hpccoll-scaling/1",
        "runs": [{"run": str(r.path), "job_id": r.job.get("job_id"),
                  "job_name": r.job.get("job_name"), "template": r.job.get("template"),
                  "study": r.job.get("study") or None, "nodes": r.job.get("nodes"),
                  "ntasks": r.job.get("ntasks"), "state": r.state,
                  "slurm_state": r.slurm_state, "ok": r.ok, "problems": r.problems,
                  "files": r.files} for r in runs],
        "points": [{"ranks": p, "nodes": n} for p, n in points],
        "results": sorted(rows.values(), key=lambda r: (r["collective"], r["dtype"],
                                                        r["algorithm"] != "native",
                                                        r["algorithm"], r["bytes"],
                                                        r["ranks"], r["nodes"])),
        "replaced": list(replaced),
    }


def _point_label(ranks: int, nodes: int) -> str:
    return f"{ranks} ranks ({nodes} node{'s' if nodes != 1 else ''})"


def markdown(table: dict[str, Any]) -> str:
    from ..results import human_size
    out = [f"# hpccoll scaling table: {len(table['runs'])} run(s)", "",
           "| run | job | template | nodes | tasks | state | problems |",
           "|---|---|---|---:|---:|---|---|"]
    for run in table["runs"]:
        problems = "; ".join(p.split("\n")[0] for p in run["problems"]) or "-"
        out.append(f"| {run['run']} | {run['job_id']} | {run['template']} | {run['nodes']} | "
                   f"{run['ntasks']} | {run['state']} | {problems} |")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table["results"]:
        groups.setdefault((row["collective"], row["dtype"]), []).append(row)
    for (collective, dtype), rows in groups.items():
        points = sorted({(r["ranks"], r["nodes"]) for r in rows})
        header = "| algorithm | size | " + " | ".join(_point_label(*p) for p in points) + " |"
        rule = "|---|---:|" + "---:|" * len(points)
        cells = {(r["algorithm"], r["bytes"], r["ranks"], r["nodes"]): r for r in rows}
        keys = list(dict.fromkeys((r["algorithm"], r["bytes"]) for r in rows))
        for title, field_name, fmt in (("time (us, median of the slowest rank)", "time_us",
                                        "{:.1f}"),
                                       ("bus bandwidth (GB/s)", "busbw_gbs", "{:.4g}")):
            out += ["", f"## {collective}, {dtype}: {title}", "", header, rule]
            for algorithm, size in keys:
                values = []
                for ranks, nodes in points:
                    row = cells.get((algorithm, size, ranks, nodes))
                    values.append("-" if row is None else fmt.format(row[field_name]))
                out.append(f"| {algorithm} | {human_size(size)} | " + " | ".join(values) + " |")
    failed = [r for r in table["runs"] if not r["ok"]]
    if failed:
        out += ["", "## Runs that did not complete cleanly", ""]
        for run in failed:
            out.append(f"* {run['run']} (job {run['job_id']}): {run['state']}")
            out.extend(f"  * {p.splitlines()[0]}" for p in run["problems"])
    if table["replaced"]:
        out += ["", "Points measured twice (the later run kept): " +
                ", ".join(table["replaced"])]
    return "\n".join(out) + "\n"


def plot(table: dict[str, Any], path: str) -> None:
    """Per collective: time at the smallest size and bus bandwidth at the largest against the
    rank count, one line per algorithm (native dashed)."""
    try:
        import matplotlib
    except ImportError:
        raise JobError("--plot needs matplotlib: pip install 'hpccoll[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..results import human_size
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table["results"]:
        groups.setdefault((row["collective"], row["dtype"]), []).append(row)
    if not groups:
        raise JobError("nothing to plot: no bench results in these runs")
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.8 * len(groups)), squeeze=False)
    for (collective, dtype), (lat, bw) in zip(groups, axes):
        rows = groups[collective, dtype]
        points = sorted({(r["ranks"], r["nodes"]) for r in rows})
        # The smallest and largest sizes measured at every point (else at any).
        common = set.intersection(*({r["bytes"] for r in rows if (r["ranks"], r["nodes"]) == p}
                                    for p in points)) or {r["bytes"] for r in rows}
        small, large = min(common), max(common)
        for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
            style = {"linestyle": "--", "color": "black"} if algorithm == "native" else {}
            for axis, size, key in ((lat, small, "time_us"), (bw, large, "busbw_gbs")):
                line = sorted((r["ranks"], r[key]) for r in rows
                              if r["algorithm"] == algorithm and r["bytes"] == size)
                if line:
                    axis.plot(*zip(*line), marker="o", ms=4, label=algorithm, **style)
        for axis, size, label in ((lat, small, "time (us)"), (bw, large, "bus bandwidth (GB/s)")):
            axis.set_xscale("log", base=2)
            axis.set_xticks([p for p, _ in points])
            axis.set_xticklabels([f"{p}\n({n}n)" for p, n in points])
            axis.set_xlabel("ranks (nodes)")
            axis.set_ylabel(label)
            axis.set_title(f"{collective} {dtype}, {human_size(size)} B")
            axis.grid(True, which="both", alpha=0.3)
        lat.set_yscale("log")
        bw.legend(fontsize=7)
    fig.suptitle("hpccoll scaling")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collect(paths: list[str], prefix: str, with_plot: bool = False, out: Any = None) -> int:
    """Write PREFIX.json, PREFIX.md (and PREFIX.png); print each run's state; 0 when every run
    completed cleanly, 1 otherwise (the table still holds what the others measured)."""
    out = out or sys.stdout
    runs = [load_run(p) for p in run_directories(paths)]
    table = scaling_table(runs)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}.json", "w") as f:
        json.dump(table, f, indent=1)
    with open(f"{prefix}.md", "w") as f:
        f.write(markdown(table))
    written = [f"{prefix}.json", f"{prefix}.md"]
    if with_plot and table["results"]:
        plot(table, f"{prefix}.png")
        written.append(f"{prefix}.png")
    for run in runs:
        print(describe(run), file=out)
        for problem in run.problems:
            print(f"    {problem}", file=out)
    points = ", ".join(_point_label(p["ranks"], p["nodes"]) for p in table["points"]) or "none"
    print(f"{len(table['results'])} result(s) at {points}; wrote {', '.join(written)}", file=out)
    bad = [r for r in runs if not r.ok]
    if bad:
        print(f"hpccoll jobs collect: {len(bad)} of {len(runs)} run(s) FAILED or did not "
              f"finish: {', '.join(r.label for r in bad)}", file=sys.stderr)
        return 1
    return 0

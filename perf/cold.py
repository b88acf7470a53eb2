"""The table of perf/cold.sh's runs: per collective and size, native's time on warm buffers
and on cold ones, the slowdown cold/warm of native and of auto, and auto's speed relative to
native within each run (warm, cold); each the median over the repeats, with their range.
A cell's time is its ``--stat``: ``p10`` (default: the 10th percentile over iterations of
the slowest rank's time, which a host loaded by other jobs spoils less than the median,
when most iterations lose a time slice to them) or ``median`` (bench's own).

Usage: python perf/cold.py DIRECTORY [p10|median] (the runs' JSON files, C_MODE_rREP.json)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from hpccoll.tools.results import human_size


def load(directory: Path) -> dict:
    """(collective, mode) -> size -> algorithm -> [results of each repeat]."""
    runs: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in sorted(directory.glob("*_r*.json")):
        collective, mode, _ = path.stem.rsplit("_", 2)
        for row in json.loads(path.read_text())["results"]:
            runs[collective, mode][row["bytes"]][row["algorithm"]].append(row)
    return runs


def spread(values: list[float], digits: int = 2) -> str:
    """'median (min-max)'."""
    return f"{np.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(runs: dict, collective: str, stat: str) -> list[str]:
    warm, cold = runs[collective, "warm"], runs[collective, "cold"]
    field = {"p10": "p10_us", "median": "time_us"}[stat]
    lines = [f"### {collective} ({stat} of each cell's iterations)", "",
             "| size | native warm (us) | native cold (us) | native cold/warm | "
             "auto cold/warm | auto vs native warm | auto vs native cold | auto picks |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for size in sorted(warm):
        if size not in cold:
            continue
        times = {(mode, name): [r[field] for r in rows[size][name]]
                 for mode, rows in (("warm", warm), ("cold", cold))
                 for name in ("native", "auto")}
        picks = sorted({r["resolved"] for r in warm[size]["auto"] + cold[size]["auto"]})

        def ratios(a, b):
            return [x / y for x, y in zip(times[a], times[b])]
        lines.append(
            f"| {human_size(size)} | {spread(times['warm', 'native'], 1)} | "
            f"{spread(times['cold', 'native'], 1)} | "
            f"{spread(ratios(('cold', 'native'), ('warm', 'native')))} | "
            f"{spread(ratios(('cold', 'auto'), ('warm', 'auto')))} | "
            f"{spread(ratios(('warm', 'native'), ('warm', 'auto')))} | "
            f"{spread(ratios(('cold', 'native'), ('cold', 'auto')))} | {', '.join(picks)} |")
    return lines + [""]


def main() -> None:
    runs = load(Path(sys.argv[1]))
    stat = sys.argv[2] if len(sys.argv) > 2 else "p10"
    for collective in dict.fromkeys(c for c, _ in runs):
        print("\n".join(table(runs, collective, stat)))


if __name__ == "__main__":
    main()

"""The table of perf/cold.sh's runs: per collective and size, native's time on warm buffers
and on cold ones (the median over the repeats, and the range), the slowdown cold/warm of
native and of auto, and auto's speed relative to native within each run (warm, cold).

Usage: python perf/cold.py DIRECTORY (the runs' JSON files, C_MODE_rREP.json)
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


def table(runs: dict, collective: str) -> list[str]:
    warm, cold = runs[collective, "warm"], runs[collective, "cold"]
    lines = [f"### {collective}", "",
             "| size | native warm (us) | native cold (us) | native cold/warm | "
             "auto cold/warm | auto vs native warm | auto vs native cold | auto picks |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for size in sorted(warm):
        if size not in cold:
            continue
        native_w = [r["time_us"] for r in warm[size]["native"]]
        native_c = [r["time_us"] for r in cold[size]["native"]]
        auto_w = [r["time_us"] for r in warm[size]["auto"]]
        auto_c = [r["time_us"] for r in cold[size]["auto"]]
        picks = sorted({r["resolved"] for r in warm[size]["auto"] + cold[size]["auto"]})
        slow_n = [c / w for c, w in zip(native_c, native_w)]
        slow_a = [c / w for c, w in zip(auto_c, auto_w)]
        lines.append(
            f"| {human_size(size)} | {spread(native_w, 1)} | {spread(native_c, 1)} | "
            f"{spread(slow_n)} | {spread(slow_a)} | "
            f"{spread([r['vs_native'] for r in warm[size]['auto']])} | "
            f"{spread([r['vs_native'] for r in cold[size]['auto']])} | {', '.join(picks)} |")
    return lines + [""]


def main() -> None:
    runs = load(Path(sys.argv[1]))
    for collective in dict.fromkeys(c for c, _ in runs):
        print("\n".join(table(runs, collective)))


if __name__ == "__main__":
    main()

"""How much each algorithm slows down when one rank straggles.

Reads ``hpccoll bench --json`` files of the same sweep run without and with a straggler
(``--delay``/``--pause``) and prints, per algorithm and size band, the median over the band's
sizes of time(with straggler) / time(without), where a time is the mean over iterations of
the slowest rank (rare random pauses move the mean; the median over iterations that
``hpccoll bench`` prints hides them).  Native is in both runs: its row is the reference.

Usage: python perf/degradation.py BASELINE.json STRAGGLER.json [STRAGGLER.json...]
"""

from __future__ import annotations

import json
import statistics
import sys

BANDS = [("1K-64K", 1 << 10, 1 << 16), ("128K-1M", 1 << 17, 1 << 20),
         ("2M-16M", 1 << 21, 1 << 24)]


def times(path: str) -> tuple[dict, dict]:
    with open(path) as f:
        run = json.load(f)
    table: dict = {}
    for row in run["results"]:
        table.setdefault(row["algorithm"], {})[row["bytes"]] = row["mean_us"]
    return run["meta"], table


def main(baseline: str, stragglers: list[str]) -> None:
    _, base = times(baseline)
    for path in stragglers:
        meta, slow = times(path)
        print(f"\n`{meta['command']}` against `{baseline}`\n")
        print("| algorithm | " + " | ".join(name for name, _, _ in BANDS) + " |")
        print("|---|" + "---:|" * len(BANDS))
        for algorithm, by_size in slow.items():
            cells = []
            for _, low, high in BANDS:
                ratios = [t / base[algorithm][s] for s, t in by_size.items() if low <= s <= high]
                cells.append(f"{statistics.median(ratios):.2f}x" if ratios else "")
            print(f"| {algorithm} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])

"""Benchmark results without MPI: message sizes (K/M/G), the :class:`Result` rows that
``hpccoll bench --json`` writes, their plots and the ``hpccoll report`` tables, so that
reading and reporting results never initialises MPI."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from .. import registry

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'8', '64K', '16M', '1G' (binary units) -> bytes."""
    text = text.strip().upper().rstrip("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    try:
        value = int(text[:len(text) - len(unit)])
    except ValueError:
        raise ValueError(f"bad size {text!r}; use e.g. 8, 64K, 16M") from None
    if value < 0:
        raise ValueError(f"size must not be negative: {text!r}")
    return value * UNITS[unit]


def size_range(spec: str) -> list[int]:
    """'MIN:MAX' (MIN, 2 MIN, 4 MIN, ... up to MAX), 'MIN:MAX:FACTOR' (MIN times powers of
    FACTOR, e.g. 16:16M:4) or a single size -> sizes in bytes."""
    low, _, rest = spec.partition(":")
    high, _, step = rest.partition(":")
    lo, hi = parse_size(low), parse_size(high or low)
    if lo <= 0 or hi < lo:
        raise ValueError(f"bad size range {spec!r}: need 0 < MIN <= MAX")
    try:
        factor = int(step) if step else 2
    except ValueError:
        factor = 0
    if factor < 2:
        raise ValueError(f"bad size range {spec!r}: FACTOR must be a whole number >= 2")
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass
class Result:
    collective: str
    algorithm: str
    ranks: int
    dtype: str
    bytes: int
    count: int
    iterations: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    vs_native: float | None
    wrong: int
    resolved: str | None = None       # what "auto" picked
    mean_us: float | None = None      # mean over iterations of the slowest rank's time
    # the spread of those per-iteration times: 10th and 90th percentiles, minimum, maximum
    p10_us: float | None = None
    p90_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    timed_s: float | None = None      # how long the timed iterations took, barriers included
    model_us: float | None = None     # hpccoll simulate: the cost model's prediction


def busbw_summary(results: list[Result]) -> list[str]:
    """nccl-tests' closing line for each algorithm: its bus bandwidth averaged over the sizes
    it ran (an arithmetic mean, so the large sizes weigh most, as there), and that average
    against native's where native ran the same sizes."""
    rows: dict[str, list[Result]] = {}
    for result in results:
        rows.setdefault(result.algorithm, []).append(result)
    native = rows.get(registry.NATIVE)
    native_sizes = None if native is None else [r.bytes for r in native]
    lines = []
    for name, cells in rows.items():
        average = sum(r.busbw_gbs for r in cells) / len(cells)
        line = f"# Avg bus bandwidth {name:>20}: {average:9.3f} GB/s over {len(cells)} size" + \
            ("s" if len(cells) > 1 else "")
        if native is not None and name != registry.NATIVE and \
                [r.bytes for r in cells] == native_sizes:
            native_average = sum(r.busbw_gbs for r in native) / len(native)
            line += f" ({average / native_average:.2f}x native's)"
        lines.append(line)
    return lines


def plot(results: list[Result], path: str, title: str | None = None) -> None:
    """:func:`figure` of ``results`` written to ``path``; needs matplotlib (the ``plot``
    extra)."""
    from .arguments import MATPLOTLIB_MISSING
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(f"--plot {MATPLOTLIB_MISSING}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = figure(results, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(results: list[Result], title: str | None = None) -> Any:
    """Bus bandwidth and time against message size, one line per algorithm (native dashed),
    or at a single size one bar per algorithm, each labelled with its value; under ``title``
    (default: bench's)."""
    import matplotlib.pyplot as plt
    first = results[0]
    fig, (bw, lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = sorted({r.bytes for r in results})
    if len(sizes) == 1:
        _bars(results, bw, lat)
        suffix = f", {human_size(sizes[0])} B"
    else:
        _lines(results, bw, lat)
        suffix = ""
    fig.suptitle((title or f"hpccoll bench {first.collective}: {first.ranks} ranks, "
                           f"{first.dtype}") + suffix)
    fig.tight_layout()
    return fig


def _lines(results: list[Result], bw: Any, lat: Any) -> None:
    """One line per algorithm against message size (native dashed)."""
    for name in dict.fromkeys(r.algorithm for r in results):
        rows = [r for r in results if r.algorithm == name]
        style = dict(linestyle="--", color="black") if name == registry.NATIVE else {}
        sizes = [r.bytes for r in rows]
        bw.plot(sizes, [r.busbw_gbs for r in rows], marker="o", ms=3, label=name, **style)
        lat.plot(sizes, [r.time_us for r in rows], marker="o", ms=3, label=name, **style)
    for axis, label in ((bw, "bus bandwidth (GB/s)"), (lat, "time (us)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("message size (bytes, OSU convention)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    lat.set_yscale("log")
    bw.legend(fontsize=8)


def _bars(results: list[Result], bw: Any, lat: Any) -> None:
    """One bar per algorithm (native's grey), its value written on it: a single size."""
    names = [r.algorithm for r in results]
    colours = ["0.55" if name == registry.NATIVE else f"C{i % 10}"
               for i, name in enumerate(names)]
    for axis, values, label in ((bw, [r.busbw_gbs for r in results], "bus bandwidth (GB/s)"),
                                (lat, [r.time_us for r in results], "time (us)")):
        bars = axis.bar(range(len(names)), values, color=colours)
        axis.bar_label(bars, [f"{v:.3g}" for v in values], fontsize=8, padding=2)
        axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        axis.set_ylabel(label)
        axis.margins(y=0.15)
        axis.grid(True, axis="y", alpha=0.3)


def write_json(path: str, meta: dict[str, Any], results: list[Result]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": [asdict(r) for r in results]}, f, indent=1)


def human_size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def report(paths: list[str]) -> str:
    """Markdown tables from ``bench --json`` (and ``simulate --json``) files: per run, each
    size's baseline time (native's; simulate's: its first algorithm's) and every algorithm's
    speed relative to it, the fastest one (the baseline itself, if none is faster) marked."""
    out = []
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        results, meta = run["results"], run["meta"]
        if not results:
            continue
        first = results[0]
        baseline = meta.get("baseline", "native")
        names = list(dict.fromkeys(r["algorithm"] for r in results if r["algorithm"] != baseline))
        out.append(f"### {first['collective']}, {meta['ranks']} ranks, {first['dtype']}\n")
        out.append(f"`{meta['command']}` ({meta['date']}, {meta['mpi']})\n")
        out.append(f"| size | {baseline} (us) | " + " | ".join(names) + " | best |")
        out.append("|---:|---:|" + "---:|" * len(names) + "---|")
        best_by_size = {}
        for size in sorted({r["bytes"] for r in results}):
            rows = {r["algorithm"]: r for r in results if r["bytes"] == size}
            native = rows.get(baseline)
            cells = []
            for name in names:
                row = rows.get(name)
                cells.append("-" if row is None or row["vs_native"] is None
                             else f"{row['vs_native']:.2f}x")
            # the baseline is a candidate (first: a tie is its): nothing slower is "best"
            ranked = [rows[n] for n in [baseline, *names] if n in rows and rows[n]["vs_native"]]
            best = max(ranked, key=lambda r: r["vs_native"], default=None)
            native_us = f"{native['time_us']:.1f}" if native else "-"
            best_text = f"{best['algorithm']} {best['vs_native']:.2f}x" if best else "-"
            if best:
                best_by_size[size] = best
            out.append(f"| {human_size(size)} | {native_us} | " + " | ".join(cells) +
                       f" | {best_text} |")
        wrong = sum(r["wrong"] for r in results)
        out.append(f"\n{band_summary(best_by_size, baseline)}\n\n#wrong over the run: {wrong}\n")
    return "\n".join(out)


SIZE_BANDS = (("<= 4K", 0, 4 << 10), ("8K-512K", 8 << 10, 512 << 10),
              (">= 1M", 1 << 20, 1 << 62))


def band_summary(best_by_size: dict[int, dict], baseline: str = "native") -> str:
    """'best vs native by band': per size band, the range of the best algorithm's ratio and
    the algorithms that were best, most often first."""
    parts = []
    for label, low, high in SIZE_BANDS:
        band = [best for size, best in best_by_size.items() if low <= size <= high]
        if band:
            ratios = [best["vs_native"] for best in band]
            names = Counter(best["algorithm"] for best in band).most_common()
            parts.append(f"{label}: {min(ratios):.2f}-{max(ratios):.2f}x "
                         f"({', '.join(name for name, _ in names)})")
    return f"best vs {baseline} by size band: " + "; ".join(parts)

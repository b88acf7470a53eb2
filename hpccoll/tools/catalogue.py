"""The algorithm catalogue (``algorithms/`` in the repository), generated from the registry.

``algorithms/README.md`` is a table of every registered algorithm with its cost formulas,
constraints and source; each family has a page with the module's description, every
planner's docstring and a schedule picture drawn from the planner's own program (ranks as
rows, steps as columns, an arrow per message).  ``hpccoll catalogue`` writes them; a test
fails when the committed table and the registry disagree, and another evaluates every cost
formula against the verifier's counts.
"""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path

from .. import registry
from ..collectives import spec, uniform_call
from ..topology import from_spec

HEADER = """# Algorithm catalogue

Generated from the registry by `hpccoll catalogue --out algorithms` (the table also by
`hpccoll list --markdown`): do not edit these files by hand.  `tests/unit/test_catalogue.py`
fails when this table and the registry disagree and checks every rounds and elements-sent
formula against the verifier's counts.

n is the collective's own block: the elements each rank contributes (allgather), receives
(reduce_scatter), holds (allreduce, bcast, reduce) or sends to one peer (alltoall).  "Sent"
is the elements the busiest rank sends.  α: per-message start-up, β: per-byte transfer,
γ: per-byte reduction, μ: per-byte memory copy, s: a node synchronisation.  "Options" are
the planner options an algorithm declares (`options=` of a call); any other name, or a value
outside an option's, is refused before any message.  The family pages give each option's
values, default and meaning.
"""


def popsum(p: int) -> int:
    """Number of 1 bits in 0..p-1 (Bruck's message volume)."""
    return sum(bin(i).count("1") for i in range(p))


def grid(p: int) -> tuple[int, int]:
    from ..algorithms.mesh import grid_shape
    return grid_shape(p)


def swing_pairs(p: int) -> int:
    from ..algorithms.swing import swing_pairs
    return swing_pairs(p)


def evaluate(formula: str, p: int, n: int) -> float:
    """A cost formula's value at ``p`` ranks and block ``n``."""
    names = {"p": p, "n": n, "log2": math.log2, "ceil": math.ceil, "floor": math.floor,
             "min": min, "max": max, "sum": sum, "popsum": popsum, "grid": grid,
             "swing_pairs": swing_pairs}
    return eval(formula, {"__builtins__": {}}, names)


def table() -> str:
    rows = ["| collective | algorithm | family | rounds | sent per rank | time | constraints "
            "| options | source |", "|---|---|---|---|---|---|---|---|---|"]
    for a in registry.algorithms():
        cost = a.cost or registry.Cost("-", "-", "-")
        constraints = "; ".join(c.description for c in a.requires) or "-"
        rows.append(f"| {a.collective} | [{a.name}]({a.family}.md) | {a.family} | "
                    f"`{cost.rounds}` | `{cost.sent}` | {cost.time} | {constraints} | "
                    f"{option_names(a)} | {a.source or '-'} |")
    return "\n".join(rows)


def option_names(algorithm: registry.Algorithm) -> str:
    """The options ``algorithm`` declares, by name ("none" when it takes none, "not declared"
    when it does not say)."""
    if algorithm.options is None:
        return "not declared"
    return ", ".join(f"`{o.name}`" for o in algorithm.options) or "none"


def readme() -> str:
    return f"{HEADER}\n{table()}\n"


# families drawn on a topology: its shape matters to their schedules
PICTURE_TOPOLOGY = {"rat": "racks=2,nodes_per_rack=2,ppn=2", "csc": "nodes=2,ppn=4"}


def draw(collective: str, name: str, p: int, path: Path, n: int | None = None,
         topology: str | None = None) -> None:
    """A picture of the schedule of ``name`` at ``p`` ranks (on ``topology``, a spec): one row
    per rank, one column per step, an arrow per message (thicker for more elements), a square
    per node sync."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    algorithm = registry.get(collective, name)
    n = n if n is not None else 2 * p
    shape = from_spec(topology, p) if topology else None
    programs = [algorithm.planner(uniform_call(collective, p, r, n, topology=shape))
                for r in range(p)]
    steps = max(len(prog.steps) for prog in programs)
    biggest = max((s.count for prog in programs for st in prog.steps for s in st.sends),
                  default=1) or 1
    fig, axis = plt.subplots(figsize=(1.2 + 0.9 * max(steps, 1), 0.6 + 0.45 * p))
    colours = plt.get_cmap("tab10")
    for rank, prog in enumerate(programs):
        for s, step in enumerate(prog.steps):
            if step.sync:
                axis.plot([s + 0.5], [rank], "s", color="grey", ms=5)
            for send in step.sends:
                width = 0.6 + 2.4 * send.count / biggest
                axis.annotate("", xy=(s + 0.9, send.peer), xytext=(s + 0.1, rank),
                              arrowprops=dict(arrowstyle="->", lw=width,
                                              color=colours(rank % 10), alpha=0.8))
    axis.set_xlim(0, max(steps, 1))
    axis.set_ylim(p - 0.5, -0.5)
    axis.set_xticks([s + 0.5 for s in range(steps)], [str(s) for s in range(steps)])
    axis.set_yticks(range(p))
    axis.set_xlabel("step")
    axis.set_ylabel("rank")
    axis.set_title(f"{collective} / {name}, p = {p}" + (f", {topology}" if topology else ""),
                   fontsize=10)
    for s in range(1, steps):
        axis.axvline(s, color="0.9", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def family_page(family: str, pictures: dict[tuple[str, str], str]) -> str:
    members = [a for a in registry.algorithms() if a.family == family]
    module = sys.modules[members[0].planner.__module__]
    lines = [f"# Family `{family}`", "", inspect.getdoc(module) or "", ""]
    for a in members:
        lines += [f"## {a.collective} / `{a.name}`", ""]
        if a.cost:
            lines += [f"rounds `{a.cost.rounds}`, sent per rank `{a.cost.sent}`, "
                      f"time {a.cost.time}", ""]
        if a.requires:
            lines += ["requires: " + "; ".join(c.description for c in a.requires), ""]
        if a.options:
            lines += ["options:", "", *(f"- `{o.name}` ({o.values}; default {o.default}): "
                                        f"{o.meaning}" for o in a.options), ""]
        else:
            lines += [f"options: {option_names(a)}", ""]
        lines += ["```text", inspect.getdoc(a.planner) or "", "```", ""]
        picture = pictures.get((a.collective, a.name))
        if picture:
            lines += [f"![{a.collective} {a.name}]({picture})", ""]
    return "\n".join(lines)


def picture_ranks(algorithm: registry.Algorithm, topology: str | None) -> int | None:
    """A small rank count the algorithm serves, for its picture (None: not drawable)."""
    for p in (8, 6, 4):
        shape = from_spec(topology, p) if topology and p == 8 else None
        if (not topology or shape) and algorithm.violated(
                uniform_call(algorithm.collective, p, 0, 2 * p, topology=shape)) is None:
            return p
    return None


def write(directory: Path) -> list[Path]:
    """Write the catalogue into ``directory``: README.md, one page and pictures per family."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pictures").mkdir(exist_ok=True)
    written = [directory / "README.md"]
    written[0].write_text(readme())
    pictures = {}
    for a in registry.algorithms():
        topology = PICTURE_TOPOLOGY.get(a.family)
        if topology and picture_ranks(a, topology) is None:
            topology = None               # not on several nodes (csc alltoall): one node
        p = picture_ranks(a, topology)
        if p is None or spec(a.collective).vector:        # no picture of arbitrary counts
            continue
        path = directory / "pictures" / f"{a.family}_{a.collective}_{a.name}.png"
        draw(a.collective, a.name, p, path, topology=topology)
        pictures[a.collective, a.name] = f"pictures/{path.name}"
        written.append(path)
    for family in dict.fromkeys(a.family for a in registry.algorithms()):
        page = directory / f"{family}.md"
        page.write_text(family_page(family, pictures))
        written.append(page)
    return written

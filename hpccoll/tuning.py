"""What ``algorithm="auto"`` resolves to, and the decision tables behind it.

Resolution order (the first that names an algorithm whose constraints hold for the call):

1. ``HPCCOLL_<COLLECTIVE>_ALGORITHM`` (e.g. ``HPCCOLL_ALLREDUCE_ALGORITHM=ring``);
2. the decision table in ``HPCCOLL_TUNING_FILE`` (written by ``hpccoll tune``);
3. the decision table shipped with the package (``hpccoll/tuning.json``, from the runs
   recorded in ``perf/``); ``HPCCOLL_TUNING_FILE=none`` skips both tables;
4. the cost model (:mod:`hpccoll.costmodel`): the applicable algorithm with the lowest
   predicted time on the call's topology.

A decision table, in the spirit of Open MPI's dynamic rules files::

    {"format": "hpccoll-tuning/1",
     "collectives": {
       "allreduce": [
         {"ranks": [2, 2], "rules": [{"max_bytes": 2048, "algorithm": "native"},
                                     {"max_bytes": null, "algorithm": "ring"}]},
         {"ranks": [3, 4], "rules": [...]}]}}

An entry may name the MPI ``library`` it was measured under (``"MPICH"``, ``"Open MPI"``:
mpi4py's ``MPI.get_vendor()``), and then serves that library only, and the ``form`` of the
calls it was measured on (``"nonblocking"``: ``i<collective>`` + ``wait()``,
``"persistent"``: ``start()`` + ``wait()`` of one ``<collective>_init`` request), and then
serves that form only; an entry naming no form was measured on blocking calls and serves
every form that has no entry of its own (a library's persistent or non-blocking collective
costs differently from its blocking one, so the best algorithm may differ).  A rule
``hpccoll tune`` wrote against native says what it rests on: ``"faster"``, native's median
time over the algorithm's at the size where the algorithm's lead was smallest, and
``"worst"``, the least of native's time over the algorithm's in one sweep (each sweep timed
both), over the sizes the rule covers (``explain`` prints both).

For a call on p ranks moving ``nbytes`` (the benchmark's size convention: the largest block
for allgather, per peer for alltoall, the vector for allreduce and reduce_scatter's input),
the entry whose ``ranks`` range holds p is used -- the first one measured under the running
library, else the first one naming no library; among those, the first measured on the
call's form, else the first naming no form -- and in it the first rule with
``nbytes <= max_bytes`` (``null``: no limit).  ``auto`` is resolved when a call's signature is
first seen on a communicator; later identical calls reuse the choice.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import registry, settings
from .schedule import Call

FORMAT = "hpccoll-tuning/1"
SHIPPED = Path(__file__).with_name("tuning.json")
FORMS = ("blocking", "nonblocking", "persistent")   # how a call is made (a table's "form")


@dataclass(frozen=True)
class Decision:
    algorithm: str
    source: str          # environment, tuning file, shipped table, cost model
    reason: str


def choose(call: Call, nbytes: int, form: str = "blocking") -> str:
    """The algorithm ``auto`` picks for ``call`` moving ``nbytes``, made in ``form`` (one
    of :data:`FORMS`)."""
    return decide(call, nbytes, form).algorithm


def decide(call: Call, nbytes: int, form: str = "blocking") -> Decision:
    """:func:`choose` with where the choice came from and why; candidates that do not apply
    to the call are passed over (and said so in the reason)."""
    skipped = []
    variable = f"HPCCOLL_{call.collective.upper()}_ALGORITHM"
    forced = settings.read(variable)
    if forced:
        verdict = _applicable(call, forced)
        if verdict is None:
            return Decision(forced, "environment", f"{variable}={forced}")
        skipped.append(f"{variable}={forced} does not apply ({verdict})")
    given = settings.read("HPCCOLL_TUNING_FILE")
    tables = [] if given == "none" else \
        [("tuning file", given), ("shipped table", str(SHIPPED) if SHIPPED.exists() else None)]
    running = library()
    for source, path in tables:
        if not path:
            continue
        table = load(path)
        found = lookup(table, call.collective, call.p, nbytes, running, form)
        if found is None:
            skipped.append(f"{source} {path} has no rule for {call.collective} on {call.p} "
                           "ranks" + (f" under {running}" if running else ""))
            continue
        entry, rule = found
        name = rule["algorithm"]
        verdict = _applicable(call, name)
        if verdict is None:
            return Decision(name, source, f"{path}: {_describe(call.collective, entry, rule)}"
                                          + _also(skipped))
        skipped.append(f"{source} picks {name}, which does not apply ({verdict})")
    from . import costmodel
    name, predicted = costmodel.best(call)
    return Decision(name, "cost model", f"lowest predicted time {predicted * 1e6:.1f} us on "
                                        f"{_where(call)}" + _also(skipped))


def _describe(collective: str, entry: dict[str, Any], rule: dict[str, Any]) -> str:
    """A table's rule as ``explain`` prints it: where it applies and what it rests on."""
    low, high = entry["ranks"]
    limit = rule["max_bytes"]
    text = f"{collective}, ranks {low}-{high}, " + \
        ("any size" if limit is None else f"<= {limit} B")
    if "library" in entry:
        text += f", measured under {entry['library']}"
    if "form" in entry:
        text += f" on {entry['form']} calls"
    if "faster" in rule:
        text += f" ({rule['faster']:.2f}x as fast as native where its lead was least, " \
                f"{rule['worst']:.2f}x in its least favourable sweep)"
    return text


def library() -> str | None:
    """The running MPI library's name as tables name it (mpi4py's ``MPI.get_vendor()``:
    "MPICH", "Open MPI", ...); None where MPI is not loaded (``explain --ranks``, the
    simulator), and then a table's first entry for the ranks serves, whatever its library."""
    mpi = sys.modules.get("mpi4py.MPI")
    return None if mpi is None else mpi.get_vendor()[0]


def _also(skipped: list[str]) -> str:
    return "" if not skipped else "; passed over: " + "; ".join(skipped)


def _where(call: Call) -> str:
    return "one node" if call.topology is None else call.topology.describe()


def _applicable(call: Call, name: str) -> str | None:
    """None if algorithm ``name`` can serve ``call``, else why not (ValueError if unknown)."""
    if name == registry.NATIVE:
        return None
    return registry.get(call.collective, name).violated(call)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -1.0


def load(path: str) -> dict[str, Any]:
    """The decision table in ``path`` (cached until the file changes); ValueError if there is
    none or it is not one."""
    return load_table(path, _mtime(path))


@lru_cache(maxsize=8)
def load_table(path: str, mtime: float) -> dict[str, Any]:
    """A decision table from ``path`` (cached per modification time); ValueError if it is not
    one."""
    if mtime < 0:
        raise ValueError(f"tuning file {path} does not exist")
    with open(path) as f:
        try:
            table = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"tuning file {path} is not JSON: {error}") from None
    check_table(table, f"tuning file {path}")
    return table


def check_table(table: Any, where: str = "tuning table") -> None:
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        raise ValueError(f"{where} is not a decision table (format {FORMAT!r} expected)")
    collectives = table.get("collectives", {})
    if not isinstance(collectives, dict):
        raise ValueError(f"{where}: \"collectives\" must map each collective's name to a list "
                         f"of entries, not be a {type(collectives).__name__}")
    for collective, entries in collectives.items():
        if not isinstance(entries, list):
            raise ValueError(f"{where}: {collective}: expected a list of entries, got a "
                             f"{type(entries).__name__}")
        for entry in entries:
            try:
                low, high = entry["ranks"]
                limits = [r["max_bytes"] for r in entry["rules"]]
                if not all(_whole(bound) for bound in (low, high)) or \
                        not all(limit is None or _whole(limit) for limit in limits) or \
                        not all(isinstance(r["algorithm"], str) for r in entry["rules"]) or \
                        not isinstance(entry.get("library", ""), str) or \
                        entry.get("form", FORMS[1]) not in FORMS[1:] or \
                        not all(_evidence(r) for r in entry["rules"]):
                    raise TypeError("ranks and max_bytes are whole numbers, algorithms names")
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{where}: {collective}: an entry needs \"ranks\": [low, high] "
                                 "and \"rules\": [{\"max_bytes\": ..., \"algorithm\": ...}] "
                                 "(optional: \"library\": a name; \"form\": \"nonblocking\" "
                                 "or \"persistent\"; per rule \"faster\" and \"worst\": "
                                 "numbers, both or neither)") from None
            if not 1 <= low <= high:
                raise ValueError(f"{where}: {collective} has a bad ranks range {entry['ranks']}")
            finite = limits[:-1]
            if not limits or limits[-1] is not None or None in finite or \
                    finite != sorted(set(finite)):
                raise ValueError(f"{where}: {collective} ranks {entry['ranks']}: rules must "
                                 "have increasing max_bytes and end with null")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _evidence(rule: dict[str, Any]) -> bool:
    """Whether a rule's measured speedups are well-formed: both numbers, or neither."""
    given = [rule[k] for k in ("faster", "worst") if k in rule]
    return not given or len(given) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in given)


def lookup(table: dict[str, Any], collective: str, p: int, nbytes: int,
           library: str | None = None, form: str = "blocking"
           ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(entry, rule) for a call on p ranks moving ``nbytes`` under MPI ``library``, made in
    ``form``: in the first entry for p ranks measured under ``library``, else in the first
    naming no library, else (``library`` None only) in the first measured under any -- of
    those, the first measured on ``form``, else the first naming no form (blocking); None
    if there is none."""
    def preference(entry: dict[str, Any]) -> tuple[int, bool]:
        named = entry.get("library")
        return (0 if named is not None and named == library else 1 if named is None else 2,
                "form" not in entry)
    entry = min((e for e in table.get("collectives", {}).get(collective, [])
                 if e["ranks"][0] <= p <= e["ranks"][1]
                 and (library is None or e.get("library") in (None, library))
                 and e.get("form", form) == form),
                key=preference, default=None)           # (the first of the most preferred)
    if entry is not None:
        for rule in entry["rules"]:
            if rule["max_bytes"] is None or nbytes <= rule["max_bytes"]:
                return entry, rule
    return None


def rules_from_timings(timings: dict[int, dict[str, list[float]]], keep: float = 0.05
                       ) -> list[dict[str, Any]]:
    """Rules from ``{size: {algorithm: [time of each sweep]}}`` (the sweeps in the same order
    for every algorithm).  Where native was timed it is the default, and an algorithm takes a
    size from it only if it wins whatever the noise: its median at least ``keep`` (5%) below
    native's, and in every sweep no slower than native in that sweep (a sweep the machine
    slowed slows every algorithm timed in it, so each sweep is compared with itself); its rule
    then says by how much: ``faster``, the ratio of the medians, and ``worst``, the least
    ratio of a sweep, each the least over the sizes it covers.  Of those that may, the fastest
    median, except that the previous size's choice is kept while it may and is within ``keep``
    of the fastest (so noise does not fragment the table); runs of equal choices merged; a
    rule covers up to the last size it won (the last rule: any size).  Without native
    (simulated times), every algorithm may."""
    rules: list[dict[str, Any]] = []
    for size in sorted(timings):
        times = {name: statistics.median(sweeps) for name, sweeps in timings[size].items()}
        native = times.get(registry.NATIVE)
        evidence: dict[str, tuple[float, float]] = {}     # name: (faster, worst)
        for name, sweeps in timings[size].items():
            if native is None or name == registry.NATIVE or times[name] * (1 + keep) > native:
                continue
            ratios = [theirs / mine for theirs, mine in
                      zip(timings[size][registry.NATIVE], sweeps, strict=True)]
            if min(ratios) >= 1:
                evidence[name] = (native / times[name], min(ratios))
        allowed = times if native is None else \
            {name: times[name] for name in (registry.NATIVE, *evidence)}
        winner = min(allowed, key=allowed.get)
        previous = rules[-1]["algorithm"] if rules else None
        if previous in allowed and allowed[previous] <= allowed[winner] * (1 + keep):
            winner = previous
        if previous != winner:
            rules.append({"max_bytes": size, "algorithm": winner})
        rule = rules[-1]
        rule["max_bytes"] = size
        if winner in evidence:
            faster, worst = evidence[winner]
            rule["faster"] = round(min(faster, rule.get("faster", faster)), 2)
            rule["worst"] = round(min(worst, rule.get("worst", worst)), 2)
    if rules:
        rules[-1]["max_bytes"] = None
    return rules


def merge(table: dict[str, Any] | None, collective: str, p: int,
          rules: list[dict[str, Any]], library: str | None = None, form: str = "blocking"
          ) -> dict[str, Any]:
    """``table`` with the rules for ``collective`` at exactly p ranks under ``library`` (None:
    any) on calls of ``form`` (blocking: an entry naming no form) replaced by ``rules``
    (other rank counts', libraries' and forms' entries kept, sorted by range, then library,
    then form)."""
    table = table or {"format": FORMAT, "collectives": {}}
    named = None if form == "blocking" else form
    entries = [e for e in table["collectives"].get(collective, [])
               if (e["ranks"], e.get("library"), e.get("form")) != ([p, p], library, named)]
    entries.append({"ranks": [p, p], **({"library": library} if library else {}),
                    **({"form": named} if named else {}), "rules": rules})
    table["collectives"][collective] = sorted(
        entries, key=lambda e: (e["ranks"], e.get("library", ""), e.get("form", "")))
    check_table(table)
    return table

"""Who is on which node, rack and pod.

A :class:`Topology` lists, for each level from the innermost out (``node``, ``rack``,
``pod``), the region every rank belongs to.  It is hashable (it is part of a planner's
:class:`~hpccoll.schedule.Call`) and pure data: planners, the traffic analysis and the
simulator read the same object.

It is detected from MPI (ranks that share memory are a node; processor names as a
fallback) and SLURM (``SLURM_TOPOLOGY_ADDR`` gives the switches above each node), or given:
a spec such as ``"nodes=4,ppn=8"`` or ``"racks=2,nodes_per_rack=4,ppn=8"`` (which may split
one machine into several "nodes", so multi-node algorithms are testable on one host), or a
JSON file ``{"node": [...], "rack": [...]}`` with one region id per rank and level.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import settings

LEVELS = ("node", "rack", "pod")


@dataclass(frozen=True)
class Topology:
    """``regions[l][r]``: the region of rank r at level ``levels[l]``, innermost level first;
    region ids are numbered 0.. in order of first appearance."""

    levels: tuple[str, ...]
    regions: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.regions) or not self.regions:
            raise ValueError("a topology needs one region list per level, at least one level")
        sizes = {len(r) for r in self.regions}
        if len(sizes) != 1:
            raise ValueError(f"every level must list every rank, got lengths {sorted(sizes)}")
        for inner, outer in zip(self.regions, self.regions[1:]):
            parent: dict[int, int] = {}
            for a, b in zip(inner, outer):
                if parent.setdefault(a, b) != b:
                    raise ValueError("levels must nest: a region lies in one region of the "
                                     "next level")

    @classmethod
    def from_levels(cls, **levels: Sequence[Any]) -> "Topology":
        """``Topology.from_levels(node=[...], rack=[...])``: any hashable ids per rank, in
        order of nesting (innermost first); ids are renumbered by first appearance."""
        names = tuple(levels)
        return cls(names, tuple(_renumber(ids) for ids in levels.values()))

    @property
    def size(self) -> int:
        return len(self.regions[0])

    def level(self, name: str) -> int:
        try:
            return self.levels.index(name)
        except ValueError:
            raise ValueError(f"topology has no level {name!r} (levels: {self.levels})") from None

    def members(self, level: int, region: int) -> tuple[int, ...]:
        """Ranks of ``region`` at ``level``, ascending."""
        return tuple(r for r, g in enumerate(self.regions[level]) if g == region)

    def count(self, level: int) -> int:
        """Number of regions at ``level``."""
        return max(self.regions[level]) + 1

    @property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """The ranks of each node."""
        return tuple(self.members(0, n) for n in range(self.count(0)))

    def contiguous_nodes(self) -> bool:
        """Whether every node's ranks are consecutive (ranks numbered node by node)."""
        return all(m == tuple(range(m[0], m[0] + len(m))) for m in self.nodes)

    def uniform_nodes(self) -> tuple[int, int] | None:
        """(nodes, ranks per node) when every node has the same number of ranks and ranks are
        numbered node by node; None otherwise."""
        nodes = self.nodes
        ppn = len(nodes[0])
        if all(m == tuple(range(i * ppn, (i + 1) * ppn)) for i, m in enumerate(nodes)):
            return len(nodes), ppn
        return None

    def describe(self) -> str:
        parts = [f"{self.size} ranks"]
        for l, name in enumerate(self.levels):
            sizes = [len(self.members(l, g)) for g in range(self.count(l))]
            shape = f"{sizes[0]} ranks each" if len(set(sizes)) == 1 else \
                f"ranks per {name}: {sizes}"
            parts.append(f"{self.count(l)} {name}(s) ({shape})")
        return ", ".join(parts)


def _renumber(ids: Sequence[Any]) -> tuple[int, ...]:
    seen: dict[Any, int] = {}
    return tuple(seen.setdefault(i, len(seen)) for i in ids)


def single_node(p: int) -> Topology:
    return Topology(("node",), ((0,) * p,))


def from_spec(spec: str, size: int | None = None) -> Topology:
    """``nodes=N,ppn=M`` / ``racks=R,nodes_per_rack=N,ppn=M`` / ``pods=P,racks_per_pod=R,...``
    (ranks numbered node by node), or the path of a JSON file.  ValueError if it does not
    describe ``size`` ranks."""
    if os.path.exists(spec):
        topology = from_file(spec)
    else:
        topology = _parse_spec(spec)
    if size is not None and topology.size != size:
        raise ValueError(f"topology {spec!r} describes {topology.size} ranks, the communicator "
                         f"has {size}")
    return topology


def _parse_spec(spec: str) -> Topology:
    fields: dict[str, int] = {}
    for item in spec.replace(" ", "").split(","):
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"bad topology spec {spec!r}: expected key=positive integer items "
                             "such as nodes=4,ppn=8")
        fields[key] = int(value)
    known = {"ppn", "nodes", "nodes_per_rack", "racks", "racks_per_pod", "pods"}
    if set(fields) - known or "ppn" not in fields:
        raise ValueError(f"bad topology spec {spec!r}: keys are {sorted(known)}, ppn required")
    ppn = fields["ppn"]
    if "pods" in fields:
        per_pod = fields.get("racks_per_pod", 1)
        racks = fields["pods"] * per_pod
        if fields.get("racks", racks) != racks:
            raise ValueError(f"bad topology spec {spec!r}: racks != pods x racks_per_pod")
        fields["racks"] = racks
    if "racks" in fields:
        per_rack = fields.get("nodes_per_rack", 1)
        nodes = fields["racks"] * per_rack
        if fields.get("nodes", nodes) != nodes:
            raise ValueError(f"bad topology spec {spec!r}: nodes != racks x nodes_per_rack")
        fields["nodes"] = nodes
    nodes = fields.get("nodes", 1)
    node = [r // ppn for r in range(nodes * ppn)]
    levels: dict[str, list[int]] = {"node": node}
    if "racks" in fields:
        levels["rack"] = [n // fields.get("nodes_per_rack", 1) for n in node]
    if "pods" in fields:
        levels["pod"] = [k // fields.get("racks_per_pod", 1) for k in levels["rack"]]
    return Topology.from_levels(**levels)


def from_file(path: str) -> Topology:
    """A JSON file ``{"node": [...], "rack": [...], "pod": [...]}`` (one id per rank; levels
    innermost first, any subset of node/rack/pod with node first)."""
    with open(path) as f:
        data = json.load(f)
    return from_mapping(data)


def from_mapping(data: Mapping[str, Sequence[Any]]) -> Topology:
    if not isinstance(data, Mapping) or "node" not in data:
        raise ValueError("a topology file is a JSON object with a 'node' list (and optional "
                         "'rack' and 'pod' lists): one id per rank")
    unknown = set(data) - set(LEVELS)
    if unknown:
        raise ValueError(f"unknown topology levels {sorted(unknown)}; use {LEVELS}")
    return Topology.from_levels(**{k: data[k] for k in LEVELS if k in data})


def detect(comm: Any) -> Topology:
    """The topology of ``comm``: ``HPCCOLL_TOPOLOGY`` (a spec or file) if set; otherwise
    nodes from a shared-memory split (processor names where that is not available) and
    racks/pods from ``SLURM_TOPOLOGY_ADDR`` where SLURM sets it.  Collective."""
    given = settings.read("HPCCOLL_TOPOLOGY")
    if given:
        try:
            return from_spec(given, comm.Get_size())
        except (ValueError, OSError) as error:
            raise ValueError(f"HPCCOLL_TOPOLOGY={given!r}: {error}") from None
    from mpi4py import MPI
    try:
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
        node_leader = shared.allreduce(comm.Get_rank(), op=MPI.MIN)
        shared.Free()
    except (NotImplementedError, MPI.Exception):
        node_leader = MPI.Get_processor_name()
    switches = os.environ.get("SLURM_TOPOLOGY_ADDR", "").split(".")[:-1]
    everyone = comm.allgather((node_leader, tuple(switches)))
    levels: dict[str, list[Any]] = {"node": [leader for leader, _ in everyone]}
    depth = min(len(s) for _, s in everyone)
    # SLURM_TOPOLOGY_ADDR lists switches from the top down: the last one is the rack's
    for name, back in (("rack", 1), ("pod", 2)):
        if depth >= back:
            levels[name] = [s[:len(s) - back + 1] for _, s in everyone]
    return Topology.from_levels(**levels)

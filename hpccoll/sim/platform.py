"""Modelled machines for the simulator, described in Python (no XML): ``KIND:key=value,...``.

A :class:`Platform` is pure data: one host per rank, the links (bandwidth, latency) and, for
every ordered pair of ranks, the links a message crosses; the :class:`~hpccoll.topology.
Topology` its ranks form (so planners see the machine they run on) and the cost model's
:class:`~hpccoll.costmodel.Machine` of the same links (so model and simulator speak of one
machine).  :mod:`hpccoll.sim.replay` turns it into a SimGrid platform.

Kinds (every key has a default, so ``fullmesh:n=8`` or even ``fullmesh`` is a valid spec;
bandwidths as ``50GB/s``, ``400Gb/s``, ``100Gbps`` or bytes/s; latencies as ``2us``, ``500ns``,
``1ms`` or seconds):

- ``fullmesh``: ``n`` GPUs, one link per ordered pair (an AMD MI300X-like Infinity Fabric mesh);
- ``switch``: ``n`` GPUs, each with one port (one link each way) into a non-blocking switch
  (an NVSwitch-like node);
- ``cluster``: ``nodes`` x ``ppn`` GPUs, a node-local ``fabric`` (``fullmesh`` or ``switch``) and
  ``nics`` NICs per node (GPU g uses NIC g mod nics) into a non-blocking core;
- ``spineleaf``: ``leaves`` leaf switches of ``hosts`` hosts each, every leaf linked to each of
  ``spines`` spine switches by an ``uplink``; the oversubscription is hosts x bw / (spines x
  uplink); a leaf-to-leaf flow takes the spine its (source + destination) hash picks (ECMP);
- ``fattree``: a ``k``-ary three-level fat tree (k pods of k/2 edge and k/2 aggregation
  switches, (k/2)^2 cores, k^3/4 hosts), routed up by destination (two-level routing).

Keys common to every kind: ``overhead`` (software time per step with transfers), ``reduce``
and ``copy`` (bytes/s of local reductions and copies), as in the cost model's machines.  The
defaults are the cost model's ``h100`` preset (NVLink links of 64 GB/s, 2 us; 50 GB/s NICs,
5 us; 5 us per step; reductions and copies at 1 TB/s), the RAT paper's 40 Gbit/s hosts for
the switched fabrics.
"""

from __future__ import annotations

import random
import re
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Callable

from ..costmodel import Link as ModelLink, Machine
from ..topology import Topology

_PREFIXES = {"": 0, "K": 3, "M": 6, "G": 9, "T": 12}             # powers of ten
_TIME_UNITS = {"": 0, "s": 0, "ms": -3, "us": -6, "ns": -9}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"


def bandwidth(text: str) -> float:
    """'50GB/s' or '50GBps' (bytes: B), '400Gb/s' or '400Gbps' (bits: b), '12.5e9' (bytes
    per second) -> bytes/s; prefixes K, M, G, T are powers of 1000."""
    match = re.fullmatch(_NUMBER + r"(?:([KMGT]?)([Bb])(?:/s|ps))?", text.strip())
    if match and float(match[1]) > 0:
        value = Decimal(match[1]).scaleb(_PREFIXES[match[2] or ""])
        return float(value / 8 if match[3] == "b" else value)
    raise ValueError(f"bad bandwidth {text!r}: use e.g. 50GB/s (bytes), 400Gb/s (bits) or a "
                     "positive number of bytes/s")


def latency(text: str) -> float:
    """'2us', '500ns', '1ms', '0.5s' or seconds -> seconds."""
    match = re.fullmatch(_NUMBER + r"([a-z]*)", text.strip())
    if match and match[2] in _TIME_UNITS:
        return float(Decimal(match[1]).scaleb(_TIME_UNITS[match[2]]))
    raise ValueError(f"bad time {text!r}: use e.g. 2us, 500ns, 1ms or seconds")


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"bad count {text!r}: a whole number >= 1")
    return int(text)


def _fabric(text: str) -> str:
    if text not in ("fullmesh", "switch"):
        raise ValueError(f"bad fabric {text!r}: fullmesh or switch")
    return text


@dataclass(frozen=True)
class Key:
    parse: Callable[[str], object]
    default: str
    help: str


_COMMON = {
    "overhead": Key(latency, "5us", "software time of a step with transfers"),
    "reduce": Key(bandwidth, "1TB/s", "local reduction speed (input bytes per second)"),
    "copy": Key(bandwidth, "1TB/s", "local copy speed"),
}
KINDS: dict[str, dict[str, Key]] = {
    "fullmesh": {"n": Key(_count, "8", "GPUs"),
                 "bw": Key(bandwidth, "64GB/s", "bandwidth of each directed GPU-to-GPU link"),
                 "lat": Key(latency, "2us", "latency of a link")},
    "switch": {"n": Key(_count, "8", "GPUs"),
               "bw": Key(bandwidth, "450GB/s", "bandwidth of each GPU's port, each way"),
               "lat": Key(latency, "2us", "latency GPU to GPU")},
    "cluster": {"nodes": Key(_count, "2", "nodes"),
                "ppn": Key(_count, "8", "GPUs per node"),
                "fabric": Key(_fabric, "fullmesh", "node-local fabric: fullmesh or switch"),
                "bw": Key(bandwidth, "64GB/s", "node-local link (fullmesh) or port (switch)"),
                "lat": Key(latency, "2us", "node-local latency"),
                "nics": Key(_count, "8", "NICs per node (GPU g uses NIC g mod nics)"),
                "nic": Key(bandwidth, "50GB/s", "bandwidth of a NIC, each way"),
                "nic_lat": Key(latency, "5us", "latency between nodes")},
    "spineleaf": {"spines": Key(_count, "2", "spine switches"),
                  "leaves": Key(_count, "4", "leaf switches (racks)"),
                  "hosts": Key(_count, "8", "hosts per leaf (one rank each)"),
                  "bw": Key(bandwidth, "40Gb/s", "host link, each way"),
                  "uplink": Key(bandwidth, "40Gb/s", "leaf-to-spine link, each way"),
                  "lat": Key(latency, "1us", "latency of each link")},
    "fattree": {"k": Key(_count, "4", "switch ports (even): k^3/4 hosts"),
                "bw": Key(bandwidth, "40Gb/s", "every link, each way"),
                "lat": Key(latency, "1us", "latency of each link")},
}


@dataclass(frozen=True)
class NetLink:
    name: str
    bandwidth: float        # bytes/s
    latency: float          # s


@dataclass
class Platform:
    """A machine of ``len(topology)`` ranks, one host each: ``links``, and ``route(a, b)``
    the indices of the links a message from rank a to rank b crosses, in order."""

    spec: str
    links: list[NetLink]
    route: Callable[[int, int], list[int]]
    topology: Topology
    machine: Machine
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        return self.topology.size

    def slowed(self, rank: int, factor: float) -> "Platform":
        """The platform with the links out of and into ``rank`` (the first and last hop of its
        routes) ``factor`` times slower."""
        own = {i for peer in range(self.ranks) if peer != rank
               for i in (self.route(rank, peer)[0], self.route(peer, rank)[-1])}
        return self._slower(own, factor, "slow rank", f"{rank} x{factor:g}")

    def with_slow_links(self, count: int, factor: float, seed: int = 0) -> "Platform":
        """The platform with ``count`` links drawn at random (``seed``) ``factor`` times
        slower for the whole run."""
        chosen = random.Random(seed).sample(range(len(self.links)), min(count, len(self.links)))
        names = [self.links[i].name for i in sorted(chosen)]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        return self._slower(set(chosen), factor, "slow links", f"{shown} x{factor:g}")

    def _slower(self, indices: set[int], factor: float, what: str, note: str) -> "Platform":
        links = [NetLink(l.name, l.bandwidth / factor, l.latency) if i in indices else l
                 for i, l in enumerate(self.links)]
        return Platform(self.spec, links, self.route, self.topology, self.machine,
                        {**self.notes, what: note})


class _Links:
    """Collects links by name; index() adds one the first time."""

    def __init__(self) -> None:
        self.links: list[NetLink] = []
        self.index: dict[str, int] = {}

    def add(self, name: str, bw: float, lat: float) -> int:
        if name not in self.index:
            self.index[name] = len(self.links)
            self.links.append(NetLink(name, bw, lat))
        return self.index[name]


def parse(spec: str) -> tuple[str, dict[str, object]]:
    """'KIND:key=value,...' -> (kind, every key of the kind with its value, defaults filled)."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown platform kind {kind!r}: choose one of {', '.join(KINDS)} "
                         "(hpccoll simulate --platforms lists their keys)")
    keys = {**KINDS[kind], **_COMMON}
    given: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name not in keys:
            raise ValueError(f"platform {kind}: bad item {item!r}; keys: {', '.join(keys)}")
        given[name] = value
    values = {name: key.parse(given.get(name, key.default)) for name, key in keys.items()}
    return kind, values


def build(spec: str) -> Platform:
    """The :class:`Platform` of a ``KIND:key=value,...`` spec."""
    kind, v = parse(spec)
    machine_extras = dict(step_overhead=v["overhead"], reduce_bandwidth=v["reduce"],
                          copy_bandwidth=v["copy"])
    links = _Links()
    if kind in ("fullmesh", "switch"):
        n = v["n"]
        node_route = _node_fabric(links, kind, "", list(range(n)), v["bw"], v["lat"])
        intra = ModelLink(v["lat"], v["bw"], kind == "fullmesh")
        return Platform(spec, links.links, node_route, Topology.from_levels(node=[0] * n),
                        Machine(spec, intra, intra, **machine_extras))
    if kind == "cluster":
        nodes, ppn, nics = v["nodes"], v["ppn"], v["nics"]
        members = [list(range(node * ppn, (node + 1) * ppn)) for node in range(nodes)]
        local = [_node_fabric(links, v["fabric"], f"n{node}.", ranks, v["bw"], v["lat"])
                 for node, ranks in enumerate(members)]
        up = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.up", v["nic"], v["nic_lat"])
              for r in range(nodes * ppn)]
        down = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.down", v["nic"], 0.0)
                for r in range(nodes * ppn)]

        def cluster_route(a: int, b: int) -> list[int]:
            return local[a // ppn](a, b) if a // ppn == b // ppn else [up[a], down[b]]

        intra = ModelLink(v["lat"], v["bw"], v["fabric"] == "fullmesh")
        inter = ModelLink(v["nic_lat"], v["nic"], False)
        return Platform(spec, links.links, cluster_route,
                        Topology.from_levels(node=[r // ppn for r in range(nodes * ppn)]),
                        Machine(spec, intra, inter, **machine_extras),
                        {"GPUs per NIC": f"{ppn / min(nics, ppn):g}"})
    if kind == "spineleaf":
        return _spineleaf(links, v, machine_extras, spec)
    return _fattree(links, v, machine_extras, spec)


def _node_fabric(links: _Links, fabric: str, prefix: str, ranks: list[int], bw: float,
                 lat: float) -> Callable[[int, int], list[int]]:
    """Links of one node's fabric among ``ranks``; returns its route function."""
    if fabric == "fullmesh":
        pair = {(a, b): links.add(f"{prefix}g{a}-g{b}", bw, lat)
                for a in ranks for b in ranks if a != b}
        return lambda a, b: [pair[a, b]]
    up = {r: links.add(f"{prefix}g{r}.up", bw, lat) for r in ranks}
    down = {r: links.add(f"{prefix}g{r}.down", bw, 0.0) for r in ranks}
    return lambda a, b: [up[a], down[b]]


def _host_links(links: _Links, hosts: int, bw: float, lat: float
                ) -> tuple[list[int], list[int]]:
    return ([links.add(f"h{h}.up", bw, lat) for h in range(hosts)],
            [links.add(f"h{h}.down", bw, lat) for h in range(hosts)])


def _spineleaf(links: _Links, v: dict, machine_extras: dict, spec: str) -> Platform:
    spines, leaves, per_leaf = v["spines"], v["leaves"], v["hosts"]
    hosts = leaves * per_leaf
    up, down = _host_links(links, hosts, v["bw"], v["lat"])
    to_spine = [[links.add(f"leaf{l}-spine{s}", v["uplink"], v["lat"]) for s in range(spines)]
                for l in range(leaves)]
    from_spine = [[links.add(f"spine{s}-leaf{l}", v["uplink"], v["lat"])
                   for s in range(spines)] for l in range(leaves)]

    def route(a: int, b: int) -> list[int]:
        la, lb = a // per_leaf, b // per_leaf
        if la == lb:
            return [up[a], down[b]]
        spine = (a + b) % spines
        return [up[a], to_spine[la][spine], from_spine[lb][spine], down[b]]

    ratio = per_leaf * v["bw"] / (spines * v["uplink"])
    rack = ModelLink(2 * v["lat"], v["bw"], False)
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=list(range(hosts)),
                                         rack=[h // per_leaf for h in range(hosts)]),
                    Machine(spec, rack, ModelLink(4 * v["lat"], v["bw"], False),
                            **machine_extras),
                    {"oversubscription": f"{ratio:g}:1"})


def _fattree(links: _Links, v: dict, machine_extras: dict, spec: str) -> Platform:
    k = v["k"]
    if k % 2:
        raise ValueError(f"platform fattree: k must be even, got {k}")
    half = k // 2
    hosts = k * half * half                         # k pods x k/2 edges x k/2 hosts
    bw, lat = v["bw"], v["lat"]
    up, down = _host_links(links, hosts, bw, lat)

    def edge_of(h: int) -> int:                     # global edge switch index
        return h // half

    def link(name: str) -> int:
        return links.add(name, bw, lat)

    def route(a: int, b: int) -> list[int]:
        ea, eb = edge_of(a), edge_of(b)
        if ea == eb:
            return [up[a], down[b]]
        pa, pb = ea // half, eb // half
        agg = b % half                              # the aggregation switch, by destination
        if pa == pb:
            return [up[a], link(f"e{ea}-a{pa}.{agg}"), link(f"a{pa}.{agg}-e{eb}"), down[b]]
        core = (b // half) % half                   # the core above that aggregation switch
        return [up[a], link(f"e{ea}-a{pa}.{agg}"), link(f"a{pa}.{agg}-c{agg}.{core}"),
                link(f"c{agg}.{core}-a{pb}.{agg}"), link(f"a{pb}.{agg}-e{eb}"), down[b]]

    for a in range(hosts):                          # every link exists before the build
        for b in range(hosts):
            if a != b:
                route(a, b)
    edge = ModelLink(2 * lat, bw, False)
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=list(range(hosts)),
                                         rack=[edge_of(h) for h in range(hosts)],
                                         pod=[edge_of(h) // half for h in range(hosts)]),
                    Machine(spec, edge, ModelLink(6 * lat, bw, False), **machine_extras),
                    {"hosts": hosts})


def describe() -> str:
    """The kinds, their keys and defaults (``hpccoll simulate --platforms``)."""
    lines = []
    for kind, keys in KINDS.items():
        lines.append(f"{kind}:")
        for name, key in {**keys, **_COMMON}.items():
            lines.append(f"  {name:<9} {key.default:<9} {key.help}")
    return "\n".join(lines)

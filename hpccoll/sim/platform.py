"""Modelled machines for the simulator, described in Python (no XML): ``KIND:key=value,...``.

A :class:`Platform` is pure data: one host per rank, the links (bandwidth, latency) and, for
every ordered pair of ranks, the links a message crosses; the :class:`~hpccoll.topology.
Topology` its ranks form (so planners see the machine they run on), the cost model's
:class:`~hpccoll.costmodel.Machine` of the same links (so model and simulator speak of one
machine) and the :class:`Network` SimGrid builds it as (:mod:`hpccoll.sim.network`: one
explicit route per ordered rank pair, a zone per node, a spine-leaf's star of a host per rank
and spine, or SimGrid's own torus, dragonfly and fat-tree zones, which route themselves).
Every link names its level (node, nic, host, spine, pod, core, dimN, local, global): the
replay's traffic is summed by level.

The kinds are declared once, in :data:`PLATFORMS` (what each is, its keys with their defaults, its
builder); ``hpccoll simulate --platforms`` lists them.  Every key has a default, so
``fullmesh:n=8`` or even ``fullmesh`` is a valid spec; bandwidths as ``50GB/s``, ``400Gb/s``,
``100Gbps`` or bytes/s; latencies as ``2us``, ``500ns``, ``1ms`` or seconds.  Keys common to
every kind: ``overhead`` (software time per step with transfers), ``reduce`` and ``copy``
(bytes/s of local reductions and copies), as in the cost model's machines.  The defaults are
the cost model's ``h100`` preset (NVLink links of 64 GB/s, 2 us; 50 GB/s NICs, 5 us; 5 us per
step; reductions and copies at 1 TB/s), the RAT paper's 40 Gbit/s hosts for the switched
fabrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..costmodel import Link as ModelLink
from ..topology import Topology
from .grids import GRID_ZONE, dragonfly, grid, grid_keys, grid_link_name, torus_hops
from .trees import ecmp_hash, fattree, spineleaf
from .parts import (Key, Links, NetLink, Network, Platform, bandwidth, latency, machine_of,
                    parse_count, parse_ecmp, parse_fabric, parse_seed)

__all__ = ["GRID_ZONE", "PLATFORMS", "Kind", "NetLink", "Network", "Platform", "bandwidth",
           "build", "describe", "ecmp_hash", "grid_link_name", "latency", "parse",
           "torus_hops"]


def _node_fabric(links: Links, fabric: str, prefix: str, ranks: list[int], bw: float,
                 lat: float) -> Callable[[int, int], list[int]]:
    """Links of one node's fabric among ``ranks``; returns its route function."""
    if fabric == "fullmesh":
        pair = {(a, b): links.add(f"{prefix}g{a}-g{b}", bw, lat, "node")
                for a in ranks for b in ranks if a != b}
        return lambda a, b: [pair[a, b]]
    up = {r: links.add(f"{prefix}g{r}.up", bw, lat, "node") for r in ranks}
    down = {r: links.add(f"{prefix}g{r}.down", bw, 0.0, "node") for r in ranks}
    return lambda a, b: [up[a], down[b]]


def _one_node(kind: str):
    """The builder of a one-node kind (fullmesh or switch: the node's fabric)."""
    def build(spec: str, v: dict) -> Platform:
        links, n = Links(), v["n"]
        route = _node_fabric(links, kind, "", list(range(n)), v["bw"], v["lat"])
        link = ModelLink(v["lat"], v["bw"], kind == "fullmesh")
        return Platform(spec, links.links, route, Topology.from_levels(node=[0] * n),
                        machine_of(spec, v, link, link))
    return build


def _cluster(spec: str, v: dict) -> Platform:
    links = Links()
    nodes, ppn, nics = v["nodes"], v["ppn"], v["nics"]
    members = [list(range(node * ppn, (node + 1) * ppn)) for node in range(nodes)]
    local = [_node_fabric(links, v["fabric"], f"n{node}.", ranks, v["bw"], v["lat"])
             for node, ranks in enumerate(members)]
    up = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.up", v["nic"], v["nic_lat"], "nic")
          for r in range(nodes * ppn)]
    down = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.down", v["nic"], 0.0, "nic")
            for r in range(nodes * ppn)]

    def route(a: int, b: int) -> list[int]:
        return local[a // ppn](a, b) if a // ppn == b // ppn else [up[a], down[b]]

    intra = ModelLink(v["lat"], v["bw"], v["fabric"] == "fullmesh")
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=[r // ppn for r in range(nodes * ppn)]),
                    machine_of(spec, v, intra, ModelLink(v["nic_lat"], v["nic"], False)),
                    {"GPUs per NIC": f"{ppn / min(nics, ppn):g}"}, Network("nodes"))


# ---------------------------------------------------------------------- the kinds

@dataclass(frozen=True)
class Kind:
    """A platform kind: what it is, its keys (with defaults), its builder (spec, values)."""

    help: str
    keys: dict[str, Key]
    build: Callable[[str, dict], Platform]


_COMMON = {
    "overhead": Key(latency, "5us", "software time of a step with transfers"),
    "reduce": Key(bandwidth, "1TB/s", "local reduction speed (input bytes per second)"),
    "copy": Key(bandwidth, "1TB/s", "local copy speed"),
}




PLATFORMS: dict[str, Kind] = {
    "fullmesh": Kind(
        "n GPUs, one link per ordered pair (an AMD MI300X-like Infinity Fabric mesh)",
        {"n": Key(parse_count, "8", "GPUs"),
         "bw": Key(bandwidth, "64GB/s", "bandwidth of each directed GPU-to-GPU link"),
         "lat": Key(latency, "2us", "latency of a link")},
        _one_node("fullmesh")),
    "switch": Kind(
        "n GPUs, one port each (a link each way) into a non-blocking switch (NVSwitch-like)",
        {"n": Key(parse_count, "8", "GPUs"),
         "bw": Key(bandwidth, "450GB/s", "bandwidth of each GPU's port, each way"),
         "lat": Key(latency, "2us", "latency GPU to GPU")},
        _one_node("switch")),
    "cluster": Kind(
        "nodes x ppn GPUs: a node-local fabric, NICs per node (GPU g uses NIC g mod nics) into "
        "a non-blocking core",
        {"nodes": Key(parse_count, "2", "nodes"),
         "ppn": Key(parse_count, "8", "GPUs per node"),
         "fabric": Key(parse_fabric, "fullmesh", "node-local fabric: fullmesh or switch"),
         "bw": Key(bandwidth, "64GB/s", "node-local link (fullmesh) or port (switch)"),
         "lat": Key(latency, "2us", "node-local latency"),
         "nics": Key(parse_count, "8", "NICs per node (GPU g uses NIC g mod nics)"),
         "nic": Key(bandwidth, "50GB/s", "bandwidth of a NIC, each way"),
         "nic_lat": Key(latency, "5us", "latency between nodes")},
        _cluster),
    "spineleaf": Kind(
        "leaves of hosts, every leaf linked to each spine; oversubscription hosts x bw / "
        "(spines x uplink); a leaf-to-leaf flow takes the spine ECMP picks",
        {"spines": Key(parse_count, "2", "spine switches"),
         "leaves": Key(parse_count, "4", "leaf switches (racks)"),
         "hosts": Key(parse_count, "8", "hosts per leaf (one rank each)"),
         "bw": Key(bandwidth, "40Gb/s", "host link, each way"),
         "uplink": Key(bandwidth, "40Gb/s", "leaf-to-spine link, each way"),
         "lat": Key(latency, "1us", "latency of each link"),
         "ecmp": Key(parse_ecmp, "hash", "spine of a flow: hash (a seeded hash of source and "
                                    "destination), sum ((source + destination) mod spines) or "
                                    "dmodk (destination mod spines)"),
         "seed": Key(parse_seed, "0", "seed of the ecmp hash")},
        spineleaf),
    "fattree": Kind(
        "a k-ary three-level fat tree (k pods of k/2 edge and k/2 aggregation switches, "
        "(k/2)^2 cores, k^3/4 hosts), routed up by destination (d-mod-k; SimGrid's fat-tree "
        "zone)",
        {"k": Key(parse_count, "4", "switch ports (even): k^3/4 hosts"),
         "bw": Key(bandwidth, "40Gb/s", "every link, each way (core links: bw / taper)"),
         "taper": Key(parse_count, "1", "oversubscription between pods: the aggregation-to-"
                                       "core links at bw / taper (1: non-blocking)"),
         "lat": Key(latency, "1us", "latency of each link")},
        fattree),
    "torus": Kind(
        "a torus of dims (wrap-around links), one rank per node, dimension-order routing the "
        "shorter way round (SimGrid's torus zone)",
        grid_keys(), grid(wrap=True)),
    "mesh": Kind(
        "a mesh of dims (no wrap-around), one rank per node, dimension-order routing",
        grid_keys(), grid(wrap=False)),
    "dragonfly": Kind(
        "groups of routers linked all to all, hosts per router, one global link between every "
        "two groups (on router j of group i to group j: groups <= routers), minimal routing "
        "(SimGrid's dragonfly zone)",
        {"groups": Key(parse_count, "4", "groups"),
         "routers": Key(parse_count, "4", "routers per group (at least groups)"),
         "hosts": Key(parse_count, "4", "hosts per router (one rank each)"),
         "bw": Key(bandwidth, "50GB/s", "host-to-router link, each way"),
         "local": Key(bandwidth, "50GB/s", "router-to-router link within a group, each way"),
         "global": Key(bandwidth, "25GB/s", "link between two groups, each way"),
         "lat": Key(latency, "1us", "latency of a host or local link"),
         "global_lat": Key(latency, "1us", "latency of a global link")},
        dragonfly),
}


def parse(spec: str) -> tuple[str, dict[str, object]]:
    """'KIND:key=value,...' -> (kind, every key of the kind with its value, defaults filled)."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in PLATFORMS:
        raise ValueError(f"unknown platform kind {kind!r}: choose one of {', '.join(PLATFORMS)} "
                         "(hpccoll simulate --platforms lists their keys)")
    keys = {**PLATFORMS[kind].keys, **_COMMON}
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
    kind, values = parse(spec)
    return PLATFORMS[kind].build(spec, values)


def describe() -> str:
    """The kinds, what each is, their keys and defaults (``hpccoll simulate --platforms``)."""
    lines = []
    for name, kind in PLATFORMS.items():
        lines.append(f"{name}: {kind.help}")
        for key_name, key in {**kind.keys, **_COMMON}.items():
            lines.append(f"  {key_name:<10} {key.default:<9} {key.help}")
    return "\n".join(lines)

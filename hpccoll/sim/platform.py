"""Modelled machines for the simulator, described in Python (no XML): ``KIND:key=value,...``.

A :class:`Platform` is pure data: one host per rank, the links (bandwidth, latency) and, for
every ordered pair of ranks, the links a message crosses; the :class:`~hpccoll.topology.
Topology` its ranks form (so planners see the machine they run on), the cost model's
:class:`~hpccoll.costmodel.Machine` of the same links (so model and simulator speak of one
machine) and the :class:`Network` SimGrid builds it as (:mod:`hpccoll.sim.network`: one
explicit route per ordered rank pair, or SimGrid's own torus and dragonfly zones, which
route themselves).

The kinds are declared once, in :data:`KINDS` (what each is, its keys with their defaults, its
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
from .parts import (Key, Links, NetLink, Network, Platform, bandwidth, latency, machine_of,
                    parse_count, parse_ecmp, parse_fabric, parse_seed)

__all__ = ["GRID_ZONE", "KINDS", "Kind", "NetLink", "Network", "Platform", "bandwidth",
           "build", "describe", "ecmp_hash", "grid_link_name", "latency", "parse",
           "torus_hops"]


def _nodeparse_fabric(links: Links, fabric: str, prefix: str, ranks: list[int], bw: float,
                 lat: float) -> Callable[[int, int], list[int]]:
    """Links of one node's fabric among ``ranks``; returns its route function."""
    if fabric == "fullmesh":
        pair = {(a, b): links.add(f"{prefix}g{a}-g{b}", bw, lat)
                for a in ranks for b in ranks if a != b}
        return lambda a, b: [pair[a, b]]
    up = {r: links.add(f"{prefix}g{r}.up", bw, lat) for r in ranks}
    down = {r: links.add(f"{prefix}g{r}.down", bw, 0.0) for r in ranks}
    return lambda a, b: [up[a], down[b]]


def _one_node(kind: str):
    """The builder of a one-node kind (fullmesh or switch: the node's fabric)."""
    def build(spec: str, v: dict) -> Platform:
        links, n = Links(), v["n"]
        route = _nodeparse_fabric(links, kind, "", list(range(n)), v["bw"], v["lat"])
        link = ModelLink(v["lat"], v["bw"], kind == "fullmesh")
        return Platform(spec, links.links, route, Topology.from_levels(node=[0] * n),
                        machine_of(spec, v, link, link))
    return build


def _cluster(spec: str, v: dict) -> Platform:
    links = Links()
    nodes, ppn, nics = v["nodes"], v["ppn"], v["nics"]
    members = [list(range(node * ppn, (node + 1) * ppn)) for node in range(nodes)]
    local = [_nodeparse_fabric(links, v["fabric"], f"n{node}.", ranks, v["bw"], v["lat"])
             for node, ranks in enumerate(members)]
    up = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.up", v["nic"], v["nic_lat"])
          for r in range(nodes * ppn)]
    down = [links.add(f"n{r // ppn}.nic{r % ppn % nics}.down", v["nic"], 0.0)
            for r in range(nodes * ppn)]

    def route(a: int, b: int) -> list[int]:
        return local[a // ppn](a, b) if a // ppn == b // ppn else [up[a], down[b]]

    intra = ModelLink(v["lat"], v["bw"], v["fabric"] == "fullmesh")
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=[r // ppn for r in range(nodes * ppn)]),
                    machine_of(spec, v, intra, ModelLink(v["nic_lat"], v["nic"], False)),
                    {"GPUs per NIC": f"{ppn / min(nics, ppn):g}"}, Network("nodes"))


def _host_links(links: Links, hosts: int, bw: float, lat: float
                ) -> tuple[list[int], list[int]]:
    return ([links.add(f"h{h}.up", bw, lat) for h in range(hosts)],
            [links.add(f"h{h}.down", bw, lat) for h in range(hosts)])


def ecmp_hash(src: int, dst: int, seed: int, choices: int) -> int:
    """One of ``choices`` paths for the flow src -> dst: a SplitMix64 finaliser of (seed, src,
    dst), so the flows of one round (all pairs at one XOR or shift distance) spread over the
    paths as a switch's ECMP hash of the flow's addresses does."""
    x = (seed * 0x9E3779B97F4A7C15 + src * 0xBF58476D1CE4E5B9 + dst * 0x94D049BB133111EB
         + 1) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) % choices


def _spineleaf(spec: str, v: dict) -> Platform:
    links = Links()
    spines, leaves, per_leaf = v["spines"], v["leaves"], v["hosts"]
    hosts = leaves * per_leaf
    up, down = _host_links(links, hosts, v["bw"], v["lat"])
    to_spine = [[links.add(f"leaf{l}-spine{s}", v["uplink"], v["lat"]) for s in range(spines)]
                for l in range(leaves)]
    from_spine = [[links.add(f"spine{s}-leaf{l}", v["uplink"], v["lat"])
                   for s in range(spines)] for l in range(leaves)]
    seed = v["seed"]
    pick = (lambda a, b: ecmp_hash(a, b, seed, spines)) if v["ecmp"] == "hash" else \
        (lambda a, b: (a + b) % spines)

    def route(a: int, b: int) -> list[int]:
        la, lb = a // per_leaf, b // per_leaf
        if la == lb:
            return [up[a], down[b]]
        spine = pick(a, b)
        return [up[a], to_spine[la][spine], from_spine[lb][spine], down[b]]

    ratio = per_leaf * v["bw"] / (spines * v["uplink"])
    rack = ModelLink(2 * v["lat"], v["bw"], False)
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=list(range(hosts)),
                                         rack=[h // per_leaf for h in range(hosts)]),
                    machine_of(spec, v, rack, ModelLink(4 * v["lat"], v["bw"], False)),
                    {"oversubscription": f"{ratio:g}:1"})


def _fattree(spec: str, v: dict) -> Platform:
    k = v["k"]
    if k % 2:
        raise ValueError(f"platform fattree: k must be even, got {k}")
    links, half = Links(), k // 2
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
                    machine_of(spec, v, edge, ModelLink(6 * lat, bw, False)), {"hosts": hosts})


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




KINDS: dict[str, Kind] = {
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
                                    "destination) or sum ((source + destination) mod spines)"),
         "seed": Key(parse_seed, "0", "seed of the ecmp hash")},
        _spineleaf),
    "fattree": Kind(
        "a k-ary three-level fat tree (k pods of k/2 edge and k/2 aggregation switches, "
        "(k/2)^2 cores, k^3/4 hosts), routed up by destination (two-level routing)",
        {"k": Key(parse_count, "4", "switch ports (even): k^3/4 hosts"),
         "bw": Key(bandwidth, "40Gb/s", "every link, each way"),
         "lat": Key(latency, "1us", "latency of each link")},
        _fattree),
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
    if kind not in KINDS:
        raise ValueError(f"unknown platform kind {kind!r}: choose one of {', '.join(KINDS)} "
                         "(hpccoll simulate --platforms lists their keys)")
    keys = {**KINDS[kind].keys, **_COMMON}
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
    return KINDS[kind].build(spec, values)


def describe() -> str:
    """The kinds, what each is, their keys and defaults (``hpccoll simulate --platforms``)."""
    lines = []
    for name, kind in KINDS.items():
        lines.append(f"{name}: {kind.help}")
        for key_name, key in {**kind.keys, **_COMMON}.items():
            lines.append(f"  {key_name:<10} {key.default:<9} {key.help}")
    return "\n".join(lines)

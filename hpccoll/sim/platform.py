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

import math
import random
import re
from decimal import Decimal
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

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


def _dims(text: str) -> tuple[int, ...]:
    """'16x16' or '8x8x4' (or '64': one dimension) -> the size of each dimension."""
    try:
        return tuple(_count(part) for part in text.split("x"))
    except ValueError:
        raise ValueError(f"bad dims {text!r}: sizes >= 1 joined by x, e.g. 16x16 or 8x8x4"
                         ) from None


def _ecmp(text: str) -> str:
    if text not in ("hash", "sum"):
        raise ValueError(f"bad ecmp {text!r}: hash or sum")
    return text


def _seed(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"bad seed {text!r}: a whole number >= 0")
    return int(text)


@dataclass(frozen=True)
class Key:
    parse: Callable[[str], object]
    default: str
    help: str


@dataclass(frozen=True)
class NetLink:
    name: str
    bandwidth: float        # bytes/s
    latency: float          # s


@dataclass(frozen=True)
class Network:
    """What SimGrid builds (:mod:`hpccoll.sim.network`): ``zone`` "routes" (a host per rank
    and the route of every ordered pair, from :attr:`Platform.route`) or one of SimGrid's own
    cluster zones, "torus" or "dragonfly", made from ``params`` with rank r on the zone's
    element ``elements[r]``.  A zone's links carry the names :attr:`Platform.links` gives
    them."""

    zone: str = "routes"
    params: tuple = ()
    elements: tuple[int, ...] = ()


@dataclass
class Platform:
    """A machine of ``len(topology)`` ranks, one host each: ``links``, and ``route(a, b)``
    the indices of the links a message from rank a to rank b crosses, in order; ``retuned``:
    the links whose speed differs from what ``network`` builds them with (set after it)."""

    spec: str
    links: list[NetLink]
    route: Callable[[int, int], list[int]]
    topology: Topology
    machine: Machine
    notes: dict[str, object] = field(default_factory=dict)
    network: Network = Network()
    retuned: frozenset[int] = frozenset()

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

    def placed(self, hosts: Sequence[int]) -> "Platform":
        """The platform with rank r on the host rank ``hosts[r]`` had (a permutation): routes,
        topology and SimGrid elements follow the ranks."""
        if sorted(hosts) != list(range(self.ranks)):
            raise ValueError(f"a placement is a permutation of the {self.ranks} ranks")
        order = tuple(hosts)
        route = self.route
        topology = Topology.from_levels(**{
            name: [regions[h] for h in order]
            for name, regions in zip(self.topology.levels, self.topology.regions)})
        elements = tuple(self.network.elements[h] for h in order) if self.network.elements \
            else ()
        return replace(self, route=lambda a, b: route(order[a], order[b]), topology=topology,
                       network=replace(self.network, elements=elements),
                       notes={**self.notes, "placement": "permuted"})

    def _slower(self, indices: set[int], factor: float, what: str, note: str) -> "Platform":
        links = [NetLink(l.name, l.bandwidth / factor, l.latency) if i in indices else l
                 for i, l in enumerate(self.links)]
        return replace(self, links=links, notes={**self.notes, what: note},
                       retuned=self.retuned | indices)


class _Links:
    """Collects links by name; add() adds one the first time."""

    def __init__(self) -> None:
        self.links: list[NetLink] = []
        self.index: dict[str, int] = {}

    def add(self, name: str, bw: float, lat: float) -> int:
        if name not in self.index:
            self.index[name] = len(self.links)
            self.links.append(NetLink(name, bw, lat))
        return self.index[name]


def _machine(spec: str, v: dict, intra: ModelLink, inter: ModelLink) -> Machine:
    """The cost model's machine of these link classes and the common keys' local speeds."""
    return Machine(spec, intra, inter, step_overhead=v["overhead"],
                   reduce_bandwidth=v["reduce"], copy_bandwidth=v["copy"])


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


def _one_node(kind: str):
    """The builder of a one-node kind (fullmesh or switch: the node's fabric)."""
    def build(spec: str, v: dict) -> Platform:
        links, n = _Links(), v["n"]
        route = _node_fabric(links, kind, "", list(range(n)), v["bw"], v["lat"])
        link = ModelLink(v["lat"], v["bw"], kind == "fullmesh")
        return Platform(spec, links.links, route, Topology.from_levels(node=[0] * n),
                        _machine(spec, v, link, link))
    return build


def _cluster(spec: str, v: dict) -> Platform:
    links = _Links()
    nodes, ppn, nics = v["nodes"], v["ppn"], v["nics"]
    members = [list(range(node * ppn, (node + 1) * ppn)) for node in range(nodes)]
    local = [_node_fabric(links, v["fabric"], f"n{node}.", ranks, v["bw"], v["lat"])
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
                    _machine(spec, v, intra, ModelLink(v["nic_lat"], v["nic"], False)),
                    {"GPUs per NIC": f"{ppn / min(nics, ppn):g}"}, Network("nodes"))


def _host_links(links: _Links, hosts: int, bw: float, lat: float
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
    links = _Links()
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
                    _machine(spec, v, rack, ModelLink(4 * v["lat"], v["bw"], False)),
                    {"oversubscription": f"{ratio:g}:1"})


def _fattree(spec: str, v: dict) -> Platform:
    k = v["k"]
    if k % 2:
        raise ValueError(f"platform fattree: k must be even, got {k}")
    links, half = _Links(), k // 2
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
                    _machine(spec, v, edge, ModelLink(6 * lat, bw, False)), {"hosts": hosts})


# ---------------------------------------------------------------------- torus and mesh

GRID_ZONE = "machine"           # the SimGrid zone's name, which its links' names begin with


def _coords(element: int, dims: Sequence[int]) -> list[int]:
    """An element's coordinates in a grid of ``dims``, the first dimension varying fastest
    (SimGrid's TorusZone numbering)."""
    out = []
    for d in dims:
        out.append(element % d)
        element //= d
    return out


def _element(coords: Sequence[int], dims: Sequence[int]) -> int:
    element, product = 0, 1
    for c, d in zip(coords, dims):
        element += c * product
        product *= d
    return element


def _neighbour(element: int, dim: int, dims: Sequence[int]) -> int:
    """The next element along ``dim`` (wrapping round): where its link of that dimension
    leads."""
    coords = _coords(element, dims)
    coords[dim] = (coords[dim] + 1) % dims[dim]
    return _element(coords, dims)


def torus_hops(src: int, dst: int, dims: Sequence[int]) -> list[tuple[int, int, bool]]:
    """SimGrid's TorusZone route from element src to dst as (element owning the link,
    dimension, True: the link's forward direction / False: its backward one) per hop:
    dimension order, each dimension the shorter way round (its tie rule kept)."""
    start = _coords(src, dims)
    target = _coords(dst, dims)
    hops, current = [], list(start)
    for dim, d in enumerate(dims):
        mine, want = start[dim], target[dim]
        forward = mine < want <= mine + d // 2 or (mine > d // 2 and (mine + d // 2) % d >= want)
        while current[dim] != want:
            if forward:
                hops.append((_element(current, dims), dim, True))
                current[dim] = (current[dim] + 1) % d
            else:
                current[dim] = (current[dim] - 1) % d
                hops.append((_element(current, dims), dim, False))
    return hops


def grid_link_name(element: int, dim: int, forward: bool, dims: Sequence[int]) -> str:
    """The name SimGrid's TorusZone gives the link of ``element`` along ``dim`` (split
    duplex: _UP forward, _DOWN backward)."""
    return (f"{GRID_ZONE}_link_from_{element}_to_{_neighbour(element, dim, dims)}_"
            f"{'UP' if forward else 'DOWN'}")


def _grid(wrap: bool):
    """The builder of a torus (``wrap``) or a mesh: one rank per node, dimension-order
    routing.  A mesh is SimGrid's torus of twice each dimension with the ranks in the first
    half of every dimension: no shortest route between them wraps round, so SimGrid's own
    routing is the mesh's, and the other elements stay idle."""
    def build(spec: str, v: dict) -> Platform:
        dims, bw, lat = v["dims"], v["bw"], v["lat"]
        zone_dims = dims if wrap else tuple(2 * d for d in dims)
        ranks = math.prod(dims)
        elements = tuple(_element(_coords(r, dims), zone_dims) for r in range(ranks))
        links = _Links()
        for element in elements:
            coords = _coords(element, zone_dims)
            for dim, d in enumerate(dims):
                if d > 1 and (wrap or coords[dim] + 1 < d):
                    for forward in (True, False):
                        links.add(grid_link_name(element, dim, forward, zone_dims), bw, lat)

        def route(a: int, b: int) -> list[int]:
            return [links.index[grid_link_name(e, dim, forward, zone_dims)]
                    for e, dim, forward in torus_hops(elements[a], elements[b], zone_dims)]

        hop = ModelLink(lat, bw, True)              # a neighbour over a link of its own
        diameter = sum(d // 2 if wrap else d - 1 for d in dims)
        return Platform(spec, links.links, route, Topology.from_levels(node=range(ranks)),
                        _machine(spec, v, hop, hop), {"diameter": f"{diameter} hops"},
                        Network("torus", (zone_dims, bw, lat), elements))
    return build


# ---------------------------------------------------------------------- dragonfly

def _dragonfly(spec: str, v: dict) -> Platform:
    """SimGrid's DragonflyZone with one chassis per group: ``hosts`` nodes per router, the
    ``routers`` of a group linked all to all (local links), one global link between every two
    groups, router j of group i holding the one to group j (so groups <= routers); minimal
    routing: to the router of the source group linked to the destination group, across, to
    the destination router.  Links named as SimGrid names them (its counter from 0)."""
    groups, routers, per_router = v["groups"], v["routers"], v["hosts"]
    if groups > routers:
        raise ValueError(f"platform dragonfly: groups ({groups}) must not exceed routers "
                         f"({routers}): router j of each group holds the global link to group j")
    links, uid = _Links(), 0

    def pair(name: str, bw: float, lat: float) -> tuple[int, int]:
        nonlocal uid
        made = (links.add(f"{name}_{uid}_UP", bw, lat), links.add(f"{name}_{uid}_DOWN", bw, lat))
        uid += 1
        return made

    host = [[pair(f"local_link_from_router_{r}_to_node_{h}", v["bw"], v["lat"])
             for h in range(per_router)] for r in range(groups * routers)]
    local = {(g, j, k): pair(f"green_link_in_chassis_0_between_routers_{j}_and_{k}",
                             v["local"], v["lat"])
             for g in range(groups) for j in range(routers) for k in range(j + 1, routers)}
    wide = {(i, j): pair(f"blue_link_between_group_{i}_and_{j}_routers_{i * routers + j}_and_"
                         f"{j * routers + i}", v["global"], v["global_lat"])
            for i in range(groups) for j in range(i + 1, groups)}

    def hop(links_of: dict, low: int, high: int, key: tuple) -> int:
        up, down = links_of[key]
        return up if low < high else down

    def within(g: int, a: int, b: int) -> list[int]:
        return [] if a == b else [hop(local, a, b, (g, min(a, b), max(a, b)))]

    def route(a: int, b: int) -> list[int]:
        (ga, ra), ha = divmod(a // per_router, routers), a % per_router
        (gb, rb), hb = divmod(b // per_router, routers), b % per_router
        path = [host[a // per_router][ha][0]]
        if ga != gb:
            path += within(ga, ra, gb) + [hop(wide, ga, gb, (min(ga, gb), max(ga, gb)))]
            ra = ga                                  # arrived at router ga of group gb
        path += within(gb, ra, rb)
        return path + [host[b // per_router][hb][1]]

    zone = (v["bw"], v["lat"])
    retuned = frozenset(i for i, l in enumerate(links.links) if (l.bandwidth, l.latency) != zone)
    ranks = groups * routers * per_router
    lat, glat = v["lat"], v["global_lat"]
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=range(ranks),
                                         router=[r // per_router for r in range(ranks)],
                                         group=[r // (per_router * routers) for r in range(ranks)]),
                    _machine(spec, v, ModelLink(2 * lat, v["bw"], False),
                             ModelLink(4 * lat + glat, v["bw"], False)),
                    {"global links": groups * (groups - 1) // 2},
                    Network("dragonfly", ((groups, 1), (1, 1), (routers, 1), per_router,
                                          v["bw"], v["lat"]), tuple(range(ranks))),
                    retuned)


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


def _grid_keys() -> dict[str, Key]:
    return {"dims": Key(_dims, "4x4", "nodes along each dimension, AxB[xC...] (one rank each)"),
            "bw": Key(bandwidth, "50GB/s", "bandwidth of each link between neighbours, each "
                                           "way"),
            "lat": Key(latency, "1us", "latency of each link (per hop)")}


KINDS: dict[str, Kind] = {
    "fullmesh": Kind(
        "n GPUs, one link per ordered pair (an AMD MI300X-like Infinity Fabric mesh)",
        {"n": Key(_count, "8", "GPUs"),
         "bw": Key(bandwidth, "64GB/s", "bandwidth of each directed GPU-to-GPU link"),
         "lat": Key(latency, "2us", "latency of a link")},
        _one_node("fullmesh")),
    "switch": Kind(
        "n GPUs, one port each (a link each way) into a non-blocking switch (NVSwitch-like)",
        {"n": Key(_count, "8", "GPUs"),
         "bw": Key(bandwidth, "450GB/s", "bandwidth of each GPU's port, each way"),
         "lat": Key(latency, "2us", "latency GPU to GPU")},
        _one_node("switch")),
    "cluster": Kind(
        "nodes x ppn GPUs: a node-local fabric, NICs per node (GPU g uses NIC g mod nics) into "
        "a non-blocking core",
        {"nodes": Key(_count, "2", "nodes"),
         "ppn": Key(_count, "8", "GPUs per node"),
         "fabric": Key(_fabric, "fullmesh", "node-local fabric: fullmesh or switch"),
         "bw": Key(bandwidth, "64GB/s", "node-local link (fullmesh) or port (switch)"),
         "lat": Key(latency, "2us", "node-local latency"),
         "nics": Key(_count, "8", "NICs per node (GPU g uses NIC g mod nics)"),
         "nic": Key(bandwidth, "50GB/s", "bandwidth of a NIC, each way"),
         "nic_lat": Key(latency, "5us", "latency between nodes")},
        _cluster),
    "spineleaf": Kind(
        "leaves of hosts, every leaf linked to each spine; oversubscription hosts x bw / "
        "(spines x uplink); a leaf-to-leaf flow takes the spine ECMP picks",
        {"spines": Key(_count, "2", "spine switches"),
         "leaves": Key(_count, "4", "leaf switches (racks)"),
         "hosts": Key(_count, "8", "hosts per leaf (one rank each)"),
         "bw": Key(bandwidth, "40Gb/s", "host link, each way"),
         "uplink": Key(bandwidth, "40Gb/s", "leaf-to-spine link, each way"),
         "lat": Key(latency, "1us", "latency of each link"),
         "ecmp": Key(_ecmp, "hash", "spine of a flow: hash (a seeded hash of source and "
                                    "destination) or sum ((source + destination) mod spines)"),
         "seed": Key(_seed, "0", "seed of the ecmp hash")},
        _spineleaf),
    "fattree": Kind(
        "a k-ary three-level fat tree (k pods of k/2 edge and k/2 aggregation switches, "
        "(k/2)^2 cores, k^3/4 hosts), routed up by destination (two-level routing)",
        {"k": Key(_count, "4", "switch ports (even): k^3/4 hosts"),
         "bw": Key(bandwidth, "40Gb/s", "every link, each way"),
         "lat": Key(latency, "1us", "latency of each link")},
        _fattree),
    "torus": Kind(
        "a torus of dims (wrap-around links), one rank per node, dimension-order routing the "
        "shorter way round (SimGrid's torus zone)",
        _grid_keys(), _grid(wrap=True)),
    "mesh": Kind(
        "a mesh of dims (no wrap-around), one rank per node, dimension-order routing",
        _grid_keys(), _grid(wrap=False)),
    "dragonfly": Kind(
        "groups of routers linked all to all, hosts per router, one global link between every "
        "two groups (on router j of group i to group j: groups <= routers), minimal routing "
        "(SimGrid's dragonfly zone)",
        {"groups": Key(_count, "4", "groups"),
         "routers": Key(_count, "4", "routers per group (at least groups)"),
         "hosts": Key(_count, "4", "hosts per router (one rank each)"),
         "bw": Key(bandwidth, "50GB/s", "host-to-router link, each way"),
         "local": Key(bandwidth, "50GB/s", "router-to-router link within a group, each way"),
         "global": Key(bandwidth, "25GB/s", "link between two groups, each way"),
         "lat": Key(latency, "1us", "latency of a host or local link"),
         "global_lat": Key(latency, "1us", "latency of a global link")},
        _dragonfly),
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

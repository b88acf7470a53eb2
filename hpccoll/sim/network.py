"""A :class:`~hpccoll.sim.platform.Platform` built in SimGrid: hosts, links and routing.

``routes``: a full zone with one host per rank and the platform's route of every ordered
pair (any machine, but a table of p^2 routes).  ``nodes`` (cluster): a zone per node with its
own routes under a star zone that joins the nodes' gateways.  ``planes`` (spine-leaf): one
star zone of a host per rank and spine (:mod:`hpccoll.sim.trees`), a transfer sent between
the hosts of the plane its pair's route takes.  ``torus``, ``dragonfly`` and ``fattree``:
SimGrid's own cluster zones, which compute a route when asked (built in a fraction of a
second at thousands of ranks); the platform's links mirror theirs by name, so the links a
platform retunes (slow ranks and links, a dragonfly's local and global speeds) are set on
them after the zone is sealed.

:func:`build` gives the hosts, each rank's own (where its computation runs) first, and
:func:`transfer_ends` the indices of the two a transfer between two ranks runs between (None:
the ranks' own), which needs no engine: jobs are flattened for the compiled controller before
the platform is built (:mod:`hpccoll.sim.compiled`).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from .grids import GRID_ZONE
from .parts import Platform
from .trees import FATTREE_ZONE

Ends = Optional[Callable[[int, int], tuple]]


def build(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    """The platform in ``simulation``'s engine: its hosts (``speed`` flops/s), the ranks' own
    in rank order first (see the module doc)."""
    return _BUILDERS[platform.network.zone](sg, simulation, platform, speed)


def transfer_ends(platform: Platform) -> Ends:
    """``ends(src, dst)``: the indices in :func:`build`'s hosts of the two a transfer from rank
    ``src`` to rank ``dst`` runs between; None where those are the ranks' own.  A spine-leaf's
    transfer across leaves runs between the ranks' hosts of the plane its pair's spine makes:
    plane s's host of rank r is host p (s + 1) + r."""
    if platform.network.zone != "planes":
        return None
    per_leaf, pick, _, _ = platform.network.params
    elements, p = platform.network.elements, platform.ranks
    leaf = [e // per_leaf for e in elements]

    def ends(src: int, dst: int) -> tuple[int, int]:
        if leaf[src] == leaf[dst]:
            return src, dst
        first = p * (1 + pick(elements[src], elements[dst]))
        return first + src, first + dst
    return ends


def _planes(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    """A spine-leaf as one star zone (:mod:`hpccoll.sim.trees`): each rank's local host (up
    and down its host link) and its host of each plane (up its host link and its leaf's
    uplink to that spine, down from the spine and its host link), in :func:`transfer_ends`'s
    order."""
    _, _, local, planes = platform.network.params
    elements = platform.network.elements
    zone = simulation.netzone_root.add_netzone_star("machine")
    made = [zone.add_link(l.name, l.bandwidth).set_latency(l.latency).seal()
            for l in platform.links]

    def host(name: str, up: tuple, down: tuple) -> Any:
        made_host = zone.add_host(name, speed).seal()
        zone.add_route(made_host, None, [sg.LinkInRoute(made[i]) for i in up], False)
        zone.add_route(None, made_host, [sg.LinkInRoute(made[i]) for i in down], False)
        return made_host

    own = [host(f"rank{r}", local[e][:1], local[e][1:]) for r, e in enumerate(elements)]
    via = [[host(f"rank{r}.spine{s}", plane[e][:2], plane[e][2:])
            for r, e in enumerate(elements)] for s, plane in enumerate(planes)]
    zone.seal()
    return own + [h for plane in via for h in plane]


def _routes(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    zone = simulation.netzone_root.add_netzone_full("machine")
    hosts = [zone.add_host(f"rank{r}", speed).seal() for r in range(platform.ranks)]
    links = [zone.add_link(l.name, l.bandwidth).set_latency(l.latency).seal()
             for l in platform.links]
    for a in range(platform.ranks):
        for b in range(platform.ranks):
            if a != b:
                zone.add_route(hosts[a], hosts[b],
                               [sg.LinkInRoute(links[i]) for i in platform.route(a, b)], False)
    zone.seal()
    return hosts


def _nodes(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    """A zone per node (its ranks' hosts, a gateway host, the routes among them and between
    each rank and the gateway) under a star zone of no links: a route between nodes is the
    source's link out of its node and the destination's link in (``Platform.route`` gives
    exactly these two), so SimGrid holds the routes of each node, not of every rank pair."""
    root = simulation.netzone_root.add_netzone_star("machine")
    node_of = platform.topology.regions[0]
    members: dict[int, list[int]] = {}
    for rank, node in enumerate(node_of):
        members.setdefault(node, []).append(rank)
    hosts: list = [None] * platform.ranks
    made: dict[int, Any] = {}

    def links(zone: Any, indices: list[int]) -> list:
        for i in indices:
            if i not in made:
                l = platform.links[i]
                made[i] = zone.add_link(l.name, l.bandwidth).set_latency(l.latency).seal()
        return [sg.LinkInRoute(made[i]) for i in indices]

    elsewhere = {node: next((r for r in range(platform.ranks) if node_of[r] != node), None)
                 for node in members}
    for node, ranks in members.items():
        zone = root.add_netzone_full(f"node{node}")
        for r in ranks:
            hosts[r] = zone.add_host(f"rank{r}", speed).seal()
        gateway = zone.add_host(f"node{node}.gateway", speed).seal()   # runs nothing
        for a in ranks:
            for b in ranks:
                if a != b:
                    zone.add_route(hosts[a], hosts[b], links(zone, platform.route(a, b)), False)
        other = elsewhere[node]
        if other is not None:
            for r in ranks:
                out, into = platform.route(r, other), platform.route(other, r)
                if len(out) != 2 or len(into) != 2:
                    raise RuntimeError(f"{platform.spec}: a route between nodes is not one "
                                       "link out of a node and one in")
                zone.add_route(hosts[r], gateway, links(zone, out[:1]), False)
                zone.add_route(gateway, hosts[r], links(zone, into[1:]), False)
        zone.set_gateway(gateway)
        zone.seal()
        root.add_route(zone, None, [], True)
    root.seal()
    return hosts


def _zone(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    network = platform.network
    root = simulation.netzone_root
    duplex = sg.Link.SharingPolicy.SPLITDUPLEX
    if network.zone == "torus":
        dims, bw, lat = network.params
        zone = root.add_netzone_torus(GRID_ZONE, list(dims), bw, lat, duplex)
    elif network.zone == "fattree":
        (levels, down, up, count), bw, lat = network.params
        zone = root.add_netzone_fatTree(FATTREE_ZONE, levels, down, up, count, bw, lat, duplex)
    else:
        zone = root.add_netzone_dragonfly(GRID_ZONE, *network.params, duplex)
    ranks = {element: rank for rank, element in enumerate(network.elements)}
    zone.set_host_cb(lambda zone, coords, element: zone.add_host(
        f"rank{ranks[element]}" if element in ranks else f"idle{element}", speed).seal())
    zone.seal()
    _retune(simulation, platform)
    return [sg.Host.by_name(f"rank{r}") for r in range(platform.ranks)]


_COUNTER = re.compile(r"_(\d+)_(UP|DOWN)$")


def _retune(simulation: Any, platform: Platform) -> None:
    """Set the retuned links' bandwidth and latency.  A dragonfly's or a fat tree's link names
    end in a counter SimGrid keeps per process; the platform's count from 0, so they are
    shifted by the smallest one this engine made."""
    if not platform.retuned:
        return
    built = {link.name: link for link in simulation.all_links}
    counters = [int(m[1]) for m in map(_COUNTER.search, built) if m]
    shift = min(counters) if platform.network.zone in ("dragonfly", "fattree") and counters \
        else 0
    for i in sorted(platform.retuned):
        wanted = platform.links[i]
        name = _COUNTER.sub(lambda m: f"_{int(m[1]) + shift}_{m[2]}", wanted.name) \
            if shift else wanted.name
        link = built.get(name)
        if link is None:
            raise RuntimeError(f"SimGrid built no link {name!r} (platform {platform.spec})")
        link.bandwidth = wanted.bandwidth
        link.set_latency(wanted.latency)


_BUILDERS = {"routes": _routes, "nodes": _nodes, "planes": _planes, "torus": _zone,
             "dragonfly": _zone, "fattree": _zone}

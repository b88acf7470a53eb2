"""A :class:`~hpccoll.sim.platform.Platform` built in SimGrid: hosts, links and routing.

``routes``: a full zone with one host per rank and the platform's route of every ordered
pair (any machine, but a table of p^2 routes).  ``torus`` and ``dragonfly``: SimGrid's own
cluster zones, which compute a route when asked (built in a fraction of a second at
thousands of ranks); the platform's links mirror theirs by name, so the links a platform
retunes (slow ranks and links, a dragonfly's local and global speeds) are set on them after
the zone is sealed.
"""

from __future__ import annotations

import re
from typing import Any

from .platform import GRID_ZONE, Platform


def build(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    """The platform in ``simulation``'s engine; its hosts (``speed`` flops/s) in rank
    order."""
    return _BUILDERS[platform.network.zone](sg, simulation, platform, speed)


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


def _zone(sg: Any, simulation: Any, platform: Platform, speed: float) -> list:
    network = platform.network
    root = simulation.netzone_root
    duplex = sg.Link.SharingPolicy.SPLITDUPLEX
    if network.zone == "torus":
        dims, bw, lat = network.params
        zone = root.add_netzone_torus(GRID_ZONE, list(dims), bw, lat, duplex)
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
    """Set the retuned links' bandwidth and latency.  A dragonfly's link names end in a
    counter SimGrid keeps per process; the platform's count from 0, so they are shifted by
    the smallest one this engine made."""
    if not platform.retuned:
        return
    built = {link.name: link for link in simulation.all_links}
    counters = [int(m[1]) for m in map(_COUNTER.search, built) if m]
    shift = min(counters) if platform.network.zone == "dragonfly" and counters else 0
    for i in sorted(platform.retuned):
        wanted = platform.links[i]
        name = _COUNTER.sub(lambda m: f"_{int(m[1]) + shift}_{m[2]}", wanted.name) \
            if shift else wanted.name
        link = built.get(name)
        if link is None:
            raise RuntimeError(f"SimGrid built no link {name!r} (platform {platform.spec})")
        link.bandwidth = wanted.bandwidth
        link.set_latency(wanted.latency)


_BUILDERS = {"routes": _routes, "torus": _zone, "dragonfly": _zone}

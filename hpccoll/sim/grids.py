"""Torus, mesh and dragonfly platforms (kinds ``torus``, ``mesh`` and ``dragonfly`` of
:data:`hpccoll.sim.platform.PLATFORMS`): SimGrid's own torus and dragonfly zones, which route
themselves, and the same routes in Python (:attr:`Platform.route`) with SimGrid's link names,
so that links can be retuned after the zone is built and tests can compare the two.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..costmodel import Link as ModelLink
from ..topology import Topology
from .parts import Key, Links, Network, Platform, bandwidth, latency, machine_of, parse_dims

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


def grid(wrap: bool):
    """The builder of a torus (``wrap``) or a mesh: one rank per node, dimension-order
    routing.  A mesh is SimGrid's torus of twice each dimension with the ranks in the first
    half of every dimension: no shortest route between them wraps round, so SimGrid's own
    routing is the mesh's, and the other elements stay idle."""
    def build(spec: str, v: dict) -> Platform:
        dims, bw, lat = v["dims"], v["bw"], v["lat"]
        zone_dims = dims if wrap else tuple(2 * d for d in dims)
        ranks = math.prod(dims)
        elements = tuple(_element(_coords(r, dims), zone_dims) for r in range(ranks))
        links = Links()
        for element in elements:
            coords = _coords(element, zone_dims)
            for dim, d in enumerate(dims):
                if d > 1 and (wrap or coords[dim] + 1 < d):
                    for forward in (True, False):
                        links.add(grid_link_name(element, dim, forward, zone_dims), bw, lat,
                                  f"dim{dim}")

        def route(a: int, b: int) -> list[int]:
            return [links.index[grid_link_name(e, dim, forward, zone_dims)]
                    for e, dim, forward in torus_hops(elements[a], elements[b], zone_dims)]

        hop = ModelLink(lat, bw, True)              # a neighbour over a link of its own
        diameter = sum(d // 2 if wrap else d - 1 for d in dims)
        return Platform(spec, links.links, route, Topology.from_levels(node=range(ranks)),
                        machine_of(spec, v, hop, hop), {"diameter": f"{diameter} hops"},
                        Network("torus", (zone_dims, bw, lat), elements))
    return build


# ---------------------------------------------------------------------- dragonfly

def dragonfly(spec: str, v: dict) -> Platform:
    """SimGrid's DragonflyZone with one chassis per group: ``hosts`` nodes per router, the
    ``routers`` of a group linked all to all (local links), one global link between every two
    groups, router j of group i holding the one to group j (so groups <= routers); minimal
    routing: to the router of the source group linked to the destination group, across, to
    the destination router.  Links named as SimGrid names them (its counter from 0)."""
    groups, routers, per_router = v["groups"], v["routers"], v["hosts"]
    if groups > routers:
        raise ValueError(f"platform dragonfly: groups ({groups}) must not exceed routers "
                         f"({routers}): router j of each group holds the global link to group j")
    links, uid = Links(), 0

    def pair(name: str, bw: float, lat: float, level: str) -> tuple[int, int]:
        nonlocal uid
        made = (links.add(f"{name}_{uid}_UP", bw, lat, level),
                links.add(f"{name}_{uid}_DOWN", bw, lat, level))
        uid += 1
        return made

    host = [[pair(f"local_link_from_router_{r}_to_node_{h}", v["bw"], v["lat"],
                  "host") for h in range(per_router)] for r in range(groups * routers)]
    local = {(g, j, k): pair(f"green_link_in_chassis_0_between_routers_{j}_and_{k}",
                             v["local"], v["lat"], "local")
             for g in range(groups) for j in range(routers) for k in range(j + 1, routers)}
    wide = {(i, j): pair(f"blue_link_between_group_{i}_and_{j}_routers_{i * routers + j}_and_"
                         f"{j * routers + i}", v["global"], v["global_lat"], "global")
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
                    machine_of(spec, v, ModelLink(2 * lat, v["bw"], False),
                             ModelLink(4 * lat + glat, v["bw"], False)),
                    {"global links": groups * (groups - 1) // 2},
                    Network("dragonfly", ((groups, 1), (1, 1), (routers, 1), per_router,
                                          v["bw"], v["lat"]), tuple(range(ranks))),
                    retuned)

def grid_keys() -> dict[str, Key]:
    return {"dims": Key(parse_dims, "4x4", "nodes along each dimension, AxB[xC...] (one rank each)"),
            "bw": Key(bandwidth, "50GB/s", "bandwidth of each link between neighbours, each "
                                           "way"),
            "lat": Key(latency, "1us", "latency of each link (per hop)")}

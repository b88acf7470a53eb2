"""Spine-leaf and fat-tree platforms (kinds ``spineleaf`` and ``fattree`` of
:data:`hpccoll.sim.platform.PLATFORMS`) on SimGrid's zone routing, with no route per rank pair.

- ``fattree``: SimGrid's own FatTreeZone (an extended generalized fat tree of three levels,
  ``3;k/2,k/2,k;1,k/2,k/2;1,1,1``), whose d-mod-k routing climbs by destination: edge to
  aggregation switch ``b mod k/2``, aggregation to core ``(b div k/2) mod k/2``.  The Python
  route (:attr:`Platform.route`) is the same, with SimGrid's link names, so links can be
  retuned after the zone is built and tests can compare the two.
- ``spineleaf``: a flow between leaves takes the spine its ECMP rule picks for the (source,
  destination) pair, which no SimGrid zone computes.  It is built as one star zone with a host
  per rank and per spine (a "plane"): rank r's host of plane s goes up its host link and its
  leaf's uplink to spine s, down from spine s and its host link; its local host goes up and
  down its host link alone.  A flow within a leaf runs between the local hosts, a flow
  between leaves between the two ranks' hosts of the plane of the picked spine: the route is
  the pair's, from per-host links only (ranks x (spines + 1) hosts, no pair table).
"""

from __future__ import annotations

from typing import Callable

from ..costmodel import Link as ModelLink
from ..topology import Topology
from .parts import Links, Network, Platform, machine_of


def ecmp_hash(src: int, dst: int, seed: int, choices: int) -> int:
    """One of ``choices`` paths for the flow src -> dst: a SplitMix64 finaliser of (seed, src,
    dst), so the flows of one round (all pairs at one XOR or shift distance) spread over the
    paths as a switch's ECMP hash of the flow's addresses does."""
    x = (seed * 0x9E3779B97F4A7C15 + src * 0xBF58476D1CE4E5B9 + dst * 0x94D049BB133111EB
         + 1) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) % choices


def spine_rule(ecmp: str, seed: int, spines: int) -> Callable[[int, int], int]:
    """The spine of a flow between two hosts of different leaves: ``hash`` (:func:`ecmp_hash`),
    ``sum`` ((source + destination) mod spines, every flow of an XOR round on one spine) or
    ``dmodk`` (destination mod spines, as a fat tree's d-mod-k routing)."""
    if ecmp == "hash":
        return lambda a, b: ecmp_hash(a, b, seed, spines)
    if ecmp == "sum":
        return lambda a, b: (a + b) % spines
    return lambda a, b: b % spines


def spineleaf(spec: str, v: dict) -> Platform:
    links = Links()
    spines, leaves, per_leaf = v["spines"], v["leaves"], v["hosts"]
    hosts = leaves * per_leaf
    bw, lat = v["bw"], v["lat"]
    up = [links.add(f"h{h}.up", bw, lat, "host") for h in range(hosts)]
    down = [links.add(f"h{h}.down", bw, lat, "host") for h in range(hosts)]
    to_spine = [[links.add(f"leaf{l}-spine{s}", v["uplink"], lat, "spine")
                 for s in range(spines)] for l in range(leaves)]
    from_spine = [[links.add(f"spine{s}-leaf{l}", v["uplink"], lat, "spine")
                   for s in range(spines)] for l in range(leaves)]
    pick = spine_rule(v["ecmp"], v["seed"], spines)

    def route(a: int, b: int) -> list[int]:
        la, lb = a // per_leaf, b // per_leaf
        if la == lb:
            return [up[a], down[b]]
        spine = pick(a, b)
        return [up[a], to_spine[la][spine], from_spine[lb][spine], down[b]]

    # per host: the links up to the star's centre and down from it, local and per plane
    local = tuple((up[h], down[h]) for h in range(hosts))
    planes = tuple(tuple((up[h], to_spine[h // per_leaf][s], from_spine[h // per_leaf][s],
                          down[h]) for h in range(hosts)) for s in range(spines))
    ratio = per_leaf * bw / (spines * v["uplink"])
    rack = ModelLink(2 * lat, bw, False)
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=list(range(hosts)),
                                         rack=[h // per_leaf for h in range(hosts)]),
                    machine_of(spec, v, rack, ModelLink(4 * lat, bw, False)),
                    {"oversubscription": f"{ratio:g}:1", "ecmp": v["ecmp"]},
                    Network("planes", (per_leaf, pick, local, planes), tuple(range(hosts))))


# ---------------------------------------------------------------------- fat tree

FATTREE_ZONE = "machine"


def fattree_shape(k: int) -> tuple[int, list[int], list[int], list[int]]:
    """SimGrid's FatTreeZone parameters of a k-ary three-level fat tree: levels, children
    per switch of each level, parents per node of each level, links per parent-child pair."""
    half = k // 2
    return 3, [half, half, k], [1, half, half], [1, 1, 1]


def fattree(spec: str, v: dict) -> Platform:
    """A k-ary fat tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores,
    k^3/4 hosts; tapered by ``taper`` (the aggregation-to-core links at bw / taper, set on
    SimGrid's zone after it is built: a pod's hosts share taper:1 less bandwidth out of it).
    SimGrid numbers the hosts 0..n-1 and the switches down from 2n-1 (edges, then
    aggregation switches, then cores, each by position) and names a link
    ``link_from_<child>_<parent>_<counter>_UP`` (child to parent; ``_DOWN`` back), the
    counter running over hosts, edges and aggregation switches in that order and, for each,
    its parents by position."""
    k = v["k"]
    if k % 2 or k < 2:
        raise ValueError(f"platform fattree: k must be even and >= 2, got {k}")
    half = k // 2
    n, edges = k * half * half, k * half
    bw, lat = v["bw"], v["lat"]
    links = Links()
    edge_id = [2 * n - 1 - e for e in range(edges)]
    agg_id = [2 * n - 1 - edges - a for a in range(edges)]          # as many aggregations
    core_id = [2 * n - 1 - 2 * edges - c for c in range(half * half)]

    def pair(child: int, parent: int, counter: int, level: str,
             speed: float = bw) -> tuple[int, int]:
        name = f"link_from_{child}_{parent}_{counter}"
        return (links.add(f"{name}_UP", speed, lat, level),
                links.add(f"{name}_DOWN", speed, lat, level))

    host = [pair(h, edge_id[h // half], h, "host") for h in range(n)]
    # edge e to aggregation j of its pod; aggregation a to its parent core m (position
    # m * half + a mod half)
    edge_agg = [[pair(edge_id[e], agg_id[e // half * half + j], n + e * half + j, "pod")
                 for j in range(half)] for e in range(edges)]
    taper = v["taper"]                          # core links at bw / taper: taper:1 between pods
    agg_core = [[pair(agg_id[a], core_id[m * half + a % half],
                      n + edges * half + a * half + m, "core", bw / taper)
                 for m in range(half)] for a in range(edges)]

    def route(a: int, b: int) -> list[int]:
        ea, eb = a // half, b // half
        if ea == eb:
            return [host[a][0], host[b][1]]
        j = b % half                                # the aggregation switch, by destination
        if ea // half == eb // half:
            return [host[a][0], edge_agg[ea][j][0], edge_agg[eb][j][1], host[b][1]]
        m = (b // half) % half                      # the core above it, by destination
        agg_a, agg_b = ea // half * half + j, eb // half * half + j
        return [host[a][0], edge_agg[ea][j][0], agg_core[agg_a][m][0],
                agg_core[agg_b][m][1], edge_agg[eb][j][1], host[b][1]]

    edge = ModelLink(2 * lat, bw, False)
    return Platform(spec, links.links, route,
                    Topology.from_levels(node=list(range(n)),
                                         rack=[h // half for h in range(n)],
                                         pod=[h // (half * half) for h in range(n)]),
                    machine_of(spec, v, edge, ModelLink(6 * lat, bw, False)),
                    {"hosts": n, "oversubscription": f"{taper}:1 between pods"},
                    Network("fattree", (fattree_shape(k), bw, lat), tuple(range(n))),
                    frozenset(i for pairs in agg_core for up_down in pairs for i in up_down
                              if taper > 1))

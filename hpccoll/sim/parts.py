"""The parts the simulator's platforms (:mod:`hpccoll.sim.platform`) are made of: units of
bandwidth and time, the parsers of their keys' values, a :class:`Platform` (pure data: hosts,
links, routes, the topology the planners see, the cost model's machine of the same links, and
the :class:`Network` SimGrid builds it as) and the collector of a platform's links.
"""

from __future__ import annotations

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


def parse_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"bad count {text!r}: a whole number >= 1")
    return int(text)


def parse_fabric(text: str) -> str:
    if text not in ("fullmesh", "switch"):
        raise ValueError(f"bad fabric {text!r}: fullmesh or switch")
    return text


def parse_dims(text: str) -> tuple[int, ...]:
    """'16x16' or '8x8x4' (or '64': one dimension) -> the size of each dimension."""
    try:
        return tuple(parse_count(part) for part in text.split("x"))
    except ValueError:
        raise ValueError(f"bad dims {text!r}: sizes >= 1 joined by x, e.g. 16x16 or 8x8x4"
                         ) from None


def parse_ecmp(text: str) -> str:
    if text not in ("hash", "sum", "dmodk"):
        raise ValueError(f"bad ecmp {text!r}: hash, sum or dmodk")
    return text


def parse_seed(text: str) -> int:
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
    level: str = "link"     # the level of the machine it belongs to (traffic by level)


@dataclass(frozen=True)
class Network:
    """What SimGrid builds (:mod:`hpccoll.sim.network`): ``zone`` "routes" (a host per rank
    and the route of every ordered pair, from :attr:`Platform.route`), "nodes" (a zone per
    node), "planes" (a spine-leaf's star of a host per rank and spine:
    :mod:`hpccoll.sim.trees`) or one of SimGrid's own cluster zones, "torus", "dragonfly" or
    "fattree", made from ``params`` with rank r on the zone's element ``elements[r]``.  A
    zone's links carry the names :attr:`Platform.links` gives them."""

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
        links = [replace(l, bandwidth=l.bandwidth / factor) if i in indices else l
                 for i, l in enumerate(self.links)]
        return replace(self, links=links, notes={**self.notes, what: note},
                       retuned=self.retuned | indices)


class Links:
    """Collects links by name; add() adds one the first time."""

    def __init__(self) -> None:
        self.links: list[NetLink] = []
        self.index: dict[str, int] = {}

    def add(self, name: str, bw: float, lat: float, level: str = "link") -> int:
        if name not in self.index:
            self.index[name] = len(self.links)
            self.links.append(NetLink(name, bw, lat, level))
        return self.index[name]


def machine_of(spec: str, v: dict, intra: ModelLink, inter: ModelLink) -> Machine:
    """The cost model's machine of these link classes and the common keys' local speeds."""
    return Machine(spec, intra, inter, step_overhead=v["overhead"],
                   reduce_bandwidth=v["reduce"], copy_bandwidth=v["copy"])

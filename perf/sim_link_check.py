"""A SimGrid 4.1 observation behind perf/simulation.md ("Spine-leaf and fat tree on zone
routing"): 96 flows started at once on spineleaf:spines=2,leaves=4,hosts=4 (RAT's first
exchange at 1 MiB: every rank sends 128 KiB to each rank of its leaf and 32 KiB to the rank
of its position on each other leaf, over the spine the ECMP hash picks).  30 us in, the links'
loads as SimGrid reports them.  With SimGrid's default lazy update of the sharing
(``network/optim:Lazy``), leaf2-spine0 (5 GB/s) carried 5.556 GB/s, whether the machine was
built as explicit routes or as the star of planes, while the same flows started during a
replay saturated it at exactly 5 GB/s; solved in full (``network/optim:Full``, what
hpccoll.sim.engine now configures) it carries 5.000 GB/s both ways.

    python perf/sim_link_check.py [Lazy]      # Lazy: SimGrid's default, to see the overload
"""

from __future__ import annotations

import sys
from dataclasses import replace

from hpccoll.sim import drive, engine, network
from hpccoll.sim.platform import Network, build


def flows() -> list[tuple[int, int, int]]:
    out = []
    for r in range(16):
        leaf = r // 4
        out += [(r, q, 128 << 10) for q in range(4 * leaf, 4 * leaf + 4) if q != r]
        out += [(r, 4 * other + r % 4, 32 << 10) for other in range(4) if other != leaf]
    return out


def loads(platform) -> dict[str, float]:
    sg, simulation = engine.load(), engine.engine()
    hosts = network.build(sg, simulation, platform, 1e12)
    driver = drive.Tasks(sg, simulation, hosts, network.transfer_ends(platform))
    seen: dict[str, float] = {}

    class Start:
        def start(self) -> None:
            for src, dst, nbytes in flows():
                driver.transfer(src, dst, nbytes, None)

        def done(self, token) -> None:
            pass

    def spy() -> None:
        sg.this_actor.sleep_for(30e-6)
        seen.update({l.name: l.load for l in simulation.all_links if "spine" in l.name})
    hosts[0].add_actor("spy", spy)
    driver.run(Start())
    return seen


def main() -> None:
    if sys.argv[1:] == ["Lazy"]:
        engine.CONFIG = tuple(c for c in engine.CONFIG if "network/optim" not in c) + (
            "--cfg=network/optim:Lazy",)
    planes = build("spineleaf:spines=2,leaves=4,hosts=4")
    for label, platform in (("planes", planes), ("explicit routes",
                                                 replace(planes, network=Network()))):
        seen = engine.in_child(loads, platform)
        worst = max(seen, key=seen.get)
        capacity = next(l.bandwidth for l in platform.links if l.name == worst)
        print(f"{label}: busiest link {worst} at {seen[worst] / 1e9:.3f} GB/s of "
              f"{capacity / 1e9:g} GB/s")


if __name__ == "__main__":
    main()

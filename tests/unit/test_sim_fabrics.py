"""The simulator's torus, mesh and dragonfly platforms (SimGrid's own routing zones).

The platform tests need no SimGrid; the replay tests do (see test_sim.py's ``simgrid``
fixture): SimGrid's routes are the platform's, uncontended paths take the cost model's
time, a nearest-neighbour ring beats one laid across the torus.
"""

from __future__ import annotations

import os

import pytest

from hpccoll.costmodel import Link
from hpccoll.sim import engine
from hpccoll.sim.platform import KINDS, build, describe


@pytest.fixture(scope="module")
def simgrid():
    if not engine.available():
        if os.environ.get("HPCCOLL_REQUIRE_SIM") == "1":
            pytest.fail(f"SimGrid is required here (HPCCOLL_REQUIRE_SIM=1): {engine.INSTALL}")
        pytest.skip(engine.INSTALL)


def ring_distance(a: int, b: int, size: int, wrap: bool) -> int:
    return min(abs(a - b), size - abs(a - b)) if wrap else abs(a - b)


# ------------------------------------------------------------------------------ platforms

@pytest.mark.parametrize("kind, wrap", [("torus", True), ("mesh", False)])
def test_grid_routes_are_dimension_order_and_shortest(kind, wrap):
    dims = (5, 4)
    p = build(f"{kind}:dims=5x4,bw=10GB/s,lat=3us")
    assert p.ranks == 20 and p.topology.count(0) == 20          # one rank per node
    for a in range(p.ranks):
        for b in range(p.ranks):
            if a == b:
                continue
            route = p.route(a, b)
            hops = sum(ring_distance(x, y, d, wrap) for x, y, d in
                       zip(divmod(a, 5)[::-1], divmod(b, 5)[::-1], dims))
            assert len(route) == len(set(route)) == hops, (a, b)
            zone_x = p.network.params[0][0]             # elements per row of SimGrid's zone
            along = [int(ends[0]) // zone_x == int(ends[1].split("_")[0]) // zone_x
                     for ends in (p.links[i].name.split("_from_")[1].split("_to_")
                                  for i in route)]
            assert along == sorted(along, reverse=True), (a, b)   # along X first, then Y
    assert p.machine.inter == Link(3e-6, 10e9, True)                   # a hop, its own link
    assert len(p.links) == (2 * 20 * 2 if wrap else 2 * (4 * 4 + 5 * 3))


def test_mesh_never_wraps_and_torus_does():
    torus, mesh = build("torus:dims=8"), build("mesh:dims=8")
    assert len(torus.route(0, 7)) == 1 and len(mesh.route(0, 7)) == 7
    assert torus.notes["diameter"] == "4 hops" and mesh.notes["diameter"] == "7 hops"
    assert mesh.network.params[0] == (16,) and mesh.network.elements == tuple(range(8))


def test_dragonfly_routes_are_minimal():
    p = build("dragonfly:groups=3,routers=4,hosts=2,global=10GB/s,global_lat=2us")
    assert p.ranks == 24 and p.topology.levels == ("node", "router", "group")
    wide = {i for i, l in enumerate(p.links) if l.name.startswith("blue")}
    assert len(wide) == 2 * 3 and {p.links[i].bandwidth for i in wide} == {10e9}
    assert p.retuned == wide                      # set on SimGrid's zone after it is built
    for a in range(p.ranks):
        for b in range(p.ranks):
            if a == b:
                continue
            route = p.route(a, b)
            crossing = [i for i in route if i in wide]
            assert len(set(route)) == len(route)
            if a // 8 == b // 8:                                  # one group
                assert not crossing and len(route) == (2 if a // 2 == b // 2 else 3)
            else:
                assert len(crossing) == 1 and 3 <= len(route) <= 5


def test_dragonfly_needs_a_router_per_group():
    with pytest.raises(ValueError, match=r"groups \(5\) must not exceed routers \(4\)"):
        build("dragonfly:groups=5,routers=4")


def test_kinds_are_listed_with_their_keys():
    listing = describe()
    for name, kind in KINDS.items():
        assert f"{name}: {kind.help}" in listing
    assert "  dims       4x4" in listing
    with pytest.raises(ValueError, match="bad dims"):
        build("torus:dims=4xx4")


def test_placement_moves_ranks_with_their_routes():
    p = build("torus:dims=8")
    placed = p.placed([0, 4, 1, 5, 2, 6, 3, 7])
    assert placed.route(0, 1) == p.route(0, 4) and len(placed.route(0, 1)) == 4
    assert placed.network.elements == (0, 4, 1, 5, 2, 6, 3, 7)
    with pytest.raises(ValueError, match="permutation"):
        p.placed([0] * 8)


# ------------------------------------------------------------------------------ replay

def simulated(collective, names, platform, size, **options):
    from hpccoll.tools.simulate import simulate
    return simulate(collective, names, platform, [size], "float32", **options)


def _routes_in_simgrid(platform):
    """Every ordered pair's route as SimGrid's zone computes it: link names."""
    from hpccoll.sim import network
    sg = engine.load()
    simulation = engine.engine()
    hosts = network.build(sg, simulation, platform, 1e12)
    return {(a, b): [l.name for l in hosts[a].route_to(hosts[b])[0]]
            for a in range(platform.ranks) for b in range(platform.ranks) if a != b}


@pytest.mark.parametrize("spec", ["torus:dims=4x3", "torus:dims=5x2x2", "mesh:dims=4x3",
                                  "dragonfly:groups=3,routers=3,hosts=2"])
def test_simgrid_routes_are_the_platforms(simgrid, spec):
    p = build(spec)
    routes = engine.in_child(_routes_in_simgrid, p)
    shift = 0
    if p.network.zone == "dragonfly":      # SimGrid's link counter runs on in a process
        first = routes[0, 1][0]
        shift = int(first.rsplit("_", 2)[1])
    for (a, b), names in routes.items():
        want = [p.links[i].name for i in p.route(a, b)]
        if shift:
            want = [n.rsplit("_", 2)[0] + f"_{int(n.rsplit('_', 2)[1]) + shift}_" +
                    n.rsplit("_", 1)[1] for n in want]
        assert names == want, (a, b)


@pytest.mark.parametrize("spec, collective, algorithm", [
    ("torus:dims=8,copy=1000TB/s", "allgather", "ring"),
    ("torus:dims=8,copy=1000TB/s", "reduce_scatter", "ring"),
    ("torus:dims=2x2x2,copy=1000TB/s", "allreduce", "recursive_doubling"),
    ("mesh:dims=2x2,copy=1000TB/s", "allgather", "recursive_doubling"),
])
def test_uncontended_neighbour_exchanges_equal_the_cost_model(simgrid, spec, collective,
                                                             algorithm):
    """Every message to a neighbour over a link of its own: latency + bytes / bandwidth in
    SimGrid as in the model, at sizes where latency, bandwidth and reductions dominate."""
    for size in (1 << 10, 1 << 22):
        (r,) = simulated(collective, [algorithm], build(spec), size)
        assert r.time_us == pytest.approx(r.model_us, rel=1e-4), (size, r.time_us, r.model_us)


def test_dragonfly_global_links_run_at_their_own_speed(simgrid):
    """A 4-rank ring allgather on 2 groups x 2 routers: no two flows share a link; each step
    lasts as the slowest path, 3 -> 0 (host, local, global, local, host: 4 lat + global_lat)
    through the 10 GB/s global link."""
    p = build("dragonfly:groups=2,routers=2,hosts=1,global=10GB/s,global_lat=3us,"
              "copy=1000TB/s,overhead=5us")
    block = 1 << 20
    (r,) = simulated("allgather", ["ring"], p, block)           # each rank's block
    step = 5e-6 + 4 * 1e-6 + 3e-6 + block / 10e9 + block / 1e15
    assert r.time_us == pytest.approx(3 * step * 1e6, rel=1e-3)


def test_nearest_neighbour_ring_beats_a_ring_across_the_torus(simgrid):
    """On an 8 x 8 torus, rank order along rows makes ring neighbours one or two hops apart;
    placed 37 nodes apart (6 or 7 of the diameter's 8 hops), every ring flow crosses that
    many links and shares them with the others."""
    near = build("torus:dims=8x8")
    far = near.placed([r * 37 % 64 for r in range(64)])
    assert min(len(far.route(r, (r + 1) % 64)) for r in range(64)) == 6
    size = 4 << 20
    (fast,) = simulated("allgather", ["ring"], near, size)
    (slow,) = simulated("allgather", ["ring"], far, size)
    assert slow.time_us > 2 * fast.time_us, (slow.time_us, fast.time_us)

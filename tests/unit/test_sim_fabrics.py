"""The simulator's torus, mesh and dragonfly platforms (SimGrid's own routing zones), spine
choice by ECMP hash, the --pause limits, planner options, and the cost model's full-mesh steps
of segmented blocks.

The platform tests need no SimGrid; the replay tests do (test_sim.py's ``simgrid`` fixture):
SimGrid's routes are the platform's, uncontended paths take the cost model's time, a
nearest-neighbour ring beats one laid across the torus.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from hpccoll.costmodel import Link, Machine, step_time
from hpccoll.schedule import Region, Send, Step
from hpccoll.sim import engine
from hpccoll.sim.platform import PLATFORMS, build, describe
from hpccoll.sim.replay import Pause
from hpccoll.tools.arguments import planner_option
from test_sim import simgrid  # noqa: F401 -- the fixture: SimGrid there, or skip/fail


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


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fattree_routes_climb_by_destination(k):
    """A k-ary fat tree: 2 links within an edge switch, 4 within a pod, 6 between pods, each
    at its level; the aggregation switch is the destination's mod k/2 (d-mod-k), the core
    (destination div k/2) mod k/2, so the flows into one host all come down one path."""
    p = build(f"fattree:k={k},bw=10GB/s,lat=2us")
    half = k // 2
    n = k * half * half
    assert p.ranks == n == p.notes["hosts"] and p.topology.levels == ("node", "rack", "pod")
    assert len(p.links) == 2 * (n + 2 * k * half * half)        # host, edge-agg, agg-core
    levels = {"host": 0, "pod": 0, "core": 0}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            route = p.route(a, b)
            hops = 2 if a // half == b // half else 4 if a // (half * half) == b // (
                half * half) else 6
            names = [p.links[i].level for i in route]
            assert len(set(route)) == len(route) == hops, (a, b)
            assert names == ["host", "pod", "core", "core", "pod", "host"][:hops // 2] + \
                ["host", "pod", "core", "core", "pod", "host"][6 - hops // 2:], (a, b)
            for level in names:
                levels[level] += 1
    assert levels["host"] == 2 * n * (n - 1)
    into = {tuple(p.route(a, n - 1)[-3:]) for a in range(n - half * half)}  # other pods
    assert len(into) == 1
    assert p.machine.intra.alpha == 4e-6 and p.machine.inter.alpha == 12e-6
    with pytest.raises(ValueError, match="k must be even"):
        build("fattree:k=5")


def test_spineleaf_routes_have_two_or_four_links_and_dmodk_spreads_by_destination():
    p = build("spineleaf:spines=4,leaves=3,hosts=4,ecmp=dmodk,uplink=10GB/s")
    for a in range(12):
        for b in range(12):
            if a != b:
                route = p.route(a, b)
                assert [p.links[i].level for i in route] == (
                    ["host", "host"] if a // 4 == b // 4 else ["host", "spine", "spine", "host"])
                if a // 4 != b // 4:
                    assert p.links[route[1]].name == f"leaf{a // 4}-spine{b % 4}"
                    assert p.links[route[1]].bandwidth == 10e9
    assert p.network.zone == "planes" and len(p.network.params[3]) == 4     # a plane a spine
    with pytest.raises(ValueError, match="bad ecmp 'random': hash, sum or dmodk"):
        build("spineleaf:ecmp=random")


def test_spineleaf_ecmp_hash_spreads_a_rounds_flows_and_sum_is_the_old_rule():
    """In an XOR round every cross-leaf pair's source + destination has one parity: the old
    rule puts the whole round on one spine, the hash on both about evenly."""
    for ecmp, lowest in (("hash", 12), ("sum", 0)):
        p = build(f"spineleaf:spines=2,leaves=4,hosts=8,ecmp={ecmp}")
        for distance in (8, 16, 24):
            spines = [p.links[p.route(a, a ^ distance)[1]].name[-1] for a in range(32)]
            assert min(spines.count("0"), spines.count("1")) >= lowest, (ecmp, spines)
    seeds = {tuple(build(f"spineleaf:seed={s}").route(a, 31)[1] for a in range(8))
             for s in range(4)}
    assert len(seeds) > 1                                   # the seed changes the choice


def test_kinds_are_listed_with_their_keys():
    listing = describe()
    for name, kind in PLATFORMS.items():
        assert f"{name}: {kind.help}" in listing
    assert "  dims       4x4" in listing and "  ecmp       hash" in listing
    with pytest.raises(ValueError, match="bad dims"):
        build("torus:dims=4xx4")


def test_placement_moves_ranks_with_their_routes():
    p = build("torus:dims=8")
    placed = p.placed([0, 4, 1, 5, 2, 6, 3, 7])
    assert placed.route(0, 1) == p.route(0, 4) and len(placed.route(0, 1)) == 4
    assert placed.network.elements == (0, 4, 1, 5, 2, 6, 3, 7)
    with pytest.raises(ValueError, match="permutation"):
        p.placed([0] * 8)


@pytest.mark.parametrize("spec, k, nodes", [("fullmesh", 1, 1), ("switch:n=4", 2, 1),
                                            ("spineleaf:leaves=2,hosts=2", 4, 4),
                                            ("cluster:nodes=3", 5, 3)])
def test_pausing_every_node_is_refused(spec, k, nodes):
    with pytest.raises(ValueError, match=f"k={k}: .* has {nodes} node\\(s\\)"):
        Pause(k, 1e-3).check(build(spec))
    Pause(0, 1e-3).check(build(spec))
    if nodes > 1:
        Pause(nodes - 1, 1e-3).check(build(spec))


# ------------------------------------------------------------------------------ traffic

def test_traffic_by_level_of_an_alltoall_on_a_fat_tree_by_hand():
    """16 hosts of fattree:k=4, b bytes to each peer: a rank has 1 peer on its edge switch,
    2 more in its pod, 12 in other pods; a message crosses 2 host links, 2 pod links if it
    leaves its edge, 2 core links if it leaves its pod; the busiest link is a host link
    carrying its rank's 15 blocks."""
    from hpccoll.sim.replay import programs
    from hpccoll.sim.traffic import levels, pair_bytes, traffic
    p, b = build("fattree:k=4"), 1 << 16
    load = traffic(p, pair_bytes(programs("alltoall", "pairwise", p, b, 4), 4))
    assert levels(p) == ["host", "pod", "core"]
    assert load.total == 16 * 15 * b
    assert load.reach == {"host": 16 * b, "pod": 16 * 2 * b, "core": 16 * 12 * b}
    assert load.link_bytes == {"host": 2 * load.total, "pod": 2 * 16 * 14 * b,
                               "core": 2 * 16 * 12 * b}
    assert load.busiest == 15 * b and load.busiest_link.endswith(("_UP", "_DOWN"))


@pytest.mark.parametrize("spec, collective, algorithm", [
    ("torus:dims=4x4", "allreduce", "ring"), ("dragonfly:groups=2,routers=2,hosts=2",
                                              "alltoall", "bruck"),
    ("cluster:nodes=2,ppn=4", "allgather", "recursive_doubling"),
    ("spineleaf:leaves=2,hosts=4", "alltoall", "xor")])
def test_traffic_reach_adds_up_to_the_bytes_sent(spec, collective, algorithm):
    from hpccoll.sim.replay import programs
    from hpccoll.sim.traffic import pair_bytes, traffic
    p = build(spec)
    progs = programs(collective, algorithm, p, 1 << 12, 4)
    load = traffic(p, pair_bytes(progs, 4))
    assert sum(load.reach.values()) == load.total == sum(pair_bytes(progs, 4).values()) > 0
    hops = sum(n * len(p.route(a, b)) for (a, b), n in pair_bytes(progs, 4).items())
    assert sum(load.link_bytes.values()) == hops


@pytest.mark.parametrize("collective, algorithm", [
    ("alltoall", "bruck"), ("allreduce", "rabenseifner"), ("reduce_scatter", "ring"),
    ("bcast", "binomial"), ("alltoall", "direct")])
def test_a_planned_jobs_pair_bytes_are_its_programs(collective, algorithm):
    """A replay counts the bytes between ranks from its flattened job (where a step's messages
    to one peer are one flow), not from programs it no longer holds: the same counts as
    the programs give, on 6 ranks (Bruck's relayed blocks included)."""
    from hpccoll.sim.replay import planned
    from hpccoll.sim.traffic import pair_bytes
    p = build("cluster:nodes=2,ppn=3")
    job = planned(p, (collective, algorithm, 6 << 12, 4), options=(), keep=True)
    assert job.sent == pair_bytes(job.programs, 4) and job.sent


# ------------------------------------------------------------------------------ cost model

def test_full_mesh_step_streams_a_peers_segments_one_after_the_other():
    """Eight 1 MiB segments to one peer over its one link take 8 MiB / bandwidth, not the
    largest segment's time; to eight peers they go at once."""
    machine = Machine("m", Link(2e-6, 64e9, True), Link(5e-6, 50e9, False))
    segment = (Region("send", 0, 1 << 18),)
    to_one = Step(sends=tuple(Send(1, segment) for _ in range(8)))
    to_many = Step(sends=tuple(Send(peer, segment) for peer in range(1, 9)))
    assert step_time(machine, to_one, 0, 4, None) == pytest.approx(2e-6 + 8 * (1 << 20) / 64e9)
    assert step_time(machine, to_many, 0, 4, None) == pytest.approx(2e-6 + (1 << 20) / 64e9)


@pytest.mark.parametrize("text, value", [("segment_bytes=1M", ("segment_bytes", 1 << 20)),
                                          ("radix=4", ("radix", 4)),
                                          ("ratio=0.5", ("ratio", 0.5)),
                                          ("layout=zigzag", ("layout", "zigzag"))])
def test_planner_options_parse(text, value):
    assert planner_option(text) == value


@pytest.mark.parametrize("bad", ["radix", "=4", "radix=", "two words=1"])
def test_bad_planner_options(bad):
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        planner_option(bad)


# ------------------------------------------------------------------------------ replay

def simulated(collective, names, platform, size, **options):
    from hpccoll.tools.simulate import simulated_results
    return simulated_results(collective, names, platform, [size], "float32", **options)


def _routes_in_simgrid(platform):
    """Every ordered pair's route as SimGrid's zone computes it: link names."""
    from hpccoll.sim import drive, network
    sg = engine.load()
    simulation = engine.engine()
    hosts = network.build(sg, simulation, platform, 1e12)
    ends = drive.host_ends(hosts, network.transfer_ends(platform))
    routes = {}
    for a in range(platform.ranks):
        for b in range(platform.ranks):
            if a != b:
                source, destination = ends(a, b)
                routes[a, b] = [l.name for l in source.route_to(destination)[0]]
    return routes


@pytest.mark.parametrize("spec", ["torus:dims=4x3", "torus:dims=5x2x2", "mesh:dims=4x3",
                                  "dragonfly:groups=3,routers=3,hosts=2",
                                  "cluster:nodes=3,ppn=4,nics=2",
                                  "cluster:nodes=2,ppn=3,fabric=switch,nics=1",
                                  "fattree:k=4", "fattree:k=6",
                                  "spineleaf:spines=3,leaves=3,hosts=4",
                                  "spineleaf:spines=2,leaves=3,hosts=2,ecmp=dmodk"])
def test_simgrid_routes_are_the_platforms(simgrid, spec):
    p = build(spec)
    routes = engine.in_child(_routes_in_simgrid, p)
    shift = 0
    if p.network.zone in ("dragonfly", "fattree"):   # SimGrid's counter runs on in a process
        first = routes[0, 1][0]
        shift = int(first.rsplit("_", 2)[1])
    for (a, b), names in routes.items():
        want = [p.links[i].name for i in p.route(a, b)]
        if shift:
            want = [n.rsplit("_", 2)[0] + f"_{int(n.rsplit('_', 2)[1]) + shift}_" +
                    n.rsplit("_", 1)[1] for n in want]
        assert names == want, (a, b)


def test_node_zones_give_the_times_of_explicit_routes(simgrid):
    """cluster is built as a zone per node under a star (routes per node, not per rank pair):
    with shared NICs, where flows meet, every time equals the one of the full table of routes
    of every rank pair."""
    from dataclasses import replace

    from hpccoll.sim.platform import Network
    zoned = build("cluster:nodes=3,ppn=4,nics=2")
    assert zoned.network.zone == "nodes"
    explicit = replace(zoned, network=Network())
    names = ["ring", "rat", "recursive_doubling"]
    for a, b in zip(simulated("allreduce", names, zoned, 1 << 20),
                    simulated("allreduce", names, explicit, 1 << 20)):
        assert a.time_us == pytest.approx(b.time_us, rel=1e-12), (a.algorithm, a, b)


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


def test_segmented_blocks_on_a_full_mesh_equal_the_cost_model(simgrid):
    """A ring reduce-scatter of 64 MiB on 8 GPUs (1 MiB segments: 8 a step to one peer) and
    of 4 MiB with 64 KiB segments (``segment_bytes``, as -o passes it): model = simulation."""
    mesh = build("fullmesh:n=8,copy=1000TB/s")
    (big,) = simulated("reduce_scatter", ["ring"], mesh, 64 << 20)
    (small,) = simulated("reduce_scatter", ["ring"], mesh, 4 << 20,
                         options=(("segment_bytes", 64 << 10),))
    for r in (big, small):
        assert r.time_us == pytest.approx(r.model_us, rel=1e-4), (r.time_us, r.model_us)
    assert big.time_us > 7 * (8 << 20) / 64e9 * 1e6          # 7 steps of 8 MiB per link


def test_xor_alltoall_on_a_spine_leaf_by_hand(simgrid):
    """4 ranks on 2 leaves of 2 hosts, one spine, uplinks 4x slower than host links.  XOR
    round 1 pairs ranks within a leaf (2 links: 2 lat + b / bw); rounds 2 and 3 pair every
    rank with one on the other leaf, and the two flows leaving a leaf share its uplink (4 lat
    + 2 b / uplink).  Each round also pays the 5 us step overhead."""
    p = build("spineleaf:spines=1,leaves=2,hosts=2,bw=40GB/s,uplink=10GB/s,lat=1us,"
              "copy=1000TB/s,overhead=5us")
    block = 1 << 20                                      # bytes to each peer
    (r,) = simulated("alltoall", ["xor"], p, block)
    by_hand = 3 * 5e-6 + (2e-6 + block / 40e9) + 2 * (4e-6 + 2 * block / 10e9)
    assert r.time_us == pytest.approx(by_hand * 1e6, rel=1e-3)


def test_planes_and_fat_tree_zone_give_the_times_of_explicit_routes(simgrid):
    """The spine-leaf's star of planes and SimGrid's fat-tree zone against a full table of
    the same routes: equal times where flows share links (alltoall, allreduce; RAT on the
    spine-leaf differed by 0.6% under SimGrid's lazy sharing update, which left an uplink
    overloaded: perf/sim_link_check.py)."""
    from dataclasses import replace

    from hpccoll.sim.platform import Network
    for spec, collective, names in (
            ("spineleaf:spines=2,leaves=4,hosts=4,uplink=20Gb/s", "alltoall",
             ["pairwise", "xor"]),
            ("spineleaf:spines=2,leaves=4,hosts=4", "allreduce", ["rat"]),
            ("fattree:k=4", "allreduce", ["ring", "rat"])):
        zoned = build(spec)
        explicit = replace(zoned, network=Network())
        for a, b in zip(simulated(collective, names, zoned, 1 << 20),
                        simulated(collective, names, explicit, 1 << 20)):
            assert a.time_us == pytest.approx(b.time_us, rel=1e-12), (spec, a.algorithm)


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


def test_slow_links_reach_simgrids_torus_zone(simgrid):
    """Every link of an 8-node torus 2x slower (set on the zone's links by name after it is
    built): each of the ring's 7 steps moves its 4 MiB block at 25 GB/s instead of 50."""
    p = build("torus:dims=8")
    block = 4 << 20
    (fast,) = simulated("allgather", ["ring"], p, block)
    (slow,) = simulated("allgather", ["ring"], p.with_slow_links(len(p.links), 2.0), block)
    assert slow.time_us == pytest.approx(fast.time_us + 7 * block / 50e9 * 1e6, rel=1e-4)


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


# ------------------------------------------------------------------------------ commands

def hpccoll(*args):
    return subprocess.run([sys.executable, "-m", "hpccoll", *args], capture_output=True,
                          text=True, timeout=300)


def test_simulate_command_on_the_new_fabrics(simgrid):
    code = ("from hpccoll.tools.cli import main\n"
            "for spec in ('torus:dims=4x4', 'mesh:dims=4x4', "
            "'dragonfly:groups=2,routers=2,hosts=4'):\n"
            "    assert main(['simulate', 'allreduce', '-a', 'ring,recursive_doubling', "
            "'--platform', spec, '--bytes', '1M']) == 0\n"
            "assert main(['simulate', 'allreduce', '-a', 'ring', '--platform', 'torus:dims=4x4', "
            "'--bytes', '1M', '-o', 'segment_bytes=256K']) == 0\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    headers = [l for l in done.stdout.splitlines() if l.startswith("# hpccoll simulate")]
    assert len(headers) == 4 and all("16 ranks" in h for h in headers)
    assert "segment_bytes=262144" in headers[3] and "segment_bytes" not in headers[0]
    rows = [l.split() for l in done.stdout.splitlines() if l and not l.startswith("#")]
    assert [r[1] for r in rows] == ["ring", "recursive_doubling"] * 3 + ["ring"]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    traffic = [l.split() for l in done.stdout.splitlines() if l.startswith("#    1048576 ")]
    assert [t[2] for t in traffic] == ["ring", "recursive_doubling"] * 3 + ["ring"]
    # a 1 MiB ring allreduce sends 2 (p - 1) / p of the buffer per rank: 16 x 1.966 MB
    assert float(traffic[0][3]) == pytest.approx(16 * 2 * 15 / 16 * (1 << 20) / 1e6, rel=1e-3)


@pytest.mark.parametrize("platform", ["fullmesh", "switch:n=4", "torus:dims=2x2"])
def test_pause_of_every_node_is_one_clear_error(simgrid, platform):
    k = "1" if platform != "torus:dims=2x2" else "4"
    done = hpccoll("simulate", "allreduce", "-a", "ring", "--bytes", "1K", "--platform",
                   platform, "--pause", f"k={k},period=1ms")
    assert done.returncode == 2, done.stderr
    assert "at least one must keep sending" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

"""The simulator (hpccoll.sim): platforms described in Python, schedules replayed in SimGrid.

The platform tests need no SimGrid.  The replay tests need it (scripts/install-sim.sh; CI
installs it and sets HPCCOLL_REQUIRE_SIM=1, so there they fail rather than skip): on
uncontended machines the simulated time equals the cost model's (model and simulator check
each other), contention makes the difference where it must, perturbations slow what they
should, and every registered algorithm replays to its end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpccoll import registry
from hpccoll.sim import engine
from hpccoll.sim.platform import bandwidth, build, latency, parse
from hpccoll.tools.bench_command import BENCH_COLLECTIVES


@pytest.fixture(scope="module")
def simgrid():
    if not engine.available():
        if os.environ.get("HPCCOLL_REQUIRE_SIM") == "1":
            pytest.fail(f"SimGrid is required here (HPCCOLL_REQUIRE_SIM=1): {engine.INSTALL}")
        pytest.skip(engine.INSTALL)


def simulated(collective, names, spec, sizes, **options):
    from hpccoll.tools.simulate import simulated_results
    return simulated_results(collective, names, build(spec), sizes, "float32", **options)


# ------------------------------------------------------------------------------ platforms

@pytest.mark.parametrize("text, value", [("50GB/s", 50e9), ("400Gb/s", 50e9), ("100Gbps", 12.5e9),
                                          ("12.5e9", 12.5e9), ("1TBps", 1e12), ("8Kb/s", 1e3)])
def test_bandwidth_units(text, value):
    assert bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [("2us", 2e-6), ("500ns", 5e-7), ("1ms", 1e-3),
                                          ("0.5", 0.5), ("3s", 3.0)])
def test_latency_units(text, value):
    assert latency(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["fast", "-3GB/s", "0", "5GiB/s", "3 parsecs"])
def test_bad_bandwidth(bad):
    with pytest.raises(ValueError, match="bad bandwidth"):
        bandwidth(bad)


@pytest.mark.parametrize("spec, message", [
    ("hypercube:n=4", "unknown platform kind 'hypercube'"),
    ("fullmesh:m=4", "bad item 'm=4'"),
    ("fullmesh:n=0", "bad count"),
    ("fullmesh:n", "bad item"),
    ("switch:bw=fast", "bad bandwidth"),
    ("cluster:fabric=torus", "bad fabric"),
    ("fattree:k=5", "k must be even"),
])
def test_bad_platform_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        build(spec)


def test_every_key_has_a_default():
    kind, values = parse("fullmesh")
    assert kind == "fullmesh" and values["n"] == 8 and values["bw"] == 64e9
    assert values["lat"] == 2e-6 and values["overhead"] == 5e-6
    assert parse("cluster:nodes=3,nic=200Gb/s")[1]["nic"] == 25e9


def _check_routes(platform):
    for a in range(platform.ranks):
        for b in range(platform.ranks):
            if a != b:
                route = platform.route(a, b)
                assert route and all(0 <= i < len(platform.links) for i in route)
                assert len(set(route)) == len(route)


def test_fullmesh_and_switch_routes_and_their_model():
    mesh = build("fullmesh:n=5,bw=10GB/s,lat=3us")
    _check_routes(mesh)
    routes = {mesh.route(a, b)[0] for a in range(5) for b in range(5) if a != b}
    assert len(routes) == 20 == len(mesh.links)            # one link per ordered pair
    assert mesh.machine.intra.parallel and mesh.machine.intra.bandwidth == 10e9
    switch = build("switch:n=4")
    _check_routes(switch)
    assert len(switch.links) == 8 and not switch.machine.intra.parallel
    for spec in ("fullmesh:n=5,lat=3us", "switch:n=4", "cluster:nodes=2,ppn=3"):
        p = build(spec)                        # a route's latency is the model's alpha
        for a, b in ((0, 1), (0, p.ranks - 1)):
            same = p.topology.regions[0][a] == p.topology.regions[0][b]
            link = p.machine.intra if same else p.machine.inter
            assert sum(p.links[i].latency for i in p.route(a, b)) == pytest.approx(link.alpha)


def test_cluster_nics_are_shared_as_asked():
    p = build("cluster:nodes=3,ppn=4,nics=2,fabric=switch")
    _check_routes(p)
    assert p.topology.nodes == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert p.route(0, 4)[0] == p.route(2, 8)[0] != p.route(1, 4)[0]   # GPU g: NIC g mod 2
    assert p.links[p.route(0, 4)[0]].bandwidth == 50e9
    assert p.route(0, 1) == [p.route(0, 2)[0], p.route(3, 1)[1]]       # local switch ports


def test_spineleaf_oversubscription_and_ecmp():
    p = build("spineleaf:spines=2,leaves=4,hosts=12")
    _check_routes(p)
    assert p.notes["oversubscription"] == "6:1" and p.ranks == 48
    assert p.topology.levels == ("node", "rack") and p.topology.count(1) == 4
    assert len(p.route(0, 1)) == 2 and len(p.route(0, 12)) == 4
    spines = {p.links[p.route(a, 12)[1]].name for a in range(12)}
    assert spines == {"leaf0-spine0", "leaf0-spine1"}                   # both spines used


def test_fattree_levels():
    p = build("fattree:k=4")
    _check_routes(p)
    assert p.ranks == 16 and p.topology.levels == ("node", "rack", "pod")
    assert [len(p.route(0, b)) for b in (1, 2, 4)] == [2, 4, 6]   # same edge, pod, other pod


def test_slowed_rank_slows_its_own_links_only():
    p = build("switch:n=4")
    slow = p.slowed(2, 4.0)
    changed = {l.name for l, m in zip(p.links, slow.links) if l.bandwidth != m.bandwidth}
    assert changed == {"g2.up", "g2.down"}
    assert slow.links[p.route(2, 0)[0]].bandwidth == p.links[0].bandwidth / 4


def test_slow_links_are_drawn_by_seed():
    p = build("spineleaf:leaves=2,hosts=4")
    slow = p.with_slow_links(3, 5.0, seed=4)
    changed = [i for i, (l, m) in enumerate(zip(p.links, slow.links))
               if m.bandwidth == l.bandwidth / 5]
    assert len(changed) == 3 and all(l.bandwidth == m.bandwidth for i, (l, m) in
                                     enumerate(zip(p.links, slow.links)) if i not in changed)
    assert changed == [i for i, (l, m) in enumerate(zip(p.links, p.with_slow_links(
        3, 5.0, seed=4).links)) if m.bandwidth != l.bandwidth]             # same seed, same
    assert all(p.links[i].name in slow.notes["slow links"] for i in changed)


# ------------------------------------------------------------------------------ replay

VALIDATED = [   # (platform, collective, algorithm): no two flows share a link
    ("fullmesh:n=8,copy=1000TB/s", "allgather", "ring"),
    ("fullmesh:n=8,copy=1000TB/s", "allgather", "multiring"),
    ("fullmesh:n=8,copy=1000TB/s", "reduce_scatter", "multiring"),
    ("fullmesh:n=8,copy=1000TB/s", "allreduce", "multiring"),
    ("fullmesh:n=8,copy=1000TB/s", "allreduce", "recursive_doubling"),
    ("fullmesh:n=6,copy=1000TB/s", "alltoall", "pairwise"),
    ("switch:n=6,copy=1000TB/s", "allreduce", "ring"),
    ("switch:n=8,copy=1000TB/s", "allgather", "recursive_doubling"),
    ("switch:n=5,copy=1000TB/s", "alltoall", "pairwise"),
    ("switch:n=8,copy=1000TB/s", "reduce_scatter", "ring"),
    ("cluster:nodes=2,ppn=4,copy=1000TB/s", "allgather", "ring"),
    ("cluster:nodes=2,ppn=4,copy=1000TB/s", "allgather", "multiring"),
    ("cluster:nodes=2,ppn=4,copy=1000TB/s", "allreduce", "recursive_doubling"),
    ("cluster:nodes=4,ppn=2,fabric=switch,copy=1000TB/s", "allreduce", "ring"),
]


@pytest.mark.parametrize("spec, collective, algorithm", VALIDATED)
def test_uncontended_simulation_equals_the_cost_model(simgrid, spec, collective, algorithm):
    """Alone on their links, messages take latency + bytes / bandwidth in SimGrid (CM02) as in
    the model, steps follow each other as the model adds them: the times agree to 1e-4 at
    sizes where latency, bandwidth and reductions each dominate."""
    for r in simulated(collective, [algorithm], spec, [1 << 10, 1 << 16, 1 << 22]):
        assert r.time_us == pytest.approx(r.model_us, rel=1e-4), (r.bytes, r.time_us,
                                                                   r.model_us)


def test_topology_blind_multiring_loses_to_the_topology_aware_one_on_shared_nics(simgrid):
    """Flat Hamiltonian cycles cross the nodes on every hop and crowd each NIC with flows;
    the topology-aware cycles cross them once per node: slower in simulation by far."""
    spec, size = "cluster:nodes=4,ppn=4", 16 << 20
    aware = simulated("allgather", ["multiring"], spec, [size])[0].time_us
    flat = simulated("allgather", ["multiring"], spec, [size], flat=True)[0].time_us
    assert flat > 2 * aware, (flat, aware)


def test_oversubscribed_uplinks_slow_what_crosses_them_and_the_model_cannot_see_it(simgrid):
    """Direct all-to-all across 4 racks: with 8 hosts a leaf and 2 uplinks of 10 Gb/s (16:1)
    every cross-rack flow shares an uplink; with 80 Gb/s uplinks (2:1 ... 1:1) far less.  The
    cost model, blind to links past a host's own, predicts the same time for both."""
    size = 4 << 20
    crowded = simulated("alltoall", ["direct"],
                        "spineleaf:leaves=4,hosts=8,uplink=10Gb/s", [size])[0]
    roomy = simulated("alltoall", ["direct"],
                      "spineleaf:leaves=4,hosts=8,uplink=80Gb/s", [size])[0]
    assert crowded.model_us == pytest.approx(roomy.model_us)
    assert crowded.time_us > 3 * roomy.time_us, (crowded.time_us, roomy.time_us)


def test_paused_nodes_hold_transfers_back_deterministically(simgrid):
    from hpccoll.sim.replay import Pause
    spec, size = "spineleaf:leaves=2,hosts=8", 8 << 20
    plain = simulated("allreduce", ["ring", "rat"], spec, [size])
    none_paused = simulated("allreduce", ["ring", "rat"], spec, [size], pause=Pause(0, 1e-3))
    paused = simulated("allreduce", ["ring", "rat"], spec, [size], pause=Pause(2, 1e-3, 7))
    again = simulated("allreduce", ["ring", "rat"], spec, [size], pause=Pause(2, 1e-3, 7))
    for a, b, c, d in zip(plain, none_paused, paused, again):
        assert b.time_us == pytest.approx(a.time_us)
        assert c.time_us > 1.2 * a.time_us and c.time_us == d.time_us


def test_slow_rank_slows_every_step_of_the_ring(simgrid):
    """Rank 1's port 4x slower: each of the 3 steps of a 4-rank ring waits for its 4 MiB
    block at a quarter of 450 GB/s, 3 x 3 x (4 MiB / 450 GB/s) more in all."""
    from hpccoll.tools.simulate import simulated_results
    p = build("switch:n=4")
    fast = simulated_results("allgather", ["ring"], p, [1 << 22], "float32")[0].time_us
    slow = simulated_results("allgather", ["ring"], p.slowed(1, 4.0), [1 << 22],
                             "float32")[0].time_us
    assert slow == pytest.approx(fast + 3 * 3 * (1 << 22) / 450e9 * 1e6, rel=1e-4)


def test_every_link_slower_slows_every_transfer(simgrid):
    """All links of a 4-GPU switch 2x slower: each of the ring's 3 steps moves its 4 MiB block
    at 225 GB/s instead of 450, 3 x (4 MiB / 450 GB/s) more in all; nothing else changes."""
    from hpccoll.tools.simulate import simulated_results
    p = build("switch:n=4")
    fast = simulated_results("allgather", ["ring"], p, [1 << 22], "float32")[0].time_us
    slow = simulated_results("allgather", ["ring"], p.with_slow_links(len(p.links), 2.0),
                             [1 << 22], "float32")[0].time_us
    assert slow == pytest.approx(fast + 3 * (1 << 22) / 450e9 * 1e6, rel=1e-4)


@pytest.mark.parametrize("collective", BENCH_COLLECTIVES)
def test_every_algorithm_replays_to_its_end(simgrid, collective):
    """Every registered algorithm that applies, on an uneven 2 x 3 cluster: the replay ends
    (no rank waits for a message never sent; csc's node barriers meet), no faster than its
    busiest link allows, and in the same time under both controllers (the compiled one, and
    the Python one with the controller actor that --pause needs, here pausing no node)."""
    p = build("cluster:nodes=2,ppn=3,fabric=switch")
    call_names = [a.name for a in registry.algorithms(collective) if a.name != registry.NATIVE]
    from hpccoll.collectives import spec
    call = spec(collective).uniform_call(6, 0, 1, topology=p.topology)
    names = [n for n in call_names if registry.get(collective, n).violated(call) is None]
    size = 1 << 20
    from hpccoll.sim.replay import Pause
    spec_text = "cluster:nodes=2,ppn=3,fabric=switch"
    tasks = simulated(collective, names, spec_text, [size])
    actor = simulated(collective, names, spec_text, [size], pause=Pause(0, 1.0))
    for r, a in zip(tasks, actor):
        assert r.time_us > size / 64e9 * 1e6 * (0.5 if collective == "bcast" else 0.2), r
        assert r.time_us == pytest.approx(a.time_us, rel=1e-9), (r.algorithm, r, a)


@pytest.mark.parametrize("spec_text", ["spineleaf:spines=2,leaves=2,hosts=4",
                                       "torus:dims=4x4", "mesh:dims=4x2", "fattree:k=4",
                                       "dragonfly:groups=3,routers=3,hosts=2"])
def test_compiled_controller_gives_the_python_controllers_times_on_every_fabric(simgrid,
                                                                                 spec_text):
    """The compiled controller against the Python one (its actor, pausing no node) on the
    fabrics whose transfers run between other hosts than the ranks' own (spine-leaf planes)
    or over SimGrid's own zones: the same simulated times, and the same transfer count.  The
    compiled controller's posting overhead is a timer, the Python one's a computation, which
    SimGrid may end together with another event up to its timing precision (1 ns) away: the
    times agree to that precision a step."""
    from hpccoll.sim.replay import Pause, replay, plan
    p = build(spec_text)
    jobs = [("allreduce", name, 1 << 18, 4) for name in ("ring", "recursive_doubling",
                                                          "rabenseifner")]
    jobs.append(("alltoall", "bruck", 1 << 12, 4))
    plans = plan(p, jobs, keep=True)
    fast = replay(p, plans)
    python = replay(p, plans, Pause(0, 1.0))
    assert fast.transfers == python.transfers > 0
    for compiled, reference, job in zip(fast.times, python.times, plans):
        steps = max(len(prog.steps) for prog in job.programs)
        assert compiled == pytest.approx(reference, rel=1e-9, abs=1e-9 * steps)
    assert all(t > 0 for t in fast.times)


def test_native_and_unknown_algorithms_are_refused_before_simulating(simgrid):
    with pytest.raises(ValueError, match="native is the MPI library's own collective.*"
                                         "recursive_doubling"):
        simulated("allreduce", ["native"], "fullmesh", [1024])
    with pytest.raises(ValueError, match="'hypercube' cannot serve alltoall on 6 ranks of "
                                         "fullmesh:n=6: it requires p is a power of two"):
        simulated("alltoall", ["hypercube"], "fullmesh:n=6", [1024])


# ------------------------------------------------------------------------------ commands

def hpccoll(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hpccoll", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def test_simulate_command_table_json_and_report(simgrid, tmp_path):
    out, picture = tmp_path / "sim.json", tmp_path / "sim.png"
    done = hpccoll("simulate", "allgather", "-a", "ring,multiring", "--platform",
                   "fullmesh:n=8", "-m", "1K:16M:16", "--json", str(out), "--plot", str(picture))
    assert done.returncode == 0, done.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [l.split() for l in done.stdout.splitlines() if l and not l.startswith("#")]
    assert [(int(r[0]), r[1]) for r in rows] == [(s, n) for s in (1024, 16384, 262144, 4194304)
                                                 for n in ("ring", "multiring")]
    run = json.loads(out.read_text())
    assert run["meta"]["baseline"] == "ring" and run["meta"]["ranks"] == 8
    big = {r["algorithm"]: r for r in run["results"] if r["bytes"] == 4194304}
    assert big["multiring"]["vs_native"] == pytest.approx(
        big["ring"]["time_us"] / big["multiring"]["time_us"])
    assert big["multiring"]["vs_native"] > 3            # 7 links at once against one
    assert float(rows[-1][2]) == pytest.approx(big["multiring"]["time_us"], rel=1e-3)
    from hpccoll.sim.replay import programs
    flows = sum(len({send.peer for send in step.sends})       # a step's sends to one peer
                for name in ("ring", "multiring") for size in (1024, 16384, 262144, 4194304)
                for prog in programs("allgather", name, build("fullmesh:n=8"), size, 4)
                for step in prog.steps)
    speed = run["meta"]["simulator"]
    assert speed["transfers"] == flows and speed["simulation_s"] > 0
    assert speed["transfers_per_s"] == pytest.approx(flows / speed["simulation_s"], rel=0.01)
    assert f"# {flows:,} transfers simulated in " in done.stdout
    report = hpccoll("report", str(out))
    assert report.returncode == 0 and "| size | ring (us) | multiring | best |" in report.stdout


def test_simulate_runs_without_mpi(simgrid):
    """A simulation forks its engine's process: MPI must not be initialised (nor needed)."""
    code = ("import sys\nfrom hpccoll.tools.cli import main\n"
            "assert main(['simulate', 'allreduce', '--bytes', '1M', '-a', 'ring']) == 0\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ring" in done.stdout


def test_simulate_command_errors_and_listing(simgrid):
    listing = hpccoll("simulate", "--platforms")
    assert listing.returncode == 0
    for kind in ("fullmesh:", "switch:", "cluster:", "spineleaf:", "fattree:", "torus:", "mesh:",
                 "dragonfly:"):
        assert kind in listing.stdout
    for args, message in [(["allreduce", "--platform", "ring:n=4"], "unknown platform kind"),
                          (["allreduce", "-a", "native"], "classic algorithm"),
                          (["allreduce", "--pause", "k=2"], "period"),
                          (["allreduce", "--slow-rank", "9:2"], "has 8 ranks"),
                          (["allreduce", "--slow-links", "2:0.5"], "FACTOR >= 1")]:
        done = hpccoll("simulate", *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1


def test_without_simgrid_the_command_says_how_to_install_it(tmp_path):
    (tmp_path / "simgrid.py").write_text("raise ImportError('not built')\n")
    done = hpccoll("simulate", "allreduce", env={"PYTHONPATH": f"{tmp_path}"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"hpccoll simulate: error: {engine.INSTALL} "
                                                "(not built)"]


def test_tune_simulate_writes_a_decision_table_auto_reads(simgrid, tmp_path):
    from hpccoll import tuning
    out = tmp_path / "table.json"
    done = hpccoll("tune", "--simulate", "--platform", "cluster:nodes=2,ppn=4", "allgather",
                   "allreduce", "-m", "1K:16M:16", "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = tuning.load_table(str(out), os.stat(out).st_mtime)
    for collective in ("allgather", "allreduce"):
        (entry,) = table["collectives"][collective]
        assert entry["ranks"] == [8, 8]
        names = {rule["algorithm"] for rule in entry["rules"]}
        assert names <= set(registry.names(collective)) - {registry.NATIVE}
    assert table["collectives"]["allgather"][0]["rules"][-1]["algorithm"] == "multiring"

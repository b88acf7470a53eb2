"""Swing, Bine trees and butterflies, PAT and Bruck's allgather: the verifier's sweep past
test_verify's (every p to 64; p = 1,024 for the latency-bound ones), their peers and trees as
the papers define them, PAT's message and buffer bounds, and auto picking them where the cost
model predicts them faster (older algorithms keep ties; tuning tables still come first)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from hpccoll import costmodel, registry, tuning, verify
from hpccoll.algorithms.bine import bine_tree, butterfly_sets, gathered, negabinary
from hpccoll.algorithms.pat import pat_rounds
from hpccoll.algorithms.swing import reached, rho, swing_peer, swing_position
from hpccoll.collectives import uniform_call
from hpccoll.topology import from_spec

NEW = [("allgather", "bruck"), ("allgather", "pat"), ("reduce_scatter", "pat"),
       ("allreduce", "swing"), ("allreduce", "swing_latency"), ("reduce_scatter", "swing"),
       ("allgather", "swing"), ("bcast", "bine"), ("reduce", "bine"), ("allgather", "bine"),
       ("reduce_scatter", "bine"), ("allreduce", "bine"), ("alltoall", "bine")]
IDS = [f"{c}-{n}" for c, n in NEW]


@pytest.mark.parametrize("collective,name", NEW, ids=IDS)
def test_verified_to_64_ranks(collective, name):
    algorithm = registry.get(collective, name)
    for p in range(34, 65):         # test_verify covers 1..33 and powers of two to 256
        assert verify.check_algorithm(collective, name, p) or \
            algorithm.violated(uniform_call(collective, p, 0, 1)) is not None


@pytest.mark.parametrize("collective,name", [("allreduce", "swing"), ("bcast", "bine"),
                                             ("reduce", "bine")])
def test_verified_at_1024_ranks(collective, name):
    assert verify.check_algorithm(collective, name, 1024, counts=(1, 1), uneven=False)


def test_on_one_node_auto_keeps_the_older_algorithms():
    """On one node (shared memory) the cost model finds none of the new ones faster: their
    gains are in where the bytes go between nodes."""
    for collective in ("allgather", "reduce_scatter", "allreduce", "bcast", "reduce", "alltoall"):
        for p in (3, 8):
            for n in (1, 4096):
                picked, _ = costmodel.best(uniform_call(collective, p, 0, n))
                assert (collective, picked) not in NEW


# (collective, p, topology, bytes, what auto picks, the fastest older algorithm there)
AUTO_WINS = [
    ("allreduce", 24, "nodes=12,ppn=2", 1 << 16, "bine", "rabenseifner"),   # no fold at p=24
    ("allreduce", 12, "nodes=12,ppn=1", 1 << 20, "bine", "direct"),
    ("reduce_scatter", 12, "nodes=12,ppn=1", 1024, "pat", "recursive_halving"),
    ("reduce_scatter", 8, "nodes=4,ppn=2", 8, "swing", "recursive_halving"),
    ("allgather", 12, "nodes=6,ppn=2", 8, "bine", "recursive_doubling"),
]


@pytest.mark.parametrize("collective,p,topology,nbytes,picked,older", AUTO_WINS,
                         ids=[f"{c}-{p}-{t}-{b}" for c, p, t, b, _, _ in AUTO_WINS])
def test_auto_picks_a_new_algorithm_where_the_cost_model_predicts_it_faster(
        collective, p, topology, nbytes, picked, older, monkeypatch):
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", "none")          # the cost model decides
    call = costmodel.stand_in(collective, p, nbytes, topology=from_spec(topology, p))
    name, time = costmodel.best(call)
    assert name == picked
    older_times = {a.name: costmodel.predict(call, a.name)
                   for a in registry.algorithms(collective)
                   if a.auto and (collective, a.name) not in NEW and a.violated(call) is None}
    assert min(older_times, key=older_times.get) == older
    assert time < older_times[older] * (1 - costmodel.TIE)
    decision = tuning.decide(call, nbytes)
    assert (decision.algorithm, decision.source) == (picked, "cost model")


@pytest.mark.parametrize("collective,p,topology,nbytes,older,new", [
    ("bcast", 8, None, 8, "binomial", "bine"),
    ("allreduce", 8, None, 8, "recursive_doubling", "swing_latency"),
    ("allreduce", 16, "nodes=16,ppn=1", 1 << 20, "rabenseifner", "bine"),
])
def test_on_a_tie_auto_keeps_the_older_algorithm(collective, p, topology, nbytes, older, new):
    call = costmodel.stand_in(collective, p, nbytes,
                              topology=from_spec(topology, p) if topology else None)
    assert costmodel.predict(call, new) == pytest.approx(costmodel.predict(call, older),
                                                         rel=costmodel.TIE)
    assert costmodel.best(call)[0] == older


def test_auto_with_options_no_algorithm_takes_is_a_clear_error():
    call = uniform_call("allreduce", 4, 0, 8, options=(("radx", 3),))
    with pytest.raises(ValueError, match=r"no algorithm auto may pick serves allreduce on 4 "
                                         r"ranks with options \{'radx': 3\}"):
        costmodel.best(call)
    picked, _ = costmodel.best(replace(call, options=(("segment_bytes", 64),)))
    assert registry.get("allreduce", picked).violated(
        replace(call, options=(("segment_bytes", 64),))) is None


def test_a_tuning_table_still_decides_before_the_cost_model(tmp_path, monkeypatch):
    table = {"format": tuning.FORMAT, "collectives": {"allreduce": [
        {"ranks": [24, 24], "rules": [{"max_bytes": None, "algorithm": "rabenseifner"}]}]}}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", str(path))
    call = costmodel.stand_in("allreduce", 24, 1 << 16, topology=from_spec("nodes=12,ppn=2", 24))
    assert costmodel.best(call)[0] == "bine"
    decision = tuning.decide(call, 1 << 16)
    assert (decision.algorithm, decision.source) == ("rabenseifner", "tuning file")


def test_swing_distances_and_peers():
    assert [rho(s) for s in range(6)] == [1, -1, 3, -5, 11, -21]
    assert [swing_peer(4, s, 64) for s in range(4)] == [5, 3, 7, 63]
    assert [swing_peer(5, s, 64) for s in range(4)] == [4, 6, 2, 10]


@pytest.mark.parametrize("size", [2, 4, 8, 16, 64, 256])
def test_swing_sets_halve_into_aligned_position_ranges(size):
    positions = [swing_position(size, r) for r in range(size)]
    assert sorted(positions) == list(range(size))
    for s in range(size.bit_length() - 1):
        width = size >> (s + 1)
        for r in range(size):
            kept = {positions[x] for x in reached(size, r, s + 1)}
            low = positions[r] - positions[r] % width
            assert kept == set(range(low, low + width))
            assert not kept & {positions[x] for x in reached(size, swing_peer(r, s, size), s + 1)}


def test_swing_allreduce_talks_to_swing_peers_in_contiguous_messages():
    p = 16
    for rank in range(p):
        program = registry.get("allreduce", "swing").planner(uniform_call("allreduce", p, rank, 64))
        peers = [step.sends[0].peer for step in program.steps]
        assert peers == [swing_peer(rank, s, p) for s in (0, 1, 2, 3, 3, 2, 1, 0)]
        assert all(len(send.regions) == 1 for step in program.steps for send in step.sends)


@pytest.mark.parametrize("dims", ["1", "2", "8", "4x2", "2x4", "4x4", "2x2x2", "8x4", (2, 1, 8)])
def test_swing_torus_form_verifies(dims):
    p = math.prod(map(int, dims.split("x"))) if isinstance(dims, str) else math.prod(dims)
    assert verify.check_algorithm("allreduce", "swing", p, options=(("dims", dims),))


def test_swing_torus_form_uses_every_port_of_a_node_each_step():
    """On an 8x8 torus each step's 4 messages leave along the 4 links of a node's two
    dimensions (+ and -), each 1/4 of what the one-part form sends."""
    dims, p, n = (8, 8), 64, 64 * 16
    for rank in (0, 9, 42, 63):
        call = replace(uniform_call("allreduce", p, rank, n), options=(("dims", "8x8"),))
        plain = registry.get("allreduce", "swing").planner(replace(call, options=()))
        torus = registry.get("allreduce", "swing").planner(call)
        assert len(torus.steps) == len(plain.steps) == 12
        x = (rank % 8, rank // 8)
        for step, alone in zip(torus.steps, plain.steps):
            ports = set()
            for send in step.sends:
                y = (send.peer % 8, send.peer // 8)
                moved = [k for k in range(2) if y[k] != x[k]]
                assert len(moved) == 1
                ports.add((moved[0], (y[moved[0]] - x[moved[0]]) % 8 < 4))
            assert len(ports) == 4 and len(step.sends) == 4
            assert sum(s.count for s in step.sends) == sum(s.count for s in alone.sends)


def test_swing_torus_form_declares_its_option():
    swing = registry.get("allreduce", "swing")
    for dims, p, why in [("3x3", 9, 'option dims is "AxB..." or a tuple of powers of two'),
                         ("4by4", 16, 'option dims is "AxB..." or a tuple of powers of two'),
                         ((4, 4.0), 16, 'option dims is "AxB..." or a tuple of powers of two'),
                         ([4, 4], 16, 'option dims is "AxB..." or a tuple of powers of two'),
                         ("4x4", 8, "option dims multiplies to p")]:
        call = replace(uniform_call("allreduce", p, 0, 4), options=(("dims", dims),))
        assert swing.violated(call) == why
        with pytest.raises(ValueError, match="option dims must be AxB"):
            swing.planner(call)


@pytest.mark.parametrize("collective,name,bad,why,good", [
    ("alltoall", "bruck", {"radx": 3}, "only its options (radix); 'radx' is not one of them",
     {"radix": 3}),
    ("alltoall", "bruck", {"radix": 1}, "option radix is an integer >= 2", {"radix": 2}),
    ("allreduce", "rat", {"segment_bytes": -4}, "option segment_bytes is a positive integer",
     {"segment_bytes": 4}),
    ("allreduce", "ps", {"segment_bytes": "1M"}, "option segment_bytes is a positive integer",
     {"segment_bytes": 1 << 20}),
    ("bcast", "chain", {"segment_bytes": 0}, "option segment_bytes is a positive integer", {}),
    ("allgather", "pat", {"buffer": 8},
     "only its options (buffer_bytes); 'buffer' is not one of them", {"buffer_bytes": 8}),
    ("allreduce", "bine", {"segment_bytes": 8},
     "only its options (it takes none); 'segment_bytes' is not one of them", {}),
    ("allreduce", "swing", {"dims": "4x4", "radix": 2},
     "only its options (dims); 'radix' is not one of them", {"dims": (2, 8)}),
    ("allreduce", "ring", {"segment": 8},
     "only its options (segment_bytes); 'segment' is not one of them", {"segment_bytes": 64}),
    ("allgather", "ring", {"segment_bytes": 64},
     "only its options (it takes none); 'segment_bytes' is not one of them", {}),
    ("allgather", "multiring", {"decomposition": "ring"},
     "option decomposition is 'topology' or 'flat'", {"decomposition": "flat"}),
    ("reduce_scatter", "multiring", {"segment_bytes": True},
     "option segment_bytes is a positive integer",
     {"decomposition": "topology", "segment_bytes": 8}),
    ("alltoall", "mesh", {"rows": 0}, "option rows divides p", {"rows": 4}),
    ("alltoall", "mesh", {"rows": 3}, "option rows divides p", {"rows": 2}),
    ("alltoall", "mesh", {"row": 2}, "only its options (rows); 'row' is not one of them", {}),
    ("allreduce", "csc", {"inter": 3},
     "option inter is the name of another registered algorithm of the collective",
     {"inter": "rabenseifner"}),
    ("allreduce", "csc", {"inter": "ring", "segment_bytes": 8},
     "only its options (inter); 'segment_bytes' is not one of them", {"inter": "ring"}),
    ("bcast", "binomial", {"segment_bytes": 8},
     "only its options (it takes none); 'segment_bytes' is not one of them", {}),
])
def test_declared_options_refuse_unknown_names_and_values(collective, name, bad, why, good):
    algorithm = registry.get(collective, name)
    for options, problem in ((bad, why), (good, None)):
        call = uniform_call(collective, 16, 0, 4, options=tuple(sorted(options.items())))
        assert algorithm.violated(call) == problem


def test_bine_tree_is_the_negabinary_tree():
    assert negabinary(-5, 4) == [1, 1, 1, 1]       # -5 = 1 - 2 + 4 - 8
    start, links = bine_tree(16)
    assert start == -10
    root_children = sorted((step, x) for x, (parent, step) in links.items() if parent == 0)
    assert root_children == [(0, -5), (1, 3), (2, -1), (3, 1)]
    for p in (5, 6, 17, 24, 100):
        start, links = bine_tree(p)
        assert len(links) == p - 1 and all(start <= parent < start + p
                                           for parent, _ in links.values())


@pytest.mark.parametrize("p", [2, 6, 10, 12, 22, 24, 40, 64, 100])
def test_bine_butterflies_pair_swing_peers_and_send_each_block_once(p):
    for rank in range(p):
        sends, recvs = butterfly_sets(p, rank)
        assert len(sends) == (p - 1).bit_length()
        sent = [b for blocks in sends for b in blocks]
        assert sorted(sent) == [b for b in range(p) if b != rank]      # each block once
        for u, blocks in enumerate(recvs):
            peer = swing_peer(rank, u, p)
            assert swing_peer(peer, u, p) == rank
            assert blocks == butterfly_sets(p, peer)[0][u]           # what the peer sends
        if p & (p - 1) == 0:                                         # Swing's sets
            assert all(recvs[u] == reached(p, rank, u + 1) and
                       sends[u] == reached(p, swing_peer(rank, u, p), u + 1)
                       for u in range(len(sends)))
            assert all(len(gathered(p, rank, s)) == 1 << s for s in range(len(sends) + 1))


def test_bine_butterflies_serve_every_p_and_the_all_to_all_declares_powers_of_two():
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        algorithm = registry.get(collective, "bine")
        for p in (1, 3, 5, 6, 7, 9, 17):
            assert algorithm.violated(uniform_call(collective, p, 0, 4)) is None
    alltoall = registry.get("alltoall", "bine")
    assert alltoall.violated(uniform_call("alltoall", 8, 0, 4)) is None
    assert alltoall.violated(uniform_call("alltoall", 12, 0, 4)) == "p is a power of two"
    with pytest.raises(ValueError, match="Bine all-to-all needs p a power of two, got p=12"):
        alltoall.planner(uniform_call("alltoall", 12, 0, 4))


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
@pytest.mark.parametrize("p", [3, 7, 9, 33])
def test_bine_butterflies_at_odd_p_fold_the_last_rank_into_its_neighbour(collective, p):
    """The last rank talks only to rank p - 2, in the first and the last step; ranks 0..p-2
    run the even butterfly between them (Swing peers mod p - 1) in the steps between."""
    planner = registry.get(collective, "bine").planner
    size, rounds = p - 1, (p - 2).bit_length()
    halves = 2 if collective == "allreduce" else 1
    programs = [planner(uniform_call(collective, p, rank, 3 * p)) for rank in range(p)]
    assert {len(program.steps) for program in programs} == {halves * rounds + 2}
    extra = programs[p - 1].steps
    assert [s.peer for s in extra[0].sends] == [p - 2] and not extra[0].recvs
    assert [r.peer for r in extra[-1].recvs] == [p - 2] and not extra[-1].sends
    assert all(step.empty for step in extra[1:-1])
    for rank, program in enumerate(programs[:-1]):
        middle = program.steps[1:-1]
        for k, step in enumerate(middle):
            u = k if collective == "reduce_scatter" or k < rounds else 2 * rounds - 1 - k
            if collective == "allgather":
                u = rounds - 1 - k
            assert {s.peer for s in step.sends} <= {swing_peer(rank, u, size)}
        edge = program.steps[0].recvs + program.steps[-1].sends
        assert [x.peer for x in edge] == ([p - 1, p - 1] if rank == p - 2 else [])


def test_bine_allreduce_on_a_power_of_two_is_swings_with_one_region_messages():
    for p in (8, 32):
        for rank in range(p):
            call = uniform_call("allreduce", p, rank, 3 * p)
            bine, swing = (registry.get("allreduce", name).planner(call)
                           for name in ("bine", "swing"))
            assert [[(x.peer, x.regions) for x in st.sends] for st in bine.steps] == \
                [[(x.peer, x.regions) for x in st.sends] for st in swing.steps]
            assert all(len(x.regions) == 1 for st in bine.steps for x in st.sends)


def test_pat_reverses_bruck_and_caps_messages():
    p = 8
    full = pat_rounds(p, 4)
    assert [d for d, _ in full] == [4, 2, 1]                   # Bruck's are 1, 2, 4
    assert [len(offsets) for _, offsets in full] == [1, 2, 4]  # the long message goes nearest
    for blocks in (1, 2, 4):
        rounds = pat_rounds(100, blocks)
        assert max(len(offsets) for _, offsets in rounds) <= blocks
        assert sorted(s for _, offsets in rounds for s in offsets) == list(range(1, 100))
    assert len(pat_rounds(64, 4)) == 2 + 16 - 1                # log2 A + P/A - 1


def test_pat_reduce_scatter_buffer_is_logarithmic_with_one_block_messages():
    planner = registry.get("reduce_scatter", "pat").planner
    for p in (64, 100, 1024):
        call = replace(uniform_call("reduce_scatter", p, 3, 5), itemsize=8,
                       options=(("buffer_bytes", 40),))
        program = planner(call)
        assert max(send.count for step in program.steps for send in step.sends) == 5
        assert program.scratch <= 5 * (p - 1).bit_length()



"""The all-to-all families of the article "All-to-all (parallel pattern)" (pairwise/1-factor,
XOR, hypercube, Bruck, 2-D mesh), checked without MPI by the verifier: matching, sizes,
bounds, unwritten reads, hazards and the result, for every p up to 33, a spread of p from 34
to 64 and powers of two beyond; plus each algorithm's round count and bytes, the 1-factor
pairing, and the options and constraints."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpccoll import registry, verify
from hpccoll.algorithms.bruck import bruck_rounds
from hpccoll.algorithms.mesh import grid_shape
from hpccoll.algorithms.pairwise import one_factor_partner, one_factor_rounds, xor_partner
from hpccoll.collectives import uniform_call

# tests/unit/test_verify.py covers every algorithm for p = 1..33 and powers of two up to 128;
# this file adds p from 34 to 64 where the structures differ: odd and even (the 1-factor
# pairing), primes (a 1 x p mesh), squares and many divisors (mesh shapes), just above and
# below a power of two (Bruck's partial last round), and 64 (xor, hypercube).  Powers of two
# up to 1024 for xor and hypercube: `hpccoll verify`, recorded in perf/verify.md.
BEYOND_33 = (34, 35, 37, 40, 45, 48, 49, 53, 56, 60, 61, 63, 64)

SWEEPS = [("alltoall", "pairwise"), ("alltoallv", "pairwise"), ("alltoall", "bruck"),
          ("alltoall", "mesh"), ("alltoall", "xor"), ("alltoallv", "xor"),
          ("alltoall", "hypercube")]


@pytest.mark.parametrize("collective,name", SWEEPS)
def test_sweep_beyond_33_ranks(collective: str, name: str) -> None:
    algorithm = registry.get(collective, name)
    checked = 0
    for p in BEYOND_33:
        if algorithm.violated(uniform_call(collective, p, 0, 1)) is None:
            checked += len(verify.check_algorithm(collective, name, p, counts=(0, 2)))
    assert checked > 0


def _report(name: str, p: int, n: int = 2, collective: str = "alltoall",
            options: tuple = ()) -> verify.Report:
    calls = [uniform_call(collective, p, r, n, options=options) for r in range(p)]
    return verify.check_calls(registry.get(collective, name), calls, np.random.default_rng(p))


def _popcount_sum(p: int) -> int:
    return sum(bin(i).count("1") for i in range(p))


@pytest.mark.parametrize("collective", ["alltoall", "alltoallv"])
@pytest.mark.parametrize("p", range(1, 20))
def test_pairwise_rounds(collective: str, p: int) -> None:
    report = _report("pairwise", p, collective=collective)
    assert report.rounds == one_factor_rounds(p) == (0 if p == 1 else p if p % 2 else p - 1)
    assert report.sent == [2 * (p - 1)] * p
    assert report.messages == p * (p - 1)


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16, 32])
def test_xor_and_hypercube_rounds(p: int) -> None:
    log = p.bit_length() - 1
    xor = _report("xor", p)
    assert (xor.rounds, xor.sent) == (p - 1, [2 * (p - 1)] * p)
    cube = _report("hypercube", p)
    assert cube.rounds == log
    assert cube.sent == [2 * p * log // 2] * p        # n p/2 per round, n p log2(p)/2 in all
    assert cube.messages == p * log
    scratch = {registry.get("alltoall", name).planner(uniform_call("alltoall", p, 0, 3)).scratch
               for name in ("xor", "hypercube")}
    assert scratch == {0, 3 * (p - 1 - log)}               # only blocks moving twice or more


@pytest.mark.parametrize("p", range(1, 34))
def test_bruck_rounds(p: int) -> None:
    report = _report("bruck", p)
    assert report.rounds == (p - 1).bit_length()          # ceil(log2 p)
    assert report.sent == [2 * _popcount_sum(p)] * p


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7, 8, 9, 10, 15, 16, 17, 24, 26, 27, 28, 33])
@pytest.mark.parametrize("radix", [3, 4, 7, 64])
def test_bruck_radix(p: int, radix: int) -> None:
    rng = random.Random(p * 100 + radix)
    calls = verify.random_calls("alltoall", p, rng, options=(("radix", radix),))
    verify.check_calls(registry.get("alltoall", "bruck"), calls, np.random.default_rng(p))
    report = _report("bruck", p, options=(("radix", radix),))
    rounds, weight = 0, 1
    while weight < p:
        rounds, weight = rounds + 1, weight * radix
    assert report.rounds == rounds == len(bruck_rounds(p, radix))
    if radix >= p:                                         # one round: the direct algorithm
        assert report.messages == p * (p - 1) and report.sent == [2 * (p - 1)] * p


@pytest.mark.parametrize("radix", [1, 0, -2, 2.5, "3", True])
def test_bruck_invalid_radix(radix) -> None:
    call = uniform_call("alltoall", 6, 0, 1, options=(("radix", radix),))
    algorithm = registry.get("alltoall", "bruck")
    assert algorithm.violated(call) == "option radix is an integer >= 2"
    with pytest.raises(ValueError, match="radix"):
        algorithm.planner(call)


def test_bruck_radix_numpy_integer() -> None:
    assert _report("bruck", 10, options=(("radix", np.int64(3)),)).rounds == 3


@pytest.mark.parametrize("p", range(1, 34))
def test_mesh_rounds(p: int) -> None:
    r, c = grid_shape(p)
    assert r * c == p and r <= c
    assert r == max(d for d in range(1, int(p ** 0.5) + 1) if p % d == 0)
    report = _report("mesh", p)
    assert report.rounds == (r > 1) + (c > 1)              # 2, or 1 for prime p (direct)
    assert report.sent == [2 * (2 * p - r - c)] * p
    program = registry.get("alltoall", "mesh").planner(uniform_call("alltoall", p, p - 1, 3))
    assert program.scratch == 3 * (r - 1) * c


@pytest.mark.parametrize("p", [1, 6, 12, 16, 30])
def test_mesh_rows_option(p: int) -> None:
    algorithm = registry.get("alltoall", "mesh")
    rng = random.Random(p)
    for rows in (d for d in range(1, p + 1) if p % d == 0):
        options = (("rows", rows),)
        assert algorithm.violated(uniform_call("alltoall", p, 0, 1, options=options)) is None
        assert grid_shape(p, rows) == (rows, p // rows)
        calls = verify.random_calls("alltoall", p, rng, options=options)
        verify.check_calls(algorithm, calls, np.random.default_rng(rows))
        c = p // rows
        report = _report("mesh", p, options=options)
        assert report.rounds == (rows > 1) + (c > 1)
        assert report.sent == [2 * (2 * p - rows - c)] * p


@pytest.mark.parametrize("rows", [5, 0, -3, 24, 2.0, "4", True])
def test_mesh_invalid_rows(rows) -> None:
    call = uniform_call("alltoall", 12, 0, 1, options=(("rows", rows),))
    algorithm = registry.get("alltoall", "mesh")
    assert algorithm.violated(call) == "option rows divides p"
    with pytest.raises(ValueError, match="rows"):
        algorithm.planner(call)


def test_xor_refused_off_powers_of_two() -> None:
    for collective in ("alltoall", "alltoallv"):
        algorithm = registry.get(collective, "xor")
        call = uniform_call(collective, 6, 0, 1)
        assert algorithm.violated(call) == "p is a power of two"
        with pytest.raises(ValueError, match="power of two"):
            algorithm.planner(call)
        assert algorithm.violated(uniform_call(collective, 8, 0, 1)) is None
    cube = registry.get("alltoall", "hypercube")
    assert cube.violated(uniform_call("alltoall", 12, 0, 1)) == "p is a power of two"
    with pytest.raises(ValueError, match="power of two"):
        cube.planner(uniform_call("alltoall", 12, 0, 1))


def _check_factorisation(p: int, rounds: int, partner) -> None:
    met = set()
    idle = [0] * p
    for i in range(rounds):
        pairs = [partner(p, j, i) for j in range(p)]
        for j, k in enumerate(pairs):
            assert 0 <= k < p
            assert pairs[k] == j, f"p={p}, round {i}: partner is not an involution at {j}"
            if k == j:
                idle[j] += 1
            elif j < k:
                assert (j, k) not in met, f"p={p}: pair {(j, k)} meets twice"
                met.add((j, k))
    assert len(met) == p * (p - 1) // 2, f"p={p}: some pairs never meet"
    assert idle == [1 if p % 2 and p > 1 else 0] * p


@pytest.mark.parametrize("p", range(1, 65))
def test_one_factor_pairing(p: int) -> None:
    _check_factorisation(p, one_factor_rounds(p), one_factor_partner)


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16, 32, 64])
def test_xor_pairing(p: int) -> None:
    _check_factorisation(p, p - 1, xor_partner)


def test_registered_names_and_families() -> None:
    expected = {("alltoall", "pairwise"): "pairwise", ("alltoallv", "pairwise"): "pairwise",
                ("alltoall", "xor"): "pairwise", ("alltoallv", "xor"): "pairwise",
                ("alltoall", "hypercube"): "hypercube", ("alltoall", "bruck"): "bruck",
                ("alltoall", "mesh"): "mesh"}
    for (collective, name), family in expected.items():
        algorithm = registry.get(collective, name)
        assert algorithm.family == family and algorithm.summary
    for name in ("hypercube", "bruck", "mesh"):
        assert name not in registry.names("alltoallv")

"""The algorithm catalogue: the committed table matches the registry, and every cost formula
matches what the verifier counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpccoll import registry, verify
from hpccoll.collectives import uniform_call
from hpccoll.tools import catalogue

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = registry.algorithms()


def test_committed_table_matches_the_registry():
    committed = (ROOT / "algorithms" / "README.md").read_text()
    assert committed == catalogue.readme(), "run: hpccoll catalogue --out algorithms"


@pytest.mark.parametrize("algorithm", ALGORITHMS,
                         ids=[f"{a.collective}-{a.name}" for a in ALGORITHMS])
def test_cost_formulas_match_the_verifier(algorithm):
    assert algorithm.cost is not None, "every algorithm declares its cost"
    checked = 0
    for p in [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]:
        n = 2 * p * max(1, p - 1)      # divisible by p and p - 1: even allreduce blocks, folded too
        calls = [uniform_call(algorithm.collective, p, r, n) for r in range(p)]
        if algorithm.violated(calls[0]) is not None:
            continue
        report = verify.check_calls(algorithm, calls, np.random.default_rng(p))
        where = f"{algorithm.collective}/{algorithm.name} at p={p}, n={n}"
        assert report.rounds == catalogue.evaluate(algorithm.cost.rounds, p, n), where
        assert max(report.sent) == catalogue.evaluate(algorithm.cost.sent, p, n), where
        checked += 1
    assert checked


def test_every_algorithm_declares_its_options_and_its_page_lists_them():
    for a in ALGORITHMS:
        assert a.options is not None, f"{a.collective}/{a.name} declares no options"
        page = (ROOT / "algorithms" / f"{a.family}.md").read_text()
        section = page.split(f"## {a.collective} / `{a.name}`", 1)[1].split("\n## ", 1)[0]
        if not a.options:
            assert "options: none" in section
        for o in a.options:
            assert f"- `{o.name}` ({o.values}; default {o.default}): {o.meaning}" in section


def test_schedule_pictures(tmp_path):
    path = tmp_path / "ring.png"
    catalogue.draw("allgather", "ring", 4, path)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 5000

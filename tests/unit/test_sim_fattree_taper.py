"""The fat tree's ``taper`` key: the aggregation-to-core links at bw / taper (an
oversubscribed fat tree), on the platform's links and, after SimGrid's zone is built, in the
simulated times (the replay test needs SimGrid: test_sim.py's ``simgrid`` fixture)."""

from __future__ import annotations

import pytest

from hpccoll.sim.platform import build, describe
from test_sim import simgrid  # noqa: F401 -- the fixture: SimGrid there, or skip/fail


@pytest.mark.parametrize("taper", [1, 2, 4])
def test_taper_slows_the_core_links_alone(taper):
    p = build(f"fattree:k=4,bw=10GB/s,taper={taper}")
    speeds = {level: {l.bandwidth for l in p.links if l.level == level}
              for level in ("host", "pod", "core")}
    assert speeds == {"host": {10e9}, "pod": {10e9}, "core": {10e9 / taper}}
    core = {i for i, l in enumerate(p.links) if l.level == "core"}
    assert len(core) == 2 * 4 * 2 * 2          # 2 ways x 4 pods x 2 aggregations x 2 cores
    assert p.retuned == (core if taper > 1 else frozenset())
    assert p.notes["oversubscription"] == f"{taper}:1 between pods"
    assert [p.links[i].bandwidth for i in p.route(0, 15)] == \
        [10e9, 10e9, 10e9 / taper, 10e9 / taper, 10e9, 10e9]


def test_taper_is_a_whole_number_of_at_least_one_and_listed():
    for bad in ("0", "1.5", "x"):
        with pytest.raises(ValueError, match="bad count"):
            build(f"fattree:k=4,taper={bad}")
    assert "taper" in describe()


def test_a_tapered_core_slows_exactly_the_steps_that_cross_pods(simgrid):
    """A binomial broadcast of 1 MiB on 16 hosts (4 a pod): of its 4 steps, the first two
    (distances 8 and 4) cross pods, each on links of their own; at taper 4 each of those
    takes 4x its transfer time, so the broadcast is 2 x 3 x (1 MiB / bw) longer."""
    from hpccoll.tools.simulate import simulated_results
    size, bw = 1 << 20, 5e9
    flat, tapered = (simulated_results("bcast", ["binomial"],
                                       build(f"fattree:k=4,bw={bw:g},taper={taper}"), [size],
                                       "float32")[0].time_us for taper in (1, 4))
    assert tapered - flat == pytest.approx(2 * 3 * size / bw * 1e6, rel=1e-3)

"""The engine solves the max-min sharing selectively (network/maxmin-selective-update, see
hpccoll/sim/engine.py): only the flows linked through shared links to one that started or
ended are re-solved.  Contended replays on every fabric kind give the times of a full solve
to 1e-4 and the same transfers (needs SimGrid: test_sim.py's ``simgrid`` fixture)."""

from __future__ import annotations

import pytest

from hpccoll.sim import engine
from hpccoll.sim.platform import build
from hpccoll.sim.replay import simulate
from test_sim import simgrid  # noqa: F401 -- the fixture: SimGrid there, or skip/fail

SELECTIVE = "--cfg=network/maxmin-selective-update:yes"
CASES = [("spineleaf:spines=2,leaves=4,hosts=8", "allreduce", "rat", 1 << 20),
         ("spineleaf:spines=2,leaves=4,hosts=8", "alltoall", "pairwise", 1 << 14),
         ("torus:dims=8x8", "alltoall", "bruck", 4096),
         ("mesh:dims=8x8", "allreduce", "ring", 1 << 20),
         ("fattree:k=8,taper=4", "allreduce", "rabenseifner", 1 << 20),
         ("fattree:k=8", "alltoall", "direct", 8192),
         ("fattree:k=8", "allreduce", "recursive_doubling", 1 << 16),
         ("dragonfly:groups=4,routers=4,hosts=4", "allgather", "ring", 1 << 16),
         ("cluster:nodes=8,ppn=4", "allreduce", "recursive_doubling", 1 << 20)]


@pytest.mark.parametrize("spec,collective,algorithm,nbytes", CASES,
                         ids=[f"{s}-{a}" for s, _, a, _ in CASES])
def test_selective_solve_gives_the_full_solves_times(simgrid, monkeypatch, spec, collective,
                                                     algorithm, nbytes):
    assert SELECTIVE in engine.CONFIG
    platform, jobs = build(spec), [(collective, algorithm, nbytes, 4)]
    selective = simulate(platform, jobs)
    monkeypatch.setattr(engine, "CONFIG", tuple(c for c in engine.CONFIG if c != SELECTIVE))
    full = simulate(platform, jobs)
    assert selective.transfers == full.transfers > 0
    assert selective.times[0] == pytest.approx(full.times[0], rel=1e-4)

"""Planners by size alone (``registry.Algorithm.sizes``): what the simulator replays where
naming every block would not scale must be exactly what the full planner's program
replays -- the same flattened job for the compiled controller, the same cost-model time --
for every rank, rank count, option and size, so a study at 16,384 ranks times the schedule
that runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpccoll import registry
from hpccoll.collectives import spec
from hpccoll.costmodel import program_time
from hpccoll.sim import compiled, replay
from hpccoll.sim.platform import build

SIZED = [(a.collective, a.name) for a in registry.algorithms() if a.sizes is not None]
RANKS = [*range(1, 34), 48, 64, 100, 127]


def test_bruck_alltoall_is_planned_by_size():
    assert ("alltoall", "bruck") in SIZED


@pytest.mark.parametrize("collective,name", SIZED)
@pytest.mark.parametrize("options", [(), (("radix", 3),), (("radix", 5),)])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_sizes_replay_as_the_full_program(collective, name, options, count):
    chosen = registry.get(collective, name)
    for p in RANKS:
        platform = build(f"cluster:nodes={p},ppn=1")
        calls = [spec(collective).bench_call(p, 0, count, itemsize=4, options=options)]
        calls = [replace(calls[0], rank=r) for r in range(p)]
        full = [chosen.planner(c) for c in calls]
        sized = [chosen.sizes(c) for c in calls]
        assert compiled.flatten(sized, platform, 4, None) == \
            compiled.flatten(full, platform, 4, None), (p, options, count)
        assert program_time(dict(enumerate(sized)), 4, platform.machine) == \
            program_time(dict(enumerate(full)), 4, platform.machine)
        assert replay.programs(collective, name, platform, 4 * count, 4,
                               options=options) == sized


def test_a_bad_radix_is_refused_by_size_too():
    call = spec("alltoall").bench_call(8, 0, 4, itemsize=4, options=(("radix", 1),))
    for planner in (registry.get("alltoall", "bruck").planner,
                    registry.get("alltoall", "bruck").sizes):
        with pytest.raises(ValueError, match="radix"):
            planner(call)

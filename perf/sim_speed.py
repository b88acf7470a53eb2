"""The simulator's own speed on one job (perf/simulation.md, "Simulator speed"): planning,
then the replay alone (platform built in SimGrid and the job run, in this process).

    python perf/sim_speed.py PLATFORM COLLECTIVE ALGORITHM BYTES [actor]

``actor``: the Python controller with its actor (the one --pause uses) instead of the
compiled controller.
"""

from __future__ import annotations

import gc
import sys
import time

from hpccoll.sim.platform import build
from hpccoll.sim.replay import Pause, _simulate, plan


def main(argv: list[str]) -> None:
    spec, collective, algorithm, nbytes = argv[:4]
    platform = build(spec)
    began = time.perf_counter()
    pause = Pause(0, 1.0) if argv[4:] == ["actor"] else None
    jobs = plan(platform, [(collective, algorithm, int(nbytes), 4)], keep=pause is not None)
    planning = time.perf_counter() - began
    gc.freeze()                     # as the forked child of a simulation does
    replayed = _simulate(platform, jobs, pause)
    print(f"{spec} {collective} {algorithm} {nbytes} B: {platform.ranks} ranks, simulated "
          f"{replayed.times[0] * 1e6:.2f} us, {replayed.transfers} transfers, planning "
          f"{planning:.2f} s, replay {replayed.wall:.2f} s ({replayed.rate:,.0f} transfers/s)")


if __name__ == "__main__":
    main(sys.argv[1:])

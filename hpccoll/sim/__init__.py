"""Scaling studies in a network simulator: the planners' schedules replayed in SimGrid.

- :mod:`.platform`: machines described in Python from a ``KIND:key=value`` spec (fullmesh,
  switch, cluster, spineleaf, fattree, torus, mesh, dragonfly; declared once in its
  ``PLATFORMS`` table): links, routes, the topology the planners see and the cost model's machine
  of the same links.
- :mod:`.parts`: what platforms are made of (units, links, the :class:`~hpccoll.sim.parts.
  Platform` record); :mod:`.grids`: the torus, mesh and dragonfly kinds.
- :mod:`.network`: a platform built in SimGrid, as explicit routes, a zone per node, or SimGrid's
  own torus and dragonfly zones.
- :mod:`.replay`: every rank's program as simulated flows and computation, with paused nodes;
  :func:`~hpccoll.sim.replay.simulate`.
- :mod:`.drive`: how the replay starts SimGrid's activities and hears of their end (tasks
  fired from callbacks in SimGrid's own scheduler; a controller actor where transfers are
  paused).
- :mod:`.engine`: finding SimGrid (the ``sim`` extra, ``scripts/install-sim.sh``) and running
  each simulation in a process of its own.

``hpccoll simulate`` and ``hpccoll tune --simulate`` (:mod:`hpccoll.tools.simulate`) are the
command-line front.  Nothing here imports MPI.
"""

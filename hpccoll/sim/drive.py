"""How the Python controller (:class:`hpccoll.sim.replay.Ranks`) starts SimGrid activities
and learns that they are over: two drivers of one interface.  A replay without ``--pause``
runs in the compiled controller instead (:mod:`hpccoll.sim.compiled`), which gives the same
times (tests/unit/test_sim.py) with no Python per transfer.

``compute(rank, flops, token)`` runs ``flops`` on the rank's host, ``transfer(src, dst,
nbytes, token)`` sends a message between two ranks' hosts, and each calls the controller's
``done(token)`` when its activity ends, at that simulated time; ``run()`` runs the job.

- :class:`Tasks` (the replay's driver before the compiled controller; perf/sim_link_check.py
  still starts its flows with it) drives SimGrid from its own scheduler: every activity is a
  SimGrid ``Task`` whose completion calls back into Python, with no actor, so no thread
  switch per simcall and no wait over every activity in flight (a set of n activities costs
  O(n) per ``wait_any``).  Tasks are reused: a pool of idle ``CommTask`` (their ends and size
  set per message) and one of idle ``ExecTask`` per host and amount (the bindings cannot
  change an ``ExecTask``'s amount).  A task is fired again only after the callback of its
  previous firing has returned (it waits in ``cooling`` until the next callback).
- :class:`Actor` is one controller actor waiting on an ``ActivitySet``: slower at scale, but
  it holds the activities themselves, so it can suspend and resume transfers (``--pause``).
"""

from __future__ import annotations

from typing import Any, Callable


def host_ends(hosts: list, ends: Any) -> Any:
    """``(src, dst) -> (host, host)``: the hosts a transfer between two ranks runs between,
    from :func:`hpccoll.sim.network.transfer_ends` (None: the ranks' own)."""
    if ends is None:
        return lambda src, dst: (hosts[src], hosts[dst])
    return lambda src, dst: tuple(hosts[i] for i in ends(src, dst))


class Tasks:
    """SimGrid tasks fired from Python callbacks in SimGrid's scheduler (see the module
    doc)."""

    def __init__(self, sg: Any, simulation: Any, hosts: list, ends: Any = None) -> None:
        self.sg, self.simulation, self.hosts = sg, simulation, hosts
        self.ends = host_ends(hosts, ends)
        self.comms: list[tuple[Any, list]] = []         # idle (task, its token cell)
        self.execs: dict[tuple[int, float], list] = {}  # (rank, flops) -> idle ones
        self.cooling: list[tuple[list, tuple]] = []     # (pool, (task, cell)) to reuse
        self.done: Callable[[Any], None] = lambda token: None
        self.fired = 0

    def _new(self, task: Any, pool: list) -> tuple[Any, list]:
        cell: list = [None]
        entry = (task, cell)

        def finished(_task: Any, entry=entry, pool=pool, cell=cell) -> None:
            for idle_pool, idle in self.cooling:
                idle_pool.append(idle)
            self.cooling = [(pool, entry)]
            self.done(cell[0])
        task.on_this_completion_cb(finished)
        return entry

    def compute(self, rank: int, flops: float, token: Any) -> None:
        pool = self.execs.setdefault((rank, flops), [])
        task, cell = pool.pop() if pool else self._new(
            self.sg.ExecTask.init("", flops, self.hosts[rank]), pool)
        cell[0] = token
        self.fired += 1
        task.enqueue_firings(1)

    def transfer(self, src: int, dst: int, nbytes: float, token: Any) -> None:
        source, destination = self.ends(src, dst)
        if self.comms:
            task, cell = self.comms.pop()
            task.source, task.destination, task.bytes = source, destination, nbytes
        else:
            task, cell = self._new(self.sg.CommTask.init("", nbytes, source, destination),
                                   self.comms)
        cell[0] = token
        self.fired += 1
        task.enqueue_firings(1)

    def run(self, controller: Any) -> None:
        self.done = controller.done
        controller.start()
        self.simulation.run()


class Actor:
    """One controller actor waiting on an ``ActivitySet`` (see the module doc); with a
    ``pause``, its nodes' outgoing transfers are suspended, re-drawn every period."""

    def __init__(self, sg: Any, simulation: Any, hosts: list, pause: Any = None,
                 ends: Any = None) -> None:
        self.sg, self.simulation, self.hosts, self.pause = sg, simulation, hosts, pause
        self.ends = host_ends(hosts, ends)
        self.activities = sg.ActivitySet()
        self.owner: dict[Any, Any] = {}           # activity -> token
        self.senders: dict[Any, int] = {}         # transfer -> its source rank
        self.paused: set[int] = set()
        self.fired = 0

    def compute(self, rank: int, flops: float, token: Any) -> None:
        execution = self.sg.this_actor.exec_init(flops)
        execution.host = self.hosts[rank]
        execution.start()
        self._watch(execution, token)

    def transfer(self, src: int, dst: int, nbytes: float, token: Any) -> None:
        comm = self.sg.Comm.sendto_async(*self.ends(src, dst), nbytes)
        self.senders[comm] = src
        self._watch(comm, token)
        if self.node[src] in self.paused:
            comm.suspend()

    def _watch(self, activity: Any, token: Any) -> None:
        self.fired += 1
        self.activities.push(activity)
        self.owner[activity] = token

    def _complete(self, activity: Any) -> None:
        self.senders.pop(activity, None)
        self.controller.done(self.owner.pop(activity))

    def redraw(self, rng: Any) -> None:
        nodes = sorted(set(self.node))
        self.paused = set(rng.sample(nodes, min(self.pause.k, len(nodes))))
        for comm, src in self.senders.items():
            hold = self.node[src] in self.paused
            if hold and not comm.is_suspended:
                comm.suspend()
            elif not hold and comm.is_suspended:
                comm.resume()

    def run(self, controller: Any) -> None:
        self.controller, self.node = controller, controller.node
        self.hosts[0].add_actor("controller", self._loop)
        self.simulation.run()

    def _loop(self) -> None:
        import random
        controller, pause = self.controller, self.pause
        rng = random.Random(pause.seed if pause else 0)
        next_draw = self.simulation.clock
        controller.start()
        while controller.unfinished:
            if pause is not None and self.simulation.clock >= next_draw - 1e-15:
                self.redraw(rng)
                next_draw += pause.period
            if self.activities.empty():
                return                    # a deadlock: the controller reports it
            if pause is None:
                self._complete(self.activities.wait_any())
                continue
            try:
                done = self.activities.wait_any_for(next_draw - self.simulation.clock)
            except self.sg.TimeoutException:
                done = None
            if done is not None:
                self._complete(done)

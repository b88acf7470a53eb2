"""A toy collective added from outside the package, as a user or a new family would add one:
an inclusive scan (MPI_Scan: rank r receives the reduction of ranks 0..r's inputs), one spec
and one planner, nothing else.  :func:`install` adds both; the tests then call, benchmark and
verify it (tests/unit/test_toy_collective.py, tests/mpi/test_mpi_toy_collective.py)."""

from __future__ import annotations

from hpccoll.collectives import Collective, add
from hpccoll.registry import Cost, register
from hpccoll.schedule import RECV, SCRATCH, SEND, Call, Program, Reduce, Region, StepBuilder


class Scan(Collective):
    name, mpi_name, reduces = "scan", "Scan", True
    doc = "Inclusive prefix reduction: rank r's ``recvbuf`` reduces ranks 0..r's ``sendbuf``."

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        return self.uniform_call(p, rank, send_n, **fields)

    def uniform_call(self, p, rank, n, **fields):
        return Call(self.name, p, rank, (n,), **fields)

    def sizes(self, call):
        return call.counts[0], call.counts[0]

    def random_calls(self, p, rng, counts, uniform, **fields):
        return super().random_calls(p, rng, counts, True, **fields)

    def result(self, call, calls, inputs, want):
        want[:] = sum(inputs[:call.rank + 1])


def plan_linear_scan(call: Call) -> Program:
    """Linear scan: send the input to every later rank, reduce every earlier rank's as it lands.

    Rounds 1; elements sent by rank 0 (p-1)n; scratch (rank)n."""
    n, rank = call.counts[0], call.rank
    source, result = Region(SEND, 0, n), Region(RECV, 0, n)
    step = StepBuilder()
    step.copy(source, result)
    for later in range(rank + 1, call.p):
        step.send(later, source)
    for earlier in range(rank):
        slot = Region(SCRATCH, earlier * n, n)
        step.recv(earlier, slot, on_arrival=(Reduce(result, (result, slot)),))
    return Program((step.build(),), scratch=rank * n)


def install() -> None:
    """Add the scan's spec and register its planner (once per process)."""
    add(Scan())
    register("scan", "linear", family="linear",
             cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)nβ"))(plan_linear_scan)

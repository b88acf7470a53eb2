"""Adding a collective is one spec plus its planners: a toy one (tests/toy_collective.py, an
inclusive scan), added from outside the package, gets its three public functions and package
names, its settings variable, the verifier, ``hpccoll verify`` and ``explain``, with no other
file touched (hpccoll.Comm's methods and the compiled native executor's calls are the ones
its spec names).  It runs in a child process, so the other tests see the shipped collectives
only (the MPI case, calling and benchmarking it: tests/mpi/test_mpi_toy_collective.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import inspect, os, random
import numpy as np
import hpccoll
from hpccoll import collectives, registry, settings, verify
import toy_collective

assert "scan" not in collectives.SPECS and not hasattr(hpccoll, "iscan")
toy_collective.install()

# the three functions, exported, with the signature every reduction's functions have
for name, returns in (("scan", "None"), ("iscan", "Request"), ("scan_init", "PersistentRequest")):
    function = getattr(hpccoll, name)
    assert name in hpccoll.__all__ and name in dir(hpccoll), name
    assert function.__module__ == "hpccoll.api" and function.__annotations__["return"] == returns
    assert str(inspect.signature(function)) == str(inspect.signature(
        getattr(hpccoll, name.replace("scan", "allreduce"))))
assert hpccoll.scan.__doc__ == toy_collective.Scan.doc
assert collectives.NAMES[-1] == "scan" and collectives.spec("scan").functions[1] == "iscan"
try:
    hpccoll.scan(None, None, None, recvcounts=[1])
except TypeError as error:
    assert "recvcounts" in str(error)
else:
    raise AssertionError("scan took recvcounts")

# a name taken is refused, and nothing is added: not a collective's, not the package's, not
# one of hpccoll.api's own
from hpccoll import api
for taken, says in (("scan", "cannot add collective 'scan': it exists"),
                    ("recover", "hpccoll already has ['recover']"),
                    ("prepare", "hpccoll.api already has ['prepare']")):
    try:
        collectives.add(type("Taken", (toy_collective.Scan,), {"name": taken})())
    except ValueError as error:
        assert says in str(error), error
    else:
        raise AssertionError(f"{taken} was added")
    assert list(collectives.SPECS)[-1] == "scan" and collectives.NAMES[-1] == "scan"
assert api.prepare.__module__ == "hpccoll.prepared" and not hasattr(api, "iprepare")
assert "prepare" not in hpccoll.__all__ and not hasattr(hpccoll, "iprepare")

# hpccoll.Comm runs the mpi4py methods a spec names (comm_methods): the scan names none, so
# Comm.Scan stays mpi4py's; a method hpccoll.Comm cannot read is refused, nothing added; the
# compiled native executor posts no MPI_Iscan, so native scans go through mpi4py
from mpi4py import MPI
from hpccoll.comm import Comm
from hpccoll.runtime import native
assert Comm.Scan is MPI.Intracomm.Scan and not hasattr(Comm, "Iscan_init")
readless = type("Readless", (toy_collective.Scan,), {"name": "exscan",
                                                      "comm_methods": {"Exscan": ()}})
try:
    collectives.add(readless())
except ValueError as error:
    assert "hpccoll.Comm has no reader of mpi4py's Exscan" in str(error), error
else:
    raise AssertionError("a method Comm cannot read was added")
assert "exscan" not in collectives.SPECS and not hasattr(api, "exscan")
assert Comm.Exscan is MPI.Intracomm.Exscan
assert not native.runs("scan", np.dtype("float64"))
assert native.executor("scan", np.dtype("float64")) == \
    "mpi4py's non-blocking Scan (the compiled executor does not post scan)"

# its planner, its settings variable, and auto's choice by the cost model
assert [a.name for a in registry.algorithms("scan")] == ["linear"]
os.environ["HPCCOLL_SCAN_ALGORITHM"] = "linear"
assert settings.read("HPCCOLL_SCAN_ALGORITHM") == "linear"
os.environ["HPCCOLL_SCAN_ALGORITHM"] = "rign"
try:
    settings.read("HPCCOLL_SCAN_ALGORITHM")
except ValueError as error:
    assert "HPCCOLL_SCAN_ALGORITHM" in str(error)
else:
    raise AssertionError("a bad algorithm name passed")
del os.environ["HPCCOLL_SCAN_ALGORITHM"]

# the verifier checks it against the spec's oracle, and catches a planner that is wrong
checked = verify.check_sweep("scan", "linear", max_ranks=9, max_power_of_two=16)
assert checked == 19, checked
calls = verify.random_calls("scan", 3, random.Random(1), counts=(2, 2))
inputs = [np.array([1, 2]), np.array([10, 20]), np.array([100, 200])]
assert [want.tolist() for want, _ in verify.expected_outputs(calls, inputs)] == \
    [[1, 2], [11, 22], [111, 222]]

@registry.register("scan", "copy_only", family="linear", auto=False)
def plan_copy_only(call):
    """Wrong on purpose: every rank keeps its own input."""
    step = toy_collective.StepBuilder()
    n = call.counts[0]
    step.copy(toy_collective.Region(toy_collective.SEND, 0, n),
              toy_collective.Region(toy_collective.RECV, 0, n))
    return toy_collective.Program((step.build(),))

try:
    verify.check_algorithm("scan", "copy_only", 3, counts=(2, 2))
except verify.VerificationError as error:
    assert "scan/copy_only, p=3, rank 1: wrong result" in str(error), error
else:
    raise AssertionError("the verifier passed a wrong scan")

# the command line tools, imported after the spec was added
from hpccoll.tools.cli import main
assert main(["verify", "--collective", "scan", "--algorithm", "linear", "--max-ranks", "5",
             "--max-power-of-two", "8"]) in (0, None)
assert main(["explain", "scan", "--bytes", "1K", "--ranks", "4"]) in (0, None)
print("toy collective: ok")
'''


def test_a_toy_collective_is_one_spec_and_one_planner():
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=300, cwd=TESTS, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1] == "toy collective: ok"
    assert ["scan", "linear", "11"] == [line.split()[:3] for line in lines
                                        if line.startswith("scan ")][0]     # hpccoll verify
    assert any(line.endswith(" ok") for line in lines if line.startswith("scan "))
    assert "scan, 1024 B, 4 rank(s): auto picks linear (cost model" in done.stdout  # explain

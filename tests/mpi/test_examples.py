"""The examples a user runs (examples/*.py) under ``mpiexec -n 4``: each checks its own
results against NumPy, prints what it checked and exits non-zero when a check fails."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parents[2] / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_runs_and_checks(example):
    done = subprocess.run([shutil.which("mpiexec"), "-n", "4", sys.executable, str(example)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() and "FAIL" not in done.stdout, done.stdout


EXITING = '''
import atexit
import numpy as np
from mpi4py import MPI
import hpccoll
from hpccoll import context

def after_hpccoll():                        # registered first: runs after hpccoll's hook
    print(f"left attached: {len(context._attached)} finalized: {MPI.Is_finalized()}",
          flush=True)
atexit.register(after_hpccoll)

comm, other = MPI.COMM_WORLD, MPI.COMM_WORLD.Dup()      # "other" is never freed
p, n = comm.size, 20000
x, y = np.full(n, comm.rank + 1.0), np.zeros(n)
for algorithm in ("native", "auto", "ring", "recursive_doubling", "direct", "csc"):
    for _ in range(3):
        hpccoll.allreduce(other, x, y, algorithm=algorithm)
        assert np.all(y == p * (p + 1) / 2), algorithm
for algorithm in ("native", "bruck", "pairwise"):
    for _ in range(3):
        hpccoll.alltoall(comm, np.ones(n * p), np.zeros(n * p), algorithm=algorithm)
for algorithm in ("ring", "native"):                    # persistent, started, never freed
    request = hpccoll.allgather_init(comm, x, np.zeros(n * p), algorithm=algorithm)
    for _ in range(3):
        request.start()
        request.wait()
hpccoll.iallreduce(comm, x, y, algorithm="ring").wait()
print(f"ok {comm.rank}", flush=True)
'''


def test_exit_prints_nothing_on_stderr(tmp_path):
    """A script that leaves hpccoll's cached plans, persistent requests (scheduled and
    native), a shared window and a communicator's context unfreed exits cleanly under
    ``mpiexec -n 3``: hpccoll frees its state before MPI finalises, and nothing at all is
    written on stderr."""
    script = tmp_path / "exiting.py"
    script.write_text(EXITING)
    done = subprocess.run([shutil.which("mpiexec"), "-n", "3", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    assert done.stdout.count("left attached: 0 finalized: False") == 3, done.stdout
    assert all(f"ok {r}" in done.stdout for r in range(3)), done.stdout

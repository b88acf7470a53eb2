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

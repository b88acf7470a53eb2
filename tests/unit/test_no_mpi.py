"""hpccoll imports without MPI, and the tools that need none run without initialising it
(login nodes, where MPI_Init may fail): nothing may import mpi4py.MPI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "perf" / "results" / "bcast_2ranks.json"


def run_without_mpi(code: str) -> subprocess.CompletedProcess:
    check = "\nimport sys\nassert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI was imported'\n"
    return subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_import_loads_no_mpi():
    done = run_without_mpi("import hpccoll\nhpccoll.Topology\nhpccoll.VerificationError\n"
                           "hpccoll.configure\nfrom hpccoll import verify, costmodel, tuning")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv", [
    ["verify", "--collective", "bcast", "--max-ranks", "9", "--max-power-of-two", "16"],
    ["list"],
    ["explain", "reduce", "--bytes", "1M", "--ranks", "8"],
    ["explain", "allreduce", "--bytes", "64K", "--ranks", "16", "--topology", "nodes=4,ppn=4"],
    ["report", str(RESULT)],
    ["jobs", "render", "bench", "--nodes", "1", "--ntasks-per-node", "2"],
    ["simulate", "--platforms"],
], ids=lambda argv: argv[0])
def test_tools_run_without_mpi(argv, tmp_path):
    code = ("from hpccoll.tools.cli import main\n"
            f"try:\n    code = main({argv!r})\nexcept SystemExit as exit:\n    code = exit.code\n"
            "assert code in (0, None), code\n")
    done = run_without_mpi(code)
    assert done.returncode == 0, done.stderr + done.stdout

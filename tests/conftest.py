"""Test configuration shared by the unit tests and the MPI tests.

MPI tests are launched by pytest-isolate-mpi (``@pytest.mark.mpi(ranks=[...])``): each test
function runs as its own ``mpiexec`` job, so one function checks many cases.  The machine
has fewer cores than the largest rank counts, so MPICH is told to yield while it waits.
"""

import os

os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
os.environ.setdefault("HPCCOLL_TIMEOUT", "60")


def pytest_configure(config):
    config.addinivalue_line("markers", "faults: fault-injection and misuse tests (timeouts, "
                                       "ranks that disagree, revocation, recovery, soak)")
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (perf/gpu_check.sh runs "
                                       "them); skipped, saying why, elsewhere")

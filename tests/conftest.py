"""Test configuration shared by the unit tests and the MPI tests.

MPI tests are launched by pytest-isolate-mpi (``@pytest.mark.mpi(ranks=[...])``): each test
function runs as its own ``mpiexec`` job, so one function checks many cases.  The machine
has fewer cores than the largest rank counts, so MPICH is told to yield while it waits.
Each rank of a launch runs a pytest session of its one test: hypothesis's pytest plugin
(about 1 s of imports a rank, and no MPI test uses hypothesis) is left out of those.
"""

import os

os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
os.environ.setdefault("HPCCOLL_TIMEOUT", "60")
if "no:hypothesispytest" not in os.environ.get("PYTEST_ADDOPTS", ""):
    os.environ["PYTEST_ADDOPTS"] = " ".join(
        filter(None, [os.environ.get("PYTEST_ADDOPTS"), "-p no:hypothesispytest"]))


def pytest_configure(config):
    config.addinivalue_line("markers", "faults: fault-injection and misuse tests (timeouts, "
                                       "ranks that disagree, revocation, recovery, soak)")
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (perf/gpu_check.sh runs "
                                       "them); skipped, saying why, elsewhere")


def pytest_collection_modifyitems(config, items):
    """``HPCCOLL_TEST_RANKS=2,3`` keeps only the MPI launches at those rank counts, and of a
    test with none at those counts its launch at the fewest ranks above 1 (a test of four
    ranks on two nodes, say): the Open MPI pass (scripts/test-openmpi.sh) runs the counts
    where the libraries differ -- messages between ranks, powers of two and not -- and
    MPICH's pass runs every count."""
    wanted = os.environ.get("HPCCOLL_TEST_RANKS")
    if not wanted:
        return
    keep = {int(ranks) for ranks in wanted.split(",")}

    def ranks_of(item):
        return item.callspec.params.get("mpi_ranks") if hasattr(item, "callspec") else None

    def test_of(item):                      # the test function and its other parameters
        params = sorted((k, repr(v)) for k, v in item.callspec.params.items()
                        if k != "mpi_ranks")
        return item.path, item.originalname, tuple(params)

    counts = {}
    for item in items:
        if ranks_of(item) is not None:
            counts.setdefault(test_of(item), set()).add(ranks_of(item))
    fallback = {test: min((n for n in ranks if n > 1), default=None)
                for test, ranks in counts.items() if not ranks & keep}
    chosen, dropped = [], []
    for item in items:
        ranks = ranks_of(item)
        kept = ranks is None or ranks in keep or fallback.get(test_of(item)) == ranks
        (chosen if kept else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen

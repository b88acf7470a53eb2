"""The peers sweep's helper (perf/peers.py), without MPI: the forced algorithms read from the
libraries' own listings, which runs count as measured, why a run failed, and the table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from hpccoll.tools.results import size_range

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("peers", ROOT / "perf" / "peers.py")
peers = sys.modules["peers"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

MPIVARS = """466 MPI Control Variables
\tMPIR_CVAR_BCAST_INTRA_ALGORITHM =0\tSCOPE_ALL_EQ\tNo-object\tMPI_INT\tVariable to select ...
auto - Internal algorithm selection (can be overridden with ...)
binomial                                - Force Binomial Tree
nb                                      - Force nonblocking algorithm
\tMPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\tNo-object\tMPI_INT\tVariable to select ...
auto - Internal algorithm selection (can be overridden with ...)
nb                       - Force nonblocking algorithm
ring                     - Force ring algorithm
ccl                      - Force CCL algorithm
\tMPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\tNo-object\tMPI_INT\tVariable to select ...
sched_auto - Internal algorithm selection for sched-based algorithms
"""

OMPI_INFO = """mca:coll:tuned:param:coll_tuned_allgather_algorithm:value:ignore
mca:coll:tuned:param:coll_tuned_allgather_algorithm:enumerator:value:0:ignore
mca:coll:tuned:param:coll_tuned_allgather_algorithm:enumerator:value:1:linear
mca:coll:tuned:param:coll_tuned_allgather_algorithm:enumerator:value:6:two_proc
mca:coll:tuned:param:coll_tuned_allgatherv_algorithm:enumerator:value:2:bruck
"""


def test_mpich_values_come_from_mpivars_without_auto_and_the_excluded():
    assert peers.mpich_variants(MPIVARS, "allreduce") == [
        ("nb", [*peers.MPICH_FORCING, "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=nb"]),
        ("ring", [*peers.MPICH_FORCING, "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring"])]
    assert [label for label, _ in peers.mpich_variants(MPIVARS, "bcast")] == ["binomial", "nb"]
    with pytest.raises(ValueError, match="MPIR_CVAR_ALLTOALL_INTRA_ALGORITHM"):
        peers.mpich_variants(MPIVARS, "alltoall")


def test_openmpi_values_come_from_ompi_info_without_ignore():
    assert peers.openmpi_variants(OMPI_INFO, "allgather") == [
        ("linear", [*peers.OPENMPI_FORCING, "OMPI_MCA_coll_tuned_allgather_algorithm=1"]),
        ("two_proc", [*peers.OPENMPI_FORCING, "OMPI_MCA_coll_tuned_allgather_algorithm=6"])]
    with pytest.raises(ValueError, match="coll_tuned_bcast_algorithm"):
        peers.openmpi_variants(OMPI_INFO, "bcast")


def test_a_run_is_fresh_only_with_the_same_settings_and_every_size():
    meta = {"min_time": 0.1, "min_iterations": 10, "warmup": 3}
    rows = [{"bytes": 16}, {"bytes": 128}]
    assert peers.fresh(meta, rows, [16, 128], 0.1, 10, 3)
    assert not peers.fresh(meta, rows, [16, 128], 0.2, 10, 3)
    assert not peers.fresh(meta, rows, [16, 128], 0.1, 20, 3)
    assert not peers.fresh(meta, rows, [16, 128, 1024], 0.1, 10, 3)
    assert not peers.fresh({}, rows, [16], 0.1, 10, 3)


def test_failure_reason_gives_the_sweeps_reason_and_mpis_complaint():
    record = ("# mpich allreduce 2 ranks forced-smp: X=1 (MPICH fell back to its own selection "
              "12 times beyond MPI_Init's)\nUser set collective algorithm is not usable for "
              "the provided arguments\nAllreduce smp cannot be applied.\n")
    assert peers.failure_reason(record) == ("MPICH fell back to its own selection 12 times "
                                            "beyond MPI_Init's: Allreduce smp cannot be applied.")
    assert peers.failure_reason("# run (timed out after 900 s)\n") == "timed out after 900 s"


def write_run(directory: Path, library: str, name: str, rows: list[tuple],
              mpi: str = "MPICH Version: 5.0.2", ranks: int = 2,
              oversubscribed: str | None = None) -> None:
    """A run's JSON; a row (size, algorithm, time) or (..., p10, p90)."""
    meta = {"mpi": mpi, "date": "2026-11-23 12:00:00", "min_time": 0.1, "min_iterations": 10,
            "warmup": 3, "ranks": ranks, "oversubscribed": oversubscribed}
    results = [{"bytes": size, "algorithm": algorithm, "time_us": t,
                "resolved": "ring" if algorithm == "auto" else None,
                **dict(zip(("p10_us", "p90_us"), spread))}
               for size, algorithm, t, *spread in rows]
    (directory / library).mkdir(parents=True, exist_ok=True)
    (directory / library / name).write_text(json.dumps({"meta": meta, "results": results}))


def test_the_table_takes_the_fastest_of_each_kind(tmp_path):
    write_run(tmp_path, "mpich", "allreduce_2ranks_hpccoll.json",
              [(16, "native", 10.0), (16, "ring", 8.0), (16, "direct", 9.0), (16, "auto", 8.5),
               (1024, "native", 20.0), (1024, "ring", 30.0), (1024, "direct", 25.0),
               (1024, "auto", 30.5)])
    write_run(tmp_path, "mpich", "allreduce_2ranks_forced-ring.json",
              [(16, "native", 6.0), (1024, "native", 22.0)])
    write_run(tmp_path, "mpich", "allreduce_2ranks_forced-nb.json",
              [(16, "native", 7.0), (1024, "native", 18.0)])
    (tmp_path / "mpich" / "allreduce_2ranks_forced-smp.failed").write_text(
        "# x (MPICH fell back to its own selection 3 times beyond MPI_Init's)\n"
        "Allreduce smp cannot be applied.\n")
    write_run(tmp_path, "openmpi", "allreduce_2ranks_hpccoll.json",
              [(16, "native", 2.0), (16, "ring", 4.0), (16, "auto", 4.5),
               (1024, "native", 12.0), (1024, "ring", 15.0), (1024, "auto", 15.0)],
              mpi="Open MPI v5.0.11")
    write_run(tmp_path, "openmpi", "allreduce_2ranks_forced-ring.json",
              [(16, "native", 3.0), (1024, "native", 11.0, 10.5, 12.5)], mpi="Open MPI v5.0.11")
    write_run(tmp_path, "mpich", "allreduce_4ranks_hpccoll.json",
              [(16, "native", 10.0), (16, "auto", 9.0)], ranks=4,
              oversubscribed="4 ranks on 2 cores of host vm")
    text = peers.report(peers.load_runs(tmp_path), ["allreduce"], [2], [16, 1024],
                        "COLLECTIVES=allreduce bash perf/peers.sh")
    assert "## allreduce, 4 ranks" not in text
    assert "Made by `COLLECTIVES=allreduce bash perf/peers.sh`" in text
    assert "* MPICH: MPICH Version: 5.0.2" in text and "* Open MPI: Open MPI v5.0.11" in text
    rows = [line for line in text.splitlines() if line.startswith("| 16 |")
            or line.startswith("| 1K |")]
    assert rows == [
        "| 16 | 10.0 | 6.00 (ring) | **2.00** | 3.00 (ring) | 8.00 (ring) | **4.00** (ring) "
        "| 8.50 (ring) | 4.50 (ring) | 1.18x | 0.44x | 0.50x |",
        "| 1K | 20.0 | 18.0 (nb) | 12.0 | **11.0** [10.5-12.5] (ring) | 25.0 (direct) "
        "| **15.0** (ring) | 30.5 (ring) | 15.0 (ring) | 0.66x | 0.80x | 0.73x |"]
    assert "hpccoll best vs library best: 0.50-0.73x; hpccoll's best at least as fast at 0 " \
           "of 2 sizes; auto vs MPICH's default 0.66-1.18x, >= 0.95x at 1 of 2; auto vs " \
           "Open MPI's default 0.44-0.80x, >= 0.95x at 0 of 2" in text
    assert "MPICH forced algorithms measured: nb, ring." in text
    assert ("MPICH smp: did not run (`MPICH fell back to its own selection 3 times beyond "
            "MPI_Init's: Allreduce smp cannot be applied.`)") in text
    four = peers.report(peers.load_runs(tmp_path), ["allreduce"], [4], [16], "x")
    assert "## allreduce, 4 ranks (oversubscribed: 4 ranks on 2 cores of host vm)" in four
    assert "| 16 | **10.0** | - | - | - | - | - | 9.00 (ring) | - | 1.11x | - | - |" in four


def test_size_ranges_with_a_factor():
    assert size_range("16:16M:4") == [16 << (2 * k) for k in range(11)]
    assert size_range("8:64") == [8, 16, 32, 64]
    assert size_range("1K") == [1024]
    for bad in ("16:1K:1", "16:1K:x", "16:1K:0"):
        with pytest.raises(ValueError, match="FACTOR must be a whole number >= 2"):
            size_range(bad)

"""Topology detection and setting under MPI."""

from __future__ import annotations

import pytest

from hpccoll.topology import single_node


@pytest.mark.mpi(ranks=[1, 3], timeout=60)
def test_detection_and_setting(mpi_ranks, comm):
    import hpccoll
    import numpy as np
    p = comm.size
    found = hpccoll.get_topology(comm)
    assert found == single_node(p)          # one machine: one node
    sub = comm.Dup()
    given = hpccoll.set_topology(sub, f"nodes={p},ppn=1")
    assert hpccoll.get_topology(sub) == given and given.count(0) == p
    out = np.zeros(2 * p)
    hpccoll.allgather(sub, np.full(2, float(comm.rank)), out, algorithm="ring")
    assert np.array_equal(out, np.repeat(np.arange(p, dtype=float), 2))
    with pytest.raises(ValueError, match="describes"):
        hpccoll.set_topology(sub, f"nodes={p + 1},ppn=1")
    sub.Free()

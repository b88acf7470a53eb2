"""hpccoll: collective-communication algorithms for MPI programs.

Drop-in replacements for mpi4py's buffer collectives with a choice of algorithm::

    import hpccoll
    hpccoll.allreduce(comm, sendbuf, recvbuf, algorithm="ring")   # or "auto", "native", ...
"""

from .api import (allgather, allgather_init, allgather_stream, allreduce, allreduce_init,
                  alltoall, alltoall_init, alltoallv, alltoallv_init, bcast, bcast_init,
                  iallgather, iallreduce, ialltoall, ialltoallv, ibcast, ireduce,
                  ireduce_scatter, reduce, reduce_init, reduce_scatter, reduce_scatter_init)
from .context import set_topology, topology
from .requests import PersistentRequest, Request
from .runtime.progress import CollectiveTimeout
from .settings import configure
from .shared import SharedAllgather, SharedAllreduce
from .topology import Topology
from .verify import VerificationError

__version__ = "0.1.0"

__all__ = ["allgather", "allgather_stream", "alltoall", "alltoallv", "reduce_scatter", "allreduce",
           "iallgather", "ialltoall", "ialltoallv", "ireduce_scatter", "iallreduce",
           "allgather_init", "alltoall_init", "alltoallv_init", "reduce_scatter_init",
           "allreduce_init", "bcast", "ibcast", "bcast_init", "reduce", "ireduce", "reduce_init",
           "Request", "PersistentRequest", "CollectiveTimeout",
           "VerificationError", "configure", "set_topology", "topology", "Topology",
           "SharedAllgather", "SharedAllreduce"]

"""``native:mpich`` and ``native:openmpi``: what MPICH and Open MPI select by default for a
collective, a rank count and a size, replayed with hpccoll's own planner of that algorithm
(or the closest one, a "stand-in", where hpccoll plans none of the library's).

The rules are the libraries' published default decisions, for an intra-communicator, a
commutative built-in operation (MPI_SUM), buffers not in place, no user tuning file and no
environment overrides:

- MPICH: the MPIR-level selection tree ``maint/tuning/coll/mpir/generic.json`` (MPICH main
  at commit 6a79bf6, 2026-08, after v5.0.0b1; v5.0.1 release candidates tagged), evaluated as
  ``src/mpi/coll/src/csel.c`` does: ``avg_msg_size`` is count x type size (alltoall: one
  peer's block), ``total_msg_size`` the whole buffer (allgather: recvcount x size x p;
  reduce_scatter: the sum of recvcounts x size), ``comm_size=pow2`` a power of two,
  ``count<pow2`` count below the largest power of two <= p.
- Open MPI: coll/tuned's fixed decision rules, ``ompi/mca/coll/tuned/
  coll_tuned_decision_fixed.c`` (Open MPI main at commit 8efebee, 2026-08; the tables of the
  4.1/5.0 rewrite), by communicator size and ``total_dsize`` (type size x count: allreduce
  the vector, alltoall and allgather one block, reduce_scatter the sum of recvcounts).  The
  tables below are its if-chains, row (first p, ((size bound, algorithm id), ...)): a row
  holds from its p up to the next row's, a bound is exclusive (size < bound), None: any
  size.

The sizes are hpccoll's (``hpccoll bench``'s OSU convention, which is each library's own
count for these collectives).  ``docs/native-selections.md`` lists the rules and the
stand-ins.
"""

from __future__ import annotations

from dataclasses import dataclass

LIBRARIES = ("mpich", "openmpi")
PREFIX = "native:"


@dataclass(frozen=True)
class Choice:
    """What ``library`` selects (``chosen``, its own name of the algorithm) and the hpccoll
    algorithm replayed for it (``algorithm``), with ``stand_in``: why that planner stands in
    for the library's, or None when it is the same algorithm."""

    library: str
    chosen: str
    algorithm: str
    stand_in: str | None = None


def _pow2(p: int) -> bool:
    return p & (p - 1) == 0


def _pof2(p: int) -> int:
    """The largest power of two <= p (MPICH's MPL_pof2)."""
    return 1 << (p.bit_length() - 1)


# ---------------------------------------------------------------------- MPICH

_SCATTERED = ("direct", "MPICH posts the isends and irecvs in batches of "
              "MPIR_CVAR_ALLTOALL_THROTTLE (32) peers; direct posts all at once")
_RS_PAIRWISE = ("direct", "MPICH's pairwise reduce-scatter sends block (rank + i) mod p in "
                "step i, one peer a step; direct sends the same blocks all at once")
_SHIFT = ("pairwise", "MPICH pairs rank + i with rank - i for p not a power of two; "
          "hpccoll's pairwise is the 1-factor (i - j) mod p: the same rounds and blocks")
_MPICH_ALIAS = {"MPIR_Bcast_intra_scatter_recursive_doubling_allgather":
                ("scatter_allgather", "hpccoll's scatter-allgather broadcast is the same "
                 "binomial scatter followed by its own allgather"),
                "MPIR_Bcast_intra_scatter_ring_allgather":
                ("scatter_allgather", "hpccoll's scatter-allgather broadcast is the same "
                 "binomial scatter followed by its own allgather")}


def _mpich(collective: str, p: int, nbytes: int, itemsize: int) -> str:
    """MPICH's algorithm (its function name) from generic.json's tree."""
    count = nbytes // itemsize
    if collective == "allreduce":
        if nbytes <= 8 or count < _pof2(p):
            return "MPIR_Allreduce_intra_recursive_doubling"
        return "MPIR_Allreduce_intra_reduce_scatter_allgather"
    if collective == "allgather":
        total = nbytes * p
        if _pow2(p):
            return "MPIR_Allgather_intra_recursive_doubling" if total < 524288 else \
                "MPIR_Allgather_intra_ring"
        return "MPIR_Allgather_intra_brucks" if total < 81920 else "MPIR_Allgather_intra_ring"
    if collective == "alltoall":
        if p >= 8 and nbytes <= 256:
            return "MPIR_Alltoall_intra_brucks"
        return "MPIR_Alltoall_intra_scattered" if nbytes <= 32768 else \
            "MPIR_Alltoall_intra_pairwise"
    if collective == "alltoallv":
        return "MPIR_Alltoallv_intra_scattered"
    if collective == "reduce_scatter":
        return "MPIR_Reduce_scatter_intra_recursive_halving" if nbytes < 524288 else \
            "MPIR_Reduce_scatter_intra_pairwise"
    if collective == "bcast":
        if p < 8 or nbytes <= 12288:
            return "MPIR_Bcast_intra_binomial"
        if _pow2(p) and nbytes <= 524288:
            return "MPIR_Bcast_intra_scatter_recursive_doubling_allgather"
        return "MPIR_Bcast_intra_scatter_ring_allgather"
    if collective == "reduce":
        if nbytes <= 2048 or count < _pof2(p):
            return "MPIR_Reduce_intra_binomial"
        return "MPIR_Reduce_intra_reduce_scatter_gather"
    raise ValueError(f"native:mpich: no MPICH selection for {collective} is replayed "
                     f"(replayed: {', '.join(MPICH_COLLECTIVES)})")


MPICH_COLLECTIVES = ("allreduce", "allgather", "alltoall", "alltoallv", "reduce_scatter",
                     "bcast", "reduce")


def _mpich_choice(collective: str, p: int, nbytes: int, itemsize: int) -> Choice:
    chosen = _mpich(collective, p, nbytes, itemsize)
    short = chosen.split("_intra_")[1]
    if chosen in _MPICH_ALIAS:
        return Choice("mpich", chosen, *_MPICH_ALIAS[chosen])
    if short == "scattered":
        return Choice("mpich", chosen, *_SCATTERED)
    if short == "pairwise" and collective == "reduce_scatter":
        return Choice("mpich", chosen, *_RS_PAIRWISE)
    if short == "pairwise":         # alltoall: XOR partners for a power of two, else shifts
        return Choice("mpich", chosen, "xor") if _pow2(p) else Choice("mpich", chosen, *_SHIFT)
    if short == "reduce_scatter_allgather":
        return Choice("mpich", chosen, "rabenseifner")
    if short == "brucks":
        return Choice("mpich", chosen, "bruck")
    return Choice("mpich", chosen, short)


# ---------------------------------------------------------------------- Open MPI

# coll_tuned_decision_fixed.c's if-chains (commutative operations), row (first p, ((size
# bound, algorithm id), ...)); the ids are the file's own comments' numbering
OPENMPI_TABLES: dict[str, tuple] = {
    "allreduce": (
        (2, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (None, 6))),
        (4, ((16, 4), (8192, 3), (None, 6))),
        (8, ((8192, 3), (None, 6))),
        (16, ((64, 5), (4096, 3), (None, 6))),
        (32, ((128, 5), (None, 6))),
        (64, ((262144, 3), (None, 6))),
        (128, ((131072, 2), (262144, 3), (None, 6))),
        (256, ((4096, 2), (None, 6))),
        (512, ((2048, 2), (16384, 3), (None, 6))),
        (2048, ((2048, 2), (4096, 5), (16384, 3), (None, 6))),
        (4096, ((2048, 2), (16384, 5), (32768, 3), (None, 6))),
    ),
    "alltoall": (
        (2, ((2, 2), (4, 5), (16, 2), (64, 5), (256, 2), (4096, 5), (32768, 2), (262144, 4), (1048576, 5), (None, 2))),
        (3, ((8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2), (None, 1))),
        (8, ((262144, 4), (None, 1))),
        (16, ((4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1), (None, 4))),
        (32, ((512, 3), (524288, 1), (None, 4))),
        (64, ((1024, 3), (2048, 1), (4096, 4), (262144, 1), (None, 2))),
        (128, ((1024, 3), (2048, 4), (262144, 1), (None, 2))),
        (256, ((1024, 3), (8192, 4), (32768, 1), (None, 2))),
        (512, ((512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1), (None, 2))),
        (1024, ((512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1), (None, 4))),
        (2048, ((1024, 3), (4096, 4), (8192, 1), (131072, 4), (None, 1))),
        (4096, ((2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1), (None, 4))),
    ),
    "allgather": (
        (2, ((None, 6),)),
        (3, ((None, 3),)),
        (32, ((1024, 3), (65536, 5), (None, 4))),
        (64, ((512, 3), (65536, 5), (None, 4))),
        (128, ((512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (256, ((32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (512, ((64, 3), (256, 2), (2048, 3), (None, 5))),
        (1024, ((4, 3), (8, 2), (16, 3), (32, 2), (256, 3), (512, 2), (4096, 3), (None, 5))),
        (2048, ((32, 2), (128, 3), (512, 2), (4096, 3), (None, 5))),
        (4096, ((2, 3), (8, 2), (16, 3), (512, 2), (4096, 3), (None, 5))),
    ),
    "reduce_scatter": (
        (2, ((65536, 3), (131072, 4), (None, 3))),
        (4, ((8, 1), (262144, 2), (None, 3))),
        (8, ((262144, 2), (None, 3))),
        (32, ((64, 1), (2048, 2), (524288, 4), (None, 3))),
        (64, ((256, 1), (512, 2), (2048, 4), (4096, 2), (None, 4))),
        (128, ((256, 1), (512, 2), (None, 4))),
        (256, ((256, 1), (1024, 2), (None, 4))),
        (512, ((512, 1), (2048, 2), (8192, 4), (16384, 2), (None, 4))),
        (1024, ((512, 1), (4096, 2), (16384, 4), (32768, 2), (None, 4))),
        (2048, ((512, 1), (4096, 2), (None, 4))),
        (4096, ((1024, 1), (8192, 2), (None, 4))),
    ),
    "alltoallv": (
        (2, ((None, 2),)), (4, ((None, 1),)), (64, ((None, 2),)), (128, ((None, 1),)),
        (256, ((None, 2),)), (1024, ((None, 1),)),
    ),
}

_LINEAR_A2A = "Open MPI's linear posts every isend and irecv at once, as direct does"
# id -> (Open MPI's name, hpccoll's algorithm, why it stands in or None)
OPENMPI_ALGORITHMS: dict[str, dict[int, tuple[str, str, str | None]]] = {
    "allreduce": {
        1: ("basic_linear", "recursive_doubling", "Open MPI reduces linearly to rank 0 and "
            "broadcasts; hpccoll plans no reduce-then-broadcast allreduce: recursive doubling "
            "moves the same whole vector in log p rounds"),
        2: ("nonoverlapping", "recursive_doubling", "Open MPI runs its reduce, then its "
            "broadcast (2 tree depths of the whole vector); recursive doubling moves the whole "
            "vector in log p rounds"),
        3: ("recursive_doubling", "recursive_doubling", None),
        4: ("ring", "ring", None),
        5: ("segmented_ring", "ring", "Open MPI pipelines segments of the ring's blocks; "
            "hpccoll's ring sends each block whole"),
        6: ("rabenseifner", "rabenseifner", None)},
    "alltoall": {
        1: ("linear", "direct", None),
        2: ("pairwise", "pairwise", "Open MPI pairs rank + i with rank - i; hpccoll's "
            "pairwise is the 1-factor (i - j) mod p: the same rounds and blocks"),
        3: ("modified_bruck", "bruck", None),
        4: ("linear_sync", "direct", "Open MPI keeps a bounded number of requests in flight; "
            "direct posts all at once"),
        5: ("two_proc", "pairwise", None)},
    "allgather": {
        1: ("linear", "direct", "Open MPI gathers to rank 0 and broadcasts; direct sends "
            "each block to every peer at once"),
        2: ("bruck", "bruck", None),
        3: ("recursive_doubling", "recursive_doubling", None),
        4: ("ring", "ring", None),
        5: ("neighbor_exchange", "ring", "Open MPI's neighbour exchange swaps two blocks with "
            "alternating neighbours in p/2 steps (a ring for odd p); the ring forwards one "
            "block a step to one neighbour"),
        6: ("two_proc", "recursive_doubling", None)},
    "reduce_scatter": {
        1: ("non-overlapping", "recursive_halving", "Open MPI reduces to rank 0, then "
            "scatters; recursive halving is the latency-bound reduce-scatter hpccoll plans"),
        2: ("recursive_halving", "recursive_halving", None),
        3: ("ring", "ring", None),
        4: ("butterfly", "recursive_halving", "Open MPI's butterfly is recursive halving "
            "with distance doubling for any p")},
    "alltoallv": {
        1: ("basic_linear", "direct", None),
        2: ("pairwise", "pairwise", "Open MPI pairs rank + i with rank - i; hpccoll's "
            "pairwise is the 1-factor (i - j) mod p: the same rounds and blocks")},
}


def openmpi_id(collective: str, p: int, nbytes: int) -> int:
    """coll/tuned's fixed decision: the algorithm id for p ranks and ``nbytes``."""
    if collective not in OPENMPI_TABLES:
        raise ValueError(f"native:openmpi: no Open MPI selection for {collective} is replayed "
                         f"(replayed: {', '.join(OPENMPI_TABLES)}; bcast and reduce pick "
                         "segmented and k-ary trees hpccoll does not plan)")
    rows = OPENMPI_TABLES[collective]
    row = rows[0][1]
    for first, bounds in rows:
        if p >= first:
            row = bounds
    for bound, alg in row:
        if bound is None or nbytes < bound:
            return alg
    raise AssertionError("a row ends with an unbounded entry")


def _openmpi_choice(collective: str, p: int, nbytes: int) -> Choice:
    chosen = openmpi_id(collective, p, nbytes)
    name, algorithm, why = OPENMPI_ALGORITHMS[collective][chosen]
    if collective == "allgather" and algorithm == "recursive_doubling" and not _pow2(p):
        # coll/base's recursive doubling allgather switches to Bruck for other p
        return Choice("openmpi", name, "bruck", "Open MPI's recursive doubling switches to "
                      "its Bruck allgather when p is not a power of two")
    if name == "neighbor_exchange" and p % 2:
        return Choice("openmpi", name, "ring", None)     # Open MPI itself falls back to ring
    return Choice("openmpi", name, algorithm, why)


def select(name: str, collective: str, p: int, nbytes: int, itemsize: int) -> Choice:
    """The :class:`Choice` of ``native:mpich`` or ``native:openmpi`` for ``collective`` on
    ``p`` ranks and ``nbytes`` (hpccoll's size convention)."""
    library = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if library == "mpich":
        return _mpich_choice(collective, p, nbytes, itemsize)
    if library == "openmpi":
        return _openmpi_choice(collective, p, nbytes)
    raise ValueError(f"unknown native selection {name!r}: native:mpich or native:openmpi")


def is_native(name: str) -> bool:
    return name.startswith(PREFIX)

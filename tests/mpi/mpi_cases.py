"""Shared data for the MPI tests: exact (integer-valued) inputs, MPI ops by name, and the
comparison with the native result."""

from __future__ import annotations

import numpy as np

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "complex64", "complex128"]
OPS = ["sum", "prod", "min", "max"]
# every item size (1, 2, 4, 8, 16 bytes) and kind (signed, unsigned, float, complex)
CORE_DTYPES = ["int8", "float16", "uint32", "float64", "complex128"]
OTHER_DTYPES = [d for d in DTYPES if d not in CORE_DTYPES]


def dtypes_for(index: int) -> list[str]:
    """The dtypes the ``index``-th algorithm of a collective runs: the core ones and two of
    the others in turn, so that a collective's first four algorithms run every dtype
    between them.  (Dtypes of one size and kind take the same path through a schedule;
    MPI's own collective, which maps each to its MPI datatype, runs them all.)"""
    extra = [OTHER_DTYPES[(2 * index + k) % len(OTHER_DTYPES)] for k in (0, 1)]
    return CORE_DTYPES + extra


def ops_for(dtype: str) -> list[str]:
    return ["sum", "prod"] if np.dtype(dtype).kind == "c" else OPS


def data(rank: int, n: int, dtype: str, op: str = "sum", salt: int = 0) -> np.ndarray:
    """Rank ``rank``'s input: small integers, so every reduction order gives the same exact
    result in every dtype (products stay within int8 for up to 4 ranks)."""
    rng = np.random.default_rng(1000 * rank + 7 * n + salt)
    if op == "prod":
        values = rng.choice([1, 2, 1, 1], size=n) * (1 if np.dtype(dtype).kind == "u"
                                                     else rng.choice([1, -1], size=n))
    else:
        low = 0 if np.dtype(dtype).kind == "u" else -20
        values = rng.integers(low, 20, size=n)
    out = values.astype(dtype)
    if np.dtype(dtype).kind == "c":
        out = out + 1j * rng.integers(-3, 4, size=n).astype(dtype)
    return out


def segmented(collective: str, name: str, nbytes: int) -> dict | None:
    """``options`` asking ``name`` for segments of ``nbytes``: None for an algorithm whose
    declared options leave segment_bytes out (it refuses options it does not declare)."""
    from hpccoll import registry
    if name != registry.NATIVE:
        declared = registry.get(collective, name).options
        if declared is not None and "segment_bytes" not in {o.name for o in declared}:
            return None
    return {"segment_bytes": nbytes}


def mpi_op(name):
    from mpi4py import MPI
    return {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[name]


def check(got, want, what):
    assert got.dtype == want.dtype
    assert np.array_equal(got, want), f"{what}: got {got[:8]}, want {want[:8]}"

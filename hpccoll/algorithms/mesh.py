"""2-D mesh all-to-all: rows, then columns, with local regrouping in between (the article "All-to-all (parallel pattern)").

The p ranks form an r x c grid, rank = row * c + col.  Phase 1 is an all-to-all inside each
row: the message to the rank in column j carries, grouped by destination row, the r blocks
bound for column j.  Phase 2 is an all-to-all inside each column: the message to row i carries
the blocks for rank (i, my col) from every rank of my row.  Cost notation as in
:mod:`hpccoll.algorithms.ring` (n the bytes sent to one peer).
"""

from __future__ import annotations

import math
import operator
from typing import Any

from ..registry import Constraint, Cost, Option, register
from ..schedule import (RECV, SCRATCH, SEND, Call, Program, Region, StepBuilder, blocks,
                        pairs_by_distance, span)


def _valid_rows(p: int, rows: Any) -> bool:
    if rows is None:
        return True
    if isinstance(rows, bool):
        return False
    try:
        rows = operator.index(rows)
    except TypeError:
        return False
    return rows >= 1 and p % rows == 0


VALID_ROWS = Constraint("option rows divides p", lambda c: _valid_rows(c.p, c.option("rows")))
# the value depends on p, so VALID_ROWS (a constraint, which sees the call) judges it
ROWS = Option("rows", "a positive integer dividing p", "the squarest r x c = p, r <= c",
              "the grid's rows r: phase 1 inside rows of c = p / r ranks, phase 2 inside "
              "columns of r", lambda value: True)


def grid_shape(p: int, rows: Any = None) -> tuple[int, int]:
    """(r, c) with r c = p: ``rows`` if given (ValueError unless it divides p), otherwise
    the factorisation closest to square with r <= c (1 x p for prime p)."""
    if not _valid_rows(p, rows):
        raise ValueError(f"mesh option rows={rows!r} must be a positive integer dividing p={p}")
    if rows is None:
        rows = next(r for r in range(math.isqrt(p), 0, -1) if p % r == 0)
    rows = operator.index(rows)
    return rows, p // rows


@register("alltoall", "mesh", family="mesh", requires=(VALID_ROWS,), options=(ROWS,),
          source="All-to-all (parallel pattern)",
          cost=Cost("0 if p == 1 else 1 if 1 in grid(p) else 2", "n * (2 * p - sum(grid(p)))",
                    "2α + n(2p - r - c)β, grid r x c"))
def plan_mesh_alltoall(call: Call) -> Program:
    """2-D mesh all-to-all: a direct all-to-all inside the row (r blocks per message, grouped
    by destination row), then inside the column (c blocks per message).

    Grid r x c = p, option ``rows`` (must divide p) or the squarest factorisation, r <= c.
    Rounds 2 (c-1, then r-1 concurrent messages; 1 for prime p, where it is direct); bytes
    sent per rank n((c-1) r + (r-1) c) = n(2p - r - c); time about 2 alpha + n(2p - r - c)
    beta on one port, plus the regrouping: the executor packs phase 1's strided send blocks
    and scatters its arrivals into scratch grouped by destination row (the own row's straight
    into the receive buffer), so phase 2 sends and receives contiguous runs.  Scratch
    (r-1) c n (none when c = 1).
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    r, c = grid_shape(p, call.option("rows"))
    row, col = divmod(rank, c)
    if n == 0:
        return Program(())
    mine = blocks(SEND, (n,) * p)               # mine[i * c + j]: my block for rank (i, j)
    result = blocks(RECV, (n,) * p)             # result[i * c + j]: the block from (i, j)
    waiting = blocks(SCRATCH, (n,) * ((r - 1) * c))

    def park(i: int) -> int:                    # where the blocks for (i, col) wait, i != row
        return (i - (i > row)) * c

    def into(i: int, j: int) -> Region:         # phase 1 arrival from (row, j) bound for (i, col)
        return result[row * c + j] if i == row else waiting[park(i) + j]

    def outgoing(i: int) -> Region:             # phase 2 message to (i, col): c parked blocks
        return mine[i * c + col] if c == 1 else span(waiting, park(i), park(i) + c)

    phase1, phase2 = StepBuilder(), StepBuilder()
    phase1.copy(mine[rank], result[rank])
    # my own blocks bound for my column are parked next to the ones that arrive in phase 1
    # (one block each), so every phase 2 message is contiguous; with one column there is
    # nothing to join and phase 2 sends straight from the send buffer
    if c > 1:
        for i in range(r):
            if i != row:
                phase1.copy(mine[i * c + col], waiting[park(i) + col])
    for to, frm in pairs_by_distance(c, col):
        phase1.send(row * c + to, *(mine[i * c + to] for i in range(r)))
        phase1.recv(row * c + frm, *(into(i, frm) for i in range(r)))
    for to, frm in pairs_by_distance(r, row):
        phase2.send(to * c + col, outgoing(to))
        phase2.recv(frm * c + col, span(result, frm * c, (frm + 1) * c))
    phases = (phase1, phase2) if r > 1 else (phase1,)
    return Program(tuple(phase.build() for phase in phases),
                   scratch=0 if c == 1 else (r - 1) * c * n)

"""The verifier: it catches every kind of broken program, and every registered algorithm
passes it for p = 1..33 and powers of two up to 128 (no MPI needed).  256 ranks, a power of
two more, takes as long as all the others together (the data moved grows like p^3) and
reaches no step structure that 64 and 128 do not: ``hpccoll verify`` (default
--max-power-of-two 256) checks it on demand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpccoll import registry, verify
from hpccoll.schedule import (RECV, SCRATCH, SEND, Call, Copy, Program, Recv, Reduce, Region,
                              Send, Step, even_split, merge_adjacent, segments)
from hpccoll.collectives import uniform_call
from hpccoll.verify import VerificationError

ALGORITHMS = [(a.collective, a.name) for a in registry.algorithms()]


@pytest.mark.parametrize("collective,name", ALGORITHMS, ids=[f"{c}-{n}" for c, n in ALGORITHMS])
def test_every_algorithm_verifies(collective, name):
    assert verify.check_sweep(collective, name, max_ranks=33, max_power_of_two=128) > 0


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ALGORITHMS), st.integers(1, 12), st.integers(0, 2**31))
def test_random_instances_verify(algorithm, p, seed):
    collective, name = algorithm
    verify.check_algorithm(collective, name, p, seed=seed, counts=(0, 9))


# ----------------------------------------------------------- the verifier catches mistakes

def _allgather_calls(p: int, n: int = 2) -> list[Call]:
    return [uniform_call("allgather", p, r, n) for r in range(p)]


def _run(programs: list[Program], calls: list[Call] | None = None):
    calls = calls or _allgather_calls(len(programs))
    inputs = verify.random_inputs(calls, np.random.default_rng(0))
    return verify.run_in_one_process(calls, programs, inputs)


def _swap_program(rank: int, **changes) -> Program:
    """A correct 2-rank allgather: copy own block, swap with the peer."""
    peer = 1 - rank
    own, other = Region(RECV, 2 * rank, 2), Region(RECV, 2 * peer, 2)
    step = Step(sends=(Send(peer, (Region(SEND, 0, 2),)),), recvs=(Recv(peer, (other,)),),
                local=(Copy(Region(SEND, 0, 2), own),))
    return Program((replace(step, **changes),))


def test_correct_program_passes():
    calls = _allgather_calls(2)
    algorithm = registry.Algorithm("allgather", "swap", "test", lambda c: _swap_program(c.rank))
    verify.check_calls(algorithm, calls, np.random.default_rng(1))


def test_unmatched_send_is_reported():
    programs = [_swap_program(0), _swap_program(1, recvs=())]
    with pytest.raises(VerificationError, match=r"rank 0, step 0: 1 send\(s\) to 1 are never "
                                                r"received"):
        _run(programs)


def test_receive_without_send_is_reported():
    programs = [_swap_program(0), _swap_program(1, sends=())]
    with pytest.raises(VerificationError, match="rank 0, step 0: receive 0 from 1 has no "
                                                "matching send"):
        _run(programs)


def test_size_mismatch_is_reported():
    short = Send(0, (Region(SEND, 0, 1),))
    programs = [_swap_program(0), _swap_program(1, sends=(short,))]
    with pytest.raises(VerificationError, match="expects 2 elements, the send has 1"):
        _run(programs)


def test_out_of_bounds_region_is_reported():
    bad = Recv(1, (Region(RECV, 3, 2),))
    with pytest.raises(VerificationError, match=r"rank 0, step 0: receive 0 from 1 "
                                                r"Region\(buffer='recv', offset=3, count=2\) is "
                                                r"outside the recv buffer of 4 elements"):
        _run([_swap_program(0, recvs=(bad,)), _swap_program(1)])


def test_read_of_unwritten_scratch_is_reported():
    send = Send(1, (Region(SCRATCH, 0, 2),))
    programs = [Program(_swap_program(0, sends=(send,)).steps, scratch=2), _swap_program(1)]
    with pytest.raises(VerificationError, match="rank 0, step 0: send to 1 reads unwritten data"):
        _run(programs)


def test_wrong_result_is_reported():
    def swapped_places(call: Call) -> Program:
        """Own block in the peer's place and the peer's block in the own place."""
        mine, theirs = Region(RECV, 2 * call.rank, 2), Region(RECV, 2 * (1 - call.rank), 2)
        return _swap_program(call.rank, local=(Copy(Region(SEND, 0, 2), theirs),),
                             recvs=(Recv(1 - call.rank, (mine,)),))
    algorithm = registry.Algorithm("allgather", "wrong", "test", swapped_places)
    with pytest.raises(VerificationError, match="allgather/wrong, p=2, rank 0: wrong result"):
        verify.check_calls(algorithm, _allgather_calls(2), np.random.default_rng(1))


def test_write_to_send_buffer_is_reported():
    bad = Copy(Region(SEND, 0, 1), Region(SEND, 1, 1))
    with pytest.raises(VerificationError, match="writes the send buffer"):
        _run([_swap_program(0, local=(bad,)), _swap_program(1)])


def test_local_op_on_region_in_flight_is_reported():
    other = Region(RECV, 2, 2)
    touch = Copy(Region(SEND, 0, 2), other)
    with pytest.raises(VerificationError, match="local op touches .* while a receive into it "
                                                "is in flight"):
        _run([_swap_program(0, local=(touch,)), _swap_program(1)])


def test_overwriting_data_being_sent_is_reported():
    # rank 0 sends its recv block 0 while an arrival op overwrites it
    programs = []
    for r in range(2):
        peer = 1 - r
        mine, theirs = Region(RECV, 2 * r, 2), Region(RECV, 2 * peer, 2)
        first = Step(local=(Copy(Region(SEND, 0, 2), mine),))
        second = Step(sends=(Send(peer, (mine,)),),
                      recvs=(Recv(peer, (theirs,), (Copy(theirs, mine),) if r == 0 else ()),))
        programs.append(Program((first, second)))
    with pytest.raises(VerificationError, match="rank 0, step 1: .* writes .* while it is being "
                                                "sent"):
        _run(programs)


def test_order_dependent_arrivals_are_reported():
    """Two arrivals copying into the same place: the result depends on which lands first."""
    p = 3
    calls = [uniform_call("reduce_scatter", p, r, 1) for r in range(p)]
    programs = []
    for r in range(p):
        peers = [q for q in range(p) if q != r]
        slots = [Region(SCRATCH, i, 1) for i in range(2)]
        result = Region(RECV, 0, 1)
        programs.append(Program((Step(
            sends=tuple(Send(q, (Region(SEND, q, 1),)) for q in peers),
            recvs=tuple(Recv(q, (s,), (Copy(s, result),)) for q, s in zip(peers, slots)),
            local=(Copy(Region(SEND, r, 1), result),)),), scratch=2))
    with pytest.raises(VerificationError, match="depends on arrival order"):
        verify.run_in_one_process(calls, programs,
                                  verify.random_inputs(calls, np.random.default_rng(0)))


def test_commuting_accumulations_are_allowed():
    """The same shape with Reduce-accumulate instead of Copy is order-independent."""
    p = 3
    calls = [uniform_call("reduce_scatter", p, r, 1) for r in range(p)]

    def planner(call: Call) -> Program:
        r = call.rank
        peers = [q for q in range(p) if q != r]
        slots = [Region(SCRATCH, i, 1) for i in range(2)]
        result = Region(RECV, 0, 1)
        return Program((Step(
            sends=tuple(Send(q, (Region(SEND, q, 1),)) for q in peers),
            recvs=tuple(Recv(q, (s,), (Reduce(result, (result, s)),))
                        for q, s in zip(peers, slots)),
            local=(Copy(Region(SEND, r, 1), result),)),), scratch=2)
    algorithm = registry.Algorithm("reduce_scatter", "acc", "test", planner)
    verify.check_calls(algorithm, calls, np.random.default_rng(2))


def test_writing_outside_the_output_is_reported():
    """alltoallv must leave the gaps of the receive buffer alone."""
    def planner(call: Call) -> Program:
        prog = registry.get("alltoallv", "direct").planner(call)
        stray = Copy(Region(SEND, 0, 1), Region(RECV, 1, 1))     # the gap between the blocks
        step = prog.steps[0]
        return Program((Step(step.sends, step.recvs, step.local + (stray,)),), prog.scratch)
    counts = (1, 1)
    calls = [Call("alltoallv", 2, r, counts, counts, (0, 2), (0, 2)) for r in range(2)]
    algorithm = registry.Algorithm("alltoallv", "stray", "test", planner)
    with pytest.raises(VerificationError, match="outside the collective's output"):
        verify.check_calls(algorithm, calls, np.random.default_rng(3))


# ------------------------------------------------------------------- documented round counts

@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13])
def test_round_counts_match_the_docstrings(p):
    def rounds(collective: str, name: str, n: int = 3) -> int:
        calls = [uniform_call(collective, p, r, n) for r in range(p)]
        return verify.check_calls(registry.get(collective, name), calls,
                                  np.random.default_rng(0)).rounds
    assert rounds("allgather", "ring") == p - 1
    assert rounds("reduce_scatter", "ring") == p - 1
    assert rounds("allreduce", "ring", 3 * p) == 2 * (p - 1)
    assert rounds("alltoall", "ring") == p - 1
    assert rounds("alltoall", "ring_bidirectional") == p // 2
    assert rounds("allgather", "direct") == min(1, p - 1)
    assert rounds("allreduce", "direct", 3 * p) == 2 * min(1, p - 1)


def test_ring_alltoall_bytes_match_the_docstring():
    p, n = 7, 3
    calls = [uniform_call("alltoall", p, r, n) for r in range(p)]
    report = verify.check_calls(registry.get("alltoall", "ring"), calls, np.random.default_rng(0))
    assert report.sent == [n * p * (p - 1) // 2] * p


def test_segmentation_cuts_messages():
    call = Call("reduce_scatter", 3, 0, (10, 10, 10), itemsize=8, options=(("segment_bytes", 32),))
    program = registry.get("reduce_scatter", "ring").planner(call)
    assert [s.count for s in program.steps[0].sends] == [4, 4, 2]


# ------------------------------------------------------------------------------ IR helpers

@given(st.integers(0, 1000), st.integers(1, 64))
def test_even_split(n, parts):
    counts = even_split(n, parts)
    assert sum(counts) == n and max(counts) - min(counts) <= 1


@given(st.integers(0, 100), st.integers(1, 30))
def test_segments_cover_the_region(count, size):
    region = Region(RECV, 5, count)
    pieces = segments(region, size)
    assert sum(p.count for p in pieces) == count
    assert all(0 < p.count <= size for p in pieces)
    assert all(a.stop == b.offset for a, b in zip(pieces, pieces[1:]))


def test_merge_adjacent():
    regions = [Region(SEND, 0, 2), Region(SEND, 2, 3), Region(SEND, 9, 0), Region(RECV, 5, 1),
               Region(RECV, 7, 1)]
    assert merge_adjacent(regions) == (Region(SEND, 0, 5), Region(RECV, 5, 1), Region(RECV, 7, 1))

"""Reading the same call again: how :class:`hpccoll.Comm` serves a repeated call cheaply.

A :class:`Reading` remembers how a call on NumPy arrays was read
(:mod:`hpccoll.buffer_specs`), so that the same call again -- the same spec forms, counts,
displacements, datatypes, op and root, on arrays of the same dtype and shape (the same
arrays, or others like them) -- is read in a few attribute checks instead of from scratch.
A :class:`NativeReading` remembers that a call went to MPI's own collective, so that a call
whose arguments are alike in everything reading looks at goes there again at once.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from .arguments import copied, frozen
from .buffer_specs import Call
from .runtime.entry import ANY, ARRAY, EQUAL, SAME, SPEC


MISS = object()             # what a view gives for an argument unlike the one read before
_NDARRAY = np.ndarray


def _array_view(buf: Any, array: Any, checks: str) -> Callable[[Any], Any] | None:
    """``view(value)``: the elements of ``value`` read as ``array`` was read from ``buf``,
    if ``value`` is a NumPy array of ``buf``'s dtype and shape, so that reading it from
    scratch would view the same elements; MISS otherwise.  ``checks`` says what else
    ``value`` must be, as reading requires: "" nothing more (what runs the call checks its
    layout and writability on every call: the compiled executors), "layout" its layout
    (C- or F-contiguous as ``buf``), "writable" its layout and that it is writable (reading
    does not view a read-only buffer where MPI writes).  A flat view of a multi-dimensional
    array always checks the layout (reshaping another one would copy it).  None where no
    such view can be made: ``buf`` is no NumPy array, or ``array`` not a view of its memory
    (a copy; an empty ``array`` has no element to place, so any empty view will do)."""
    if type(buf) is not _NDARRAY or type(array) is not _NDARRAY:
        return None
    dtype, shape, elements = buf.dtype, buf.shape, array.dtype
    c_order = bool(buf.flags.c_contiguous)
    whole = array is buf
    # (an empty view is alike wherever it is: no element to place)
    start = 0 if whole or not array.size else array.ctypes.data - buf.ctypes.data
    if start < 0 or start % elements.itemsize or start + array.nbytes > buf.nbytes:
        return None
    low = start // elements.itemsize
    high = low + array.size
    reshape = buf.ndim != 1 or not c_order
    layout, writable = bool(checks) or reshape, checks == "writable"
    order = "C" if c_order else "F"
    usable = buf.nbytes - buf.nbytes % elements.itemsize       # whole elements' bytes
    empty = None if array.size else np.empty(0, elements)      # (given for every empty view)

    def view(value: Any) -> Any:
        if type(value) is not _NDARRAY or value.dtype is not dtype or value.shape != shape:
            return MISS
        if layout:
            flags = value.flags
            if not (flags.c_contiguous if c_order else flags.f_contiguous) or \
                    writable and not flags.writeable:
                return MISS
        if whole:
            return value
        if empty is not None:
            return empty
        if reshape:
            value = value.reshape(-1, order=order)
        if elements is not dtype:
            value = value.view(np.uint8)[:usable].view(elements)
        return value[low:high]
    return view


def _argument_view(argument: Any, array: Any, checks: str) -> Callable[[Any], Any] | None:
    """``view(value)`` for a buffer argument: ``argument`` a NumPy array or a buffer spec
    over one (the other items compared by value), MPI.IN_PLACE (None: no send buffer), or
    not used (``array`` None and not in place: anything goes); None where there is none.
    ``checks`` as :func:`_array_view`'s."""
    if argument is MPI.IN_PLACE:
        return lambda value: None if value is MPI.IN_PLACE else MISS
    if array is None:
        return lambda value: None
    if type(argument) is list or type(argument) is tuple:
        return _spec_view(argument, array, _array_view(argument[0], array, checks))
    return _array_view(argument, array, checks)


def _spec_view(spec: list | tuple, array: Any, buf_view: Callable[[Any], Any] | None
               ) -> Callable[[Any], Any] | None:
    """``view(value)`` for a buffer spec ``[buf, ...]`` read as ``array``: ``value`` a spec
    of the same type and length whose other items equal ``spec``'s (counts and displacements
    compared as numbers), its buffer read by ``buf_view`` -- or, the very ``buf`` again with
    the same dtype, shape and layout and writability flags (an OSU loop's ``[buf, size,
    MPI.BYTE]``), ``array`` itself, the view ``buf_view`` would make anew."""
    if buf_view is None:
        return None
    kind, length = type(spec), len(spec)
    buf = spec[0]
    dtype, shape, flags = buf.dtype, buf.shape, buf.flags.num & _LAYOUT_FLAGS
    try:
        rest = copied(spec[1:])
    except LookupError:         # counts in NumPy arrays: compared as tuples of numbers
        layout = frozen(spec[1:])

        def view_frozen(value: Any) -> Any:
            if type(value) is not kind or len(value) != length or frozen(value[1:]) != layout:
                return MISS
            return buf_view(value[0])
        return view_frozen

    def view(value: Any) -> Any:
        if type(value) is not kind or len(value) != length or value[1:] != rest:
            return MISS
        given = value[0]
        if given is buf and given.dtype is dtype and given.shape == shape and \
                given.flags.num & _LAYOUT_FLAGS == flags:
            return array
        return buf_view(given)
    return view


class Reading:
    """How a call was read from its arguments (the bound parameters: the buffers, then op,
    root or counts), and :attr:`arrays` that reads the same call again from new arguments
    cheaply.  ``last`` is free for the caller: the validated call to run again."""

    __slots__ = ("call", "send", "recv", "buffers", "rest", "as_numbers", "last", "arrays",
                 "pattern")

    def __init__(self, call: Call, send: Callable[[Any], Any], recv: Callable[[Any], Any],
                 buffers: int, rest: tuple, as_numbers: bool,
                 as_passed: Callable[[tuple], Any] | None = None):
        self.call, self.send, self.recv = call, send, recv
        self.buffers, self.rest = buffers, rest
        self.as_numbers = as_numbers        # NumPy arrays among the rest: compared frozen
        self.last: Any = None
        # arrays(values): the send (None: none) and receive (None: not used) arrays of the
        # call read from ``values`` if it is the same call as the one read before, else None
        self.arrays = as_passed or self._viewed
        self.pattern: tuple | None = None   # (set by Reading.of: see _pattern)

    @staticmethod
    def of(call: Call, values: tuple, buffers: int, repeated: bool) -> Reading | None:
        """The reading of ``call`` from ``values``, whose first ``buffers`` (1 or 2) are its
        buffer arguments, for a call run again by ``LastCall`` (``repeated``: blocking and
        non-blocking ones, whose ``repeat`` and ``start`` check the buffers' layout and
        writability themselves on every call; the caller reads a call anew where there is no
        LastCall) or another (validated anew: persistent): None where it cannot be read again
        cheaply (not NumPy arrays, a copy or a gather made)."""
        if not call.repeatable:
            return None
        send_checks, recv_checks = ("", "") if repeated else ("layout", "writable")
        if buffers == 1:                # bcast: its one buffer is the receive buffer
            send = lambda value: None       # noqa: E731
            recv = _argument_view(values[0], call.recv, recv_checks)
        else:
            send = _argument_view(values[0], _own_array(call.send), send_checks)
            recv = _argument_view(values[1], _own_array(call.recv), recv_checks)
        if send is None or recv is None:
            return None
        rest = values[buffers:]         # counts among them: compared as numbers
        try:
            rest = copied(rest)
        except LookupError:             # counts in NumPy arrays: compared frozen
            return Reading(call, send, recv, buffers, frozen(rest), True)
        reading = Reading(call, send, recv, buffers, rest, False,
                          _as_passed(call, values, buffers, rest) if repeated else None)
        if repeated:
            reading.pattern = _pattern(call, values, buffers, rest)
        return reading

    def _viewed(self, values: tuple) -> tuple[Any, Any] | None:
        """:attr:`arrays` through the buffers' views."""
        try:
            rest = values[self.buffers:]
            if (frozen(rest) if self.as_numbers else rest) != self.rest:
                return None
            send = self.send(values[0])
            if send is MISS:
                return None
            recv = self.recv(values[self.buffers - 1])
        except (TypeError, ValueError):     # (arguments no value compares with: read anew)
            return None
        return None if recv is MISS else (send, recv)


def _as_passed(call: Call, values: tuple, buffers: int, rest: Any
               ) -> Callable[[tuple], Any] | None:
    """:attr:`Reading.arrays` in one function for the commonest repeated call, whose
    buffers are flat NumPy arrays passed as they are (the very arrays the call runs on, so
    their views give them back unchanged) and whose other arguments are plain values
    (``rest``, copied): the views' checks without their calls.  None for any other call."""
    send, recv = values[0] if buffers == 2 else None, values[buffers - 1]
    if not (type(recv) is _NDARRAY and recv is call.recv and recv.ndim == 1) or \
            buffers == 2 and not (type(send) is _NDARRAY and send is call.send and
                                  send.ndim == 1):
        return None
    return _same_arrays(values, buffers, rest, layout=False, found=None)


def _pattern(call: Call, values: tuple, buffers: int, rest: tuple) -> tuple | None:
    """The pattern of the arguments of ``call``, read from ``values``, as the C entry of its
    repeats matches them (:mod:`.runtime.entry`), where reading gave the very arrays passed:
    per buffer argument MPI.IN_PLACE, anything (not used), a flat NumPy array passed as it is
    or as the first item of a spec of plain values; then values equal to ``rest`` (plain
    values, copied).  None for any other call (the Python path reads it again)."""
    pattern = []
    used = (call.recv,) if buffers == 1 else (call.send, call.recv)
    for buffer, (value, argument) in enumerate(zip(values, used), start=2 - buffers):
        array = _own_array(argument)
        if value is MPI.IN_PLACE:
            pattern.append((SAME, value, -1))
        elif array is None:
            pattern.append((ANY, None, -1))
        elif value is array and array.ndim == 1:
            pattern.append((ARRAY, None, buffer))
        elif type(value) in (list, tuple) and value and value[0] is array and \
                array.ndim == 1:
            try:
                pattern.append((SPEC, copied(value[1:]), buffer))
            except LookupError:         # (NumPy arrays among its numbers)
                return None
        else:
            return None
    return (*pattern, *[(EQUAL, value, -1) for value in rest])


def _same_arrays(values: tuple, buffers: int, rest: tuple, layout: bool, found: Any
                 ) -> Callable[[tuple], Any]:
    """``alike(values)`` for calls whose ``buffers`` first values are NumPy arrays, as in
    ``values``, and the others ``rest``: ``found`` (None: the arrays, ``(send, recv)``,
    send None for one buffer) where ``values`` has arrays of the same dtypes and shapes (and
    layout flags: ``layout``) in their places and values equal to ``rest`` after them; else
    None.  One comparison chain per number of buffers, for speed."""
    recv = values[buffers - 1]
    recv_dtype, recv_shape = recv.dtype, recv.shape
    recv_flags = recv.flags.num & _LAYOUT_FLAGS
    if buffers == 1:
        def one_buffer(values: tuple) -> Any:
            try:
                value = values[0]
                if values[1:] != rest or type(value) is not _NDARRAY or \
                        value.dtype is not recv_dtype or value.shape != recv_shape or \
                        layout and value.flags.num & _LAYOUT_FLAGS != recv_flags:
                    return None
            except (TypeError, ValueError):
                return None
            return (None, value) if found is None else found
        return one_buffer
    send = values[0]
    send_dtype, send_shape = send.dtype, send.shape
    send_flags = send.flags.num & _LAYOUT_FLAGS

    def two_buffers(values: tuple) -> Any:
        try:
            send, recv = values[0], values[1]
            if values[2:] != rest or type(send) is not _NDARRAY or \
                    type(recv) is not _NDARRAY or send.dtype is not send_dtype or \
                    recv.dtype is not recv_dtype or send.shape != send_shape or \
                    recv.shape != recv_shape or layout and (
                        send.flags.num & _LAYOUT_FLAGS != send_flags or
                        recv.flags.num & _LAYOUT_FLAGS != recv_flags):
                return None
        except (TypeError, ValueError):
            return None
        return (send, recv) if found is None else found
    return two_buffers


def _own_array(argument: Any) -> Any:
    """The array of a call's argument (an array, ``[array, counts, displs]``, MPI.IN_PLACE
    or None: None for the last two)."""
    if type(argument) is list:
        return argument[0]
    return None if argument is MPI.IN_PLACE else argument


NATIVE = object()           # what a NativeReading gives for a call alike to the one before
# NumPy's flags C_CONTIGUOUS, F_CONTIGUOUS and WRITEABLE (NPY_ARRAY_*: 0x1, 0x2, 0x400), read
# at once from ``flags.num`` (a tenth of a microsecond less than three flags read one by one)
_LAYOUT_FLAGS = 0x1 | 0x2 | 0x400
_PLAIN_VALUES = (int, str, MPI.Op, MPI.Datatype, MPI.Info)


def _likeness(value: Any) -> Any:
    """What reading a call looks at in an argument, comparable by ``==``: a NumPy array's
    dtype, shape and layout flags; a spec's type, its buffer's likeness and its other items
    as numbers; MPI.IN_PLACE, None, ints, names, ops, datatypes and infos as they are.
    MISS for anything else (another buffer type: not compared), a spec of such a buffer
    included (a device array in a spec must be checked again: check_mpi_takes)."""
    if type(value) is _NDARRAY:
        return value.dtype, value.shape, value.flags.num & _LAYOUT_FLAGS
    if type(value) is list or type(value) is tuple:
        buffer = _likeness(value[0])
        return MISS if buffer is MISS else (type(value), buffer, frozen(value[1:]))
    if value is None or value is MPI.IN_PLACE or isinstance(value, _PLAIN_VALUES):
        return value
    return MISS


def _plain_rest(value: Any) -> Any:
    """The items after the NumPy array of a spec ``[array, ...]`` of plain values, copied (a
    later spec's compare with them as they are); None for anything else."""
    if (type(value) is list or type(value) is tuple) and value and \
            type(value[0]) is _NDARRAY:
        try:
            return copied(value[1:])
        except LookupError:             # counts in NumPy arrays: compared frozen
            return None
    return None


class NativeReading:
    """A call that went to MPI's own collective (for ``reason``), by the likeness of its
    arguments: :attr:`arrays` gives NATIVE for a call alike in everything reading looks at
    (so reading it would send it there again), None otherwise.  A plain value (an op, a
    datatype, a number, ...) is its own likeness: the very object again is alike at once."""

    __slots__ = ("likeness", "plain", "rests", "reason", "arrays")

    def __init__(self, values: tuple, likeness: tuple, reason: Exception, buffers: int):
        self.likeness, self.reason = likeness, reason
        self.plain = tuple(like is value for like, value in zip(likeness, values))
        self.rests = tuple(map(_plain_rest, values))
        # the commonest hand-over (NumPy arrays passed as they are, plain values after them:
        # a user-defined op) in one function; any other through the likeness of each value
        plain_arrays = all(type(value) is _NDARRAY for value in values[:buffers]) and \
            all(self.plain[buffers:])
        self.arrays = _same_arrays(values, buffers, values[buffers:], layout=True,
                                   found=NATIVE) if plain_arrays else self._alike

    @staticmethod
    def of(values: tuple, reason: Exception, buffers: int) -> NativeReading | None:
        """The reading of a call handed to MPI for ``reason`` from ``values``, whose first
        ``buffers`` are its buffer arguments (None where they cannot be compared)."""
        likeness = tuple(map(_likeness, values))
        return None if any(item is MISS for item in likeness) else \
            NativeReading(values, likeness, reason, buffers)

    def _alike(self, values: tuple) -> Any:
        if len(values) != len(self.likeness):
            return None
        try:
            for value, like, plain, rest in zip(values, self.likeness, self.plain, self.rests):
                if plain and value is like:
                    continue
                if rest is not None:                # a spec: _likeness's, without making it
                    if type(value) is not like[0] or value[1:] != rest:
                        return None
                    value, like = value[0], like[1]
                if type(value) is _NDARRAY:
                    if value.dtype is not like[0] or value.shape != like[1] or \
                            value.flags.num & _LAYOUT_FLAGS != like[2]:
                        return None
                elif _likeness(value) != like:
                    return None
        except (TypeError, ValueError):
            return None
        return NATIVE

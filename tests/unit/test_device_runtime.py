"""The device runtime without a GPU and without the simulator: the memory pools
(hpccoll.runtime.pool), and what hpccoll.runtime.device asks of Numba's CUDA layer, shown with
a stand-in for it (the simulator ignores streams, warnings and the disk cache)."""

from __future__ import annotations

import gc
import sys
import warnings

import numpy as np
import pytest

from hpccoll.runtime import device, pool


class Recorder:
    """A stand-in numba.cuda: records what hpccoll asks of it."""

    def __init__(self):
        self.calls = []
        self.streams = []

    def stream(self):
        made = Stream(self)
        self.streams.append(made)
        return made

    def synchronize(self):
        self.calls.append("device synchronize")

    def event(self, timing=True):
        return Event(self, timing)

    def default_stream(self):
        return Named("default")

    def legacy_default_stream(self):
        return Named("legacy")

    def per_thread_default_stream(self):
        return Named("per-thread")

    def external_stream(self, handle):
        return Named(handle)

    def from_cuda_array_interface(self, found, owner, sync):
        return Array(found.get("stream") or 0, self)

    def jit(self, function=None, **options):
        self.calls.append(("jit", options))
        return Kernel(self) if function is not None else lambda f: Kernel(self)

    def grid(self, dimensions):
        return 0


class Stream:
    def __init__(self, recorder):
        self.recorder = recorder

    def synchronize(self):
        self.recorder.calls.append(("stream synchronize", self))


class Named:
    """A stream the recorder did not make (a default one, or another library's): its name."""

    def __init__(self, name):
        self.name = name


class Event:
    def __init__(self, recorder, timing):
        self.recorder, self.timing = recorder, timing

    def record(self, stream=0):
        self.recorder.calls.append(("record", getattr(stream, "name", stream), self.timing))

    def wait(self, stream=0):
        self.recorder.calls.append(("wait", stream))

    def synchronize(self):
        self.recorder.calls.append("event synchronize")


class Array:
    """A device array as Numba makes one: bound to a stream, copies default to it."""

    size = 4

    def __init__(self, stream, recorder):
        self.stream, self.recorder = stream, recorder

    def reshape(self, *shape):
        return Array(0, self.recorder)          # Numba's reshape drops the stream

    def __getitem__(self, where):
        self.recorder.calls.append(("slice", where.start, where.stop))
        return Array(self.stream, self.recorder)

    def copy_to_host(self, host, stream=0):
        self.recorder.calls.append(("to host", stream or self.stream))

    def copy_to_device(self, source, stream=0):
        self.recorder.calls.append(("to device", stream or self.stream))


class Kernel:
    """A kernel whose launch configuration warns as numba-cuda's does for small grids."""

    def __init__(self, recorder):
        self.recorder = recorder

    def __getitem__(self, configuration):
        blocks, threads, *on = configuration
        if blocks < 128:
            warnings.warn(f"Grid size {blocks} will likely result in GPU under-utilization "
                          "due to low occupancy.")
        return lambda *arguments: self.recorder.calls.append(("launch", *on))


@pytest.fixture
def cuda(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(device, "cuda", recorder)
    monkeypatch.setattr(device, "simulated", lambda: False)
    monkeypatch.setattr(device, "current_device", lambda: 0)
    device._stream.cache_clear()
    device._event.cache_clear()
    yield recorder
    device._stream.cache_clear()
    device._event.cache_clear()


class Tensor:
    """A CUDA tensor as PyTorch's: requires grad, so its interface raises RuntimeError;
    ``detach()`` gives the same memory with the interface."""

    def __init__(self, found):
        self.found = found

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    def detach(self):
        return Detached(self.found)


class Detached:
    def __init__(self, found):
        self.__cuda_array_interface__ = found


INTERFACE = {"shape": (4,), "typestr": "<f4", "strides": None, "version": 3,
             "data": (4096, True), "stream": 7}


def test_adapted_arrays_are_bound_to_the_default_stream_not_the_producers(cuda):
    array = device.as_device(Detached(INTERFACE))
    assert array.stream == 0
    assert INTERFACE["stream"] == 7                         # the user's dict is not changed


def test_copies_and_kernels_run_on_hpccolls_stream_and_wait_for_it_alone(cuda):
    array = device.as_device(Detached(INTERFACE))
    device.to_host(array, np.empty(4, np.float32))
    device.to_device(np.zeros(4, np.float32), array)
    device.copy(array, array)
    device._launch(Kernel(cuda), 4, array)
    own = cuda.streams
    assert len(own) == 1                                    # one stream, made once
    assert cuda.calls == [("to host", own[0]), ("stream synchronize", own[0]),
                          ("to device", own[0]), ("stream synchronize", own[0]),
                          ("to device", own[0]), ("stream synchronize", own[0]),
                          ("launch", own[0]), ("stream synchronize", own[0])]


def test_staging_copies_only_the_regions_asked_and_waits_once(cuda):
    array = device.as_device(Detached(INTERFACE))
    device.to_host(array, np.empty(4, np.float32), ((0, 1), (2, 0), (3, 1)))
    device.to_device(np.empty(4, np.float32), array, ())
    own = cuda.streams[0]
    assert cuda.calls == [("slice", 0, 1), ("to host", own), ("slice", 3, 4),
                          ("to host", own), ("stream synchronize", own)]


class TorchTensor(Detached):
    """A PyTorch CUDA tensor as hpccoll sees one: an interface without a stream key (its
    producer's stream is PyTorch's current stream on its device)."""

    __module__ = "torch"
    device = "cuda:0"


def test_a_call_waits_for_its_producers_streams_by_events_never_the_whole_device(
        cuda, monkeypatch):
    """The interface's stream (a handle, the legacy and per-thread default streams, None:
    nothing to wait for), PyTorch's current stream, a Numba array's own stream, the legacy
    default stream where an interface says nothing: an untimed event recorded on each (once
    per stream), waited for by hpccoll's stream, or by the host where MPI reads the memory."""
    class Torch:
        class cuda:
            @staticmethod
            def current_stream(where):
                assert where == "cuda:0"
                return type("Stream", (), {"cuda_stream": 0xbeef})()
    monkeypatch.setitem(sys.modules, "torch", Torch)
    silent = {k: v for k, v in INTERFACE.items() if k != "stream"}
    arrays = [device.as_device(Detached(INTERFACE)), device.as_device(Detached(INTERFACE)),
              device.as_device(Detached({**INTERFACE, "stream": device.LEGACY})),
              device.as_device(Detached({**INTERFACE, "stream": device.PER_THREAD})),
              device.as_device(Detached({**INTERFACE, "stream": None})),
              device.as_device(TorchTensor(silent)), device.as_device(Detached(silent)),
              None]
    assert [device.producer(a) for a in arrays[:-1]] == [7, 7, 1, 2, None, 0xbeef, 1]
    device.wait_for_producers(arrays, host=False)
    own = cuda.streams[0]
    assert cuda.calls == [("record", 7, False), ("wait", own),
                          ("record", "legacy", False), ("wait", own),
                          ("record", "per-thread", False), ("wait", own),
                          ("record", 0xbeef, False), ("wait", own)]
    del cuda.calls[:]
    numba_array = Array(Named("theirs"), cuda)              # a Numba array on its stream
    device.wait_for_producers([numba_array, Array(0, cuda)], host=True)
    assert cuda.calls == [("record", "theirs", False), "event synchronize",
                          ("record", "default", False), "event synchronize"]


def test_the_buffers_mpis_own_call_takes_are_waited_for_on_their_producers_streams(
        cuda, monkeypatch):
    """hpccoll.Comm's hand-over to MPI's own collective: the user's buffers as they are (not
    adapted) name their producers' streams as adapted ones do -- the interface's stream key,
    PyTorch's current stream, the legacy default stream where an interface says nothing or
    the object exports only DLPack -- and the host waits on an event recorded on each."""
    class Torch:
        class cuda:
            @staticmethod
            def current_stream(where):
                return type("Stream", (), {"cuda_stream": 0xbeef})()
    monkeypatch.setitem(sys.modules, "torch", Torch)

    class DLPackOnly:
        def __dlpack_device__(self):
            return (2, 0)
    silent = {k: v for k, v in INTERFACE.items() if k != "stream"}
    given = [Detached(INTERFACE), TorchTensor(silent), Detached(silent), DLPackOnly(),
             Detached({**INTERFACE, "stream": None})]
    assert [device.buffer_producer(b) for b in given] == [7, 0xbeef, 1, 1, None]
    device.wait_for_producers(given, host=True, of=device.buffer_producer)
    assert cuda.calls == [("record", 7, False), "event synchronize",
                          ("record", 0xbeef, False), "event synchronize",
                          ("record", "legacy", False), "event synchronize"]


def test_hpccolls_launches_do_not_warn_of_low_occupancy_and_leave_the_filters(cuda):
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        device._launch(Kernel(cuda), 300, None)
        assert caught == []
        Kernel(cuda)[2, 150]                                # the user's own launches warn
        assert len(caught) == 1
    assert warnings.filters == before


def test_device_kernels_are_cached_on_disk(cuda, monkeypatch):
    monkeypatch.setattr(device, "_device_combine", lambda: None)   # (no CUDA target here)
    device._pairwise.cache_clear()
    device._mover.cache_clear()
    try:
        device._pairwise("sum")
        device._mover()
    finally:
        device._pairwise.cache_clear()
        device._mover.cache_clear()
    assert cuda.calls == [("jit", {"cache": True}), ("jit", {"cache": True})]


def test_a_tensor_that_requires_grad_is_read_through_its_detached_view():
    tensor = Tensor(INTERFACE)
    assert device.cuda_interface(tensor) is INTERFACE
    assert device.is_device(tensor)
    assert device.read_only(tensor)
    assert device.cuda_interface(object()) is None


def test_the_device_of_memory_is_the_drivers_answer_for_its_address(monkeypatch):
    class Driver:
        def cuPointerGetAttribute(self, ordinal, attribute, at):
            assert attribute == device.POINTER_DEVICE_ORDINAL
            if at.value != 4096:
                return 1                                     # CUDA_ERROR_INVALID_VALUE
            ordinal._obj.value = 3
            return 0
    monkeypatch.setattr(device, "simulated", lambda: False)
    monkeypatch.setattr(device, "_libcuda", lambda: Driver())
    monkeypatch.setattr(device, "current_device", lambda: 0)
    assert device.device_id(Detached(INTERFACE)) == 3
    elsewhere = {**INTERFACE, "data": (8192, False)}
    assert device.device_id(Detached(elsewhere)) == 0       # unknown to the driver: current
    assert device.device_id(Detached({**INTERFACE, "data": (0, False)})) == 0

    class NumbaArray:
        """A Numba array whose DLPack is not its memory's device (the simulator's arrays
        forward ``__dlpack_device__`` to their host memory: CPU, device 0)."""
        def __dlpack_device__(self):
            return (1, 0)
    monkeypatch.setattr(device, "is_numba_array", lambda buf: isinstance(buf, NumbaArray))
    monkeypatch.setattr(device, "interface", lambda array: INTERFACE)
    assert device.device_id(NumbaArray()) == 3


def host_pool(cap=pool.CAP):
    made = []

    def allocate(nbytes):
        made.append(nbytes)
        return np.empty(nbytes, np.uint8)
    return pool.Pool(allocate, lambda block: block.ctypes.data, pool.host_view,
                     lambda count, dtype: np.empty(count, dtype), cap), made


def test_size_classes_waste_at_most_a_quarter():
    assert pool.size_class(1) == pool.size_class(512) == 512
    assert pool.size_class(513) == 640 and pool.size_class(1024) == 1024
    assert pool.size_class(1025) == 1280 and pool.size_class(3 << 20) == 3 << 20
    for nbytes in range(513, 70000, 97):
        block = pool.size_class(nbytes)
        assert nbytes <= block < 1.25 * nbytes + 1, nbytes


def test_a_pool_reuses_a_block_once_every_view_of_it_is_gone():
    memory, made = host_pool()
    first = memory.take(1000, np.float64)
    view = first[10:20]
    address = first.ctypes.data
    del first
    gc.collect()
    second = memory.take(1000, np.float64)                 # the view still holds the first
    assert second.ctypes.data != address and len(made) == 2
    del view, second
    gc.collect()
    third = memory.take(990, np.float64)                   # same size class
    assert len(made) == 2 and memory.reuses == 1 and memory.allocations == 2
    third[:] = 1.5
    assert np.all(third == 1.5) and third.dtype == np.float64 and third.size == 990


def test_a_pool_keeps_free_blocks_up_to_its_cap_and_asks_nothing_for_no_elements():
    memory, made = host_pool(cap=3000)
    arrays = [memory.take(1024, np.uint8) for _ in range(4)]
    del arrays
    gc.collect()
    assert memory.free_bytes == 2048                       # two blocks of 1 KiB kept
    empty = memory.take(0, np.float32)
    assert empty.size == 0 and empty.dtype == np.float32 and len(made) == 4
    memory.clear()
    assert memory.free_bytes == 0

"""The request objects a started collective returns: :class:`Request` (non-blocking),
:class:`PersistentRequest` (start/wait many times) and :class:`NativeOperation`, the MPI
library's own non-blocking collective under the same test/wait and deadline as the
scheduled algorithms' operations."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from mpi4py import MPI

from .runtime.progress import deadline_from, wait_requests

if TYPE_CHECKING:
    from .api import Prepared


class Request:
    """A started collective: ``test()`` makes progress without blocking, ``wait()`` completes."""

    def __init__(self, operation: Any):
        self._operation = operation

    def test(self) -> bool:
        return self._operation.test()

    def wait(self) -> None:
        self._operation.wait()


class PersistentRequest(Request):
    """A collective planned once and run many times on the same buffers: ``start()`` then
    ``wait()`` (or ``test()``), again and again; ``free()`` releases its MPI requests."""

    def __init__(self, prepared: "Prepared", sendbuf: Any, recvbuf: Any):
        super().__init__(None)
        self._prepared, self._send, self._recv = prepared, sendbuf, recvbuf
        self._tags = prepared.ctx.next_tags()

    def start(self) -> None:
        if self._operation is not None and not self._operation.done:
            raise RuntimeError("persistent collective started again before it completed")
        self._operation = self._prepared.start(self._send, self._recv, self._tags, cache=True)

    def test(self) -> bool:
        return self._operation is None or self._operation.test()

    def wait(self) -> None:
        if self._operation is not None:
            self._operation.wait()

    def free(self) -> None:
        self._prepared.release(self._tags)


class NativeOperation:
    """The MPI library's own non-blocking collective, with the same test/wait and deadline."""

    def __init__(self, label: str, request: MPI.Request, on_done: Callable[[], None]):
        self.label, self.request, self.on_done = label, request, on_done
        self.done = False
        self.deadline = deadline_from(time.monotonic())

    def test(self) -> bool:
        if not self.done and self.request.Test():
            self.done = True
            self.on_done()
        elif not self.done and self.deadline is not None and time.monotonic() > self.deadline:
            self.wait()
        return self.done

    def wait(self) -> None:
        if not self.done:
            wait_requests([self.request], self.label, deadline=self.deadline)
            self.done = True
            self.on_done()

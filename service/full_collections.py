"""No full garbage collection while a large request body is alive (issue 39), and the size of
every request's body, counted as it arrives (``scope[BODY_BYTES]``).

CPython's cyclic collector runs a full (generation 2) collection, one C call that holds the GIL
to the end, whenever enough objects have survived into the oldest generation, and it walks
every reference of every container there. A parsed JSON body is such a heap: 16 MiB
(``POSENC_MAX_BODY_BYTES``) of ``[[],[],...]`` is 5.6 M lists, walked in about 1.5 s on a
2-core machine; 8 M token ids in one list, 55 ms a walk, and a request holds two or three
copies of them (the parsed value, the validated one, the library's). A full collection falls on
whichever allocation crosses the threshold, on whichever thread, so it held ``/healthz`` for
that long while the body was alive.

A JSON body is acyclic: reference counting frees all of it when the request lets it go, and the
collector has nothing to find in it. So while a request whose body is over
:data:`LARGE_BODY_BYTES` is in flight (from the read that crosses it to the last byte of its
answer), :class:`FullCollectionHold` raises the collector's third threshold out of reach; the
young generations are collected as before (their collections see only the objects made since
the last one, a few thousand). When the last such request ends, the thresholds are restored
and the next full collection, which is due by then, finds the bodies already freed.

The cost: a cycle of garbage that survives two young collections while large bodies are in
flight waits for the first moment none is (``docs/deployment.md``, hostile bodies).
"""

from __future__ import annotations

import gc
import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: A request body over this many bytes holds off full collections while its request runs.
LARGE_BODY_BYTES = 1 << 20

#: The scope key of the bytes of the request's body read so far (an int).
BODY_BYTES = "posenc.body_bytes"

#: The third threshold while a hold is on: more young collections than a process makes.
OUT_OF_REACH = 1 << 30


class _Hold:
    """The process-wide count of holds; the first one raises the third threshold, the last one
    puts back what it was."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._saved: tuple[int, int, int] | None = None

    @property
    def count(self) -> int:
        return self._count

    def hold(self) -> None:
        with self._lock:
            self._count += 1
            if self._count == 1:
                self._saved = gc.get_threshold()
                young, middle, _full = self._saved
                gc.set_threshold(young, middle, OUT_OF_REACH)

    def let_go(self) -> None:
        with self._lock:
            self._count -= 1
            if self._count == 0 and self._saved is not None:
                gc.set_threshold(*self._saved)
                self._saved = None


HOLD = _Hold()


class FullCollectionHold:
    """Pure ASGI middleware: counts a request's body as it is read, and once it is over
    ``limit`` bytes holds off full collections until the request's answer is sent (module
    docstring)."""

    def __init__(self, app: ASGIApp, limit: int = LARGE_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[BODY_BYTES] = 0
        held = False

        async def counted() -> Message:
            nonlocal held
            message = await receive()
            if message["type"] == "http.request":
                scope[BODY_BYTES] += len(message.get("body", b""))
                if scope[BODY_BYTES] > self.limit and not held:
                    HOLD.hold()
                    held = True
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            if held:
                HOLD.let_go()


__all__ = ["BODY_BYTES", "HOLD", "LARGE_BODY_BYTES", "OUT_OF_REACH", "FullCollectionHold"]

"""``POSENC_MAX_BODY_BYTES``: a request body over the limit is a 413 before anything parses it.

It also sets ``POSENC_MAX_JSON_CONTAINERS`` for the request, the most arrays and objects its JSON
body may hold as it is parsed (:func:`service.json_slices.container_limit`).

Pure ASGI middleware, inside the bearer auth and outside everything that reads a body (the
replay digest, FastAPI's JSON parsing, the token routes). A ``Content-Length`` over the limit
is answered at once, nothing of the body read; a body without one (``Transfer-Encoding:
chunked``) is counted as it arrives, and the read that crosses the limit ends the request with
the same 413, so at most the limit (plus one network chunk) is ever held.

Every media type is counted the same way: JSON, GGUF (``service.gguf_body`` sits inside this
middleware), and token ids sent as ``application/x-npy`` or ``application/vnd.safetensors``,
whose limit is the smaller of this one and what ``POSENC_MAX_ELEMENTS`` lets a token batch hold
(:func:`binary_body_bytes`). So whatever is sent, and however it is framed, the service holds at
most ``POSENC_MAX_BODY_BYTES`` of it.

Measured before the limit (``python -m bench.big_body``, 2 cores): 200 MB of JSON token ids to
``/v1/position-ids`` took 12-18 s and 4 GiB of memory over the idle process; with the limit it
is a 413 in milliseconds, with no memory to speak of.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posenc.core import codec
from service import json_slices

# Methods whose routes here never read a body: their Content-Length is not a reason to refuse
# (a route answers only the statuses service.statuses declares for it).
_NO_BODY = ("GET", "HEAD", "OPTIONS")

# Token bodies, bounded by POSENC_MAX_ELEMENTS as well (binary_body_bytes).
BINARY_TYPES = (b"application/x-npy", b"application/vnd.safetensors")


def binary_body_bytes(max_elements: int) -> int:
    """The most bytes an npy or safetensors token body can usefully hold: every output has at
    least 2 elements per token (mask and positions), so at most ``max_elements / 2`` tokens,
    each at most 8 bytes in each of 3 tensors, plus the largest header."""
    return 12 * max_elements + codec.MAX_SAFETENSORS_HEADER + 8


class BodyTooLarge(HTTPException):
    """The 413 of a body over ``POSENC_MAX_BODY_BYTES``. An ``HTTPException``, so that a read
    inside FastAPI's body parsing or a route reaches the app's handler as it is. ``note`` says
    more of a limit that is not the body limit alone (a token body's)."""

    def __init__(self, limit: int, received: int, declared: bool, note: str = "") -> None:
        how = "declares" if declared else "sent more than"
        size = received if declared else limit
        super().__init__(
            413,
            detail=f"the request body {how} {size} bytes, over the limit of {limit} bytes "
            f"(POSENC_MAX_BODY_BYTES{note}); send fewer rows per request, or token ids as "
            "application/x-npy",
        )
        self.limit = limit
        self.received = received

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "field": "body", "limit": self.limit}


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class BodyLimitMiddleware:
    """413 for a request body over ``limit`` bytes (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        max_elements: int | None = None,
        max_containers: int = json_slices.MAX_CONTAINERS,
    ) -> None:
        self.app = app
        self.limit = limit
        self.max_elements = max_elements  # npy and safetensors token bodies (binary_body_bytes)
        self.max_containers = max_containers  # of a JSON body, as it is parsed (json_slices)

    def _limit(self, scope: Scope) -> tuple[int, str]:
        """The limit of this request's body, and what to add to its 413's words."""
        content_type = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        if content_type not in BINARY_TYPES or self.max_elements is None:
            return self.limit, ""
        most = binary_body_bytes(self.max_elements)
        note = (
            f"; a binary token body holds at most {self.max_elements // 2} tokens within the "
            f"output limit of {self.max_elements} elements, POSENC_MAX_ELEMENTS: at most "
            f"{most} bytes"
        )
        return min(self.limit, most), note

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in _NO_BODY:
            await self.app(scope, receive, send)
            return
        limit, note = self._limit(scope)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(BodyTooLarge(limit, int(declared), True, note), scope, send)
            return

        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit, received, False, note)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            with json_slices.container_limit(self.max_containers):
                await self.app(scope, counted, watched)
        except BodyTooLarge as exc:  # read outside FastAPI's handlers (the replay digest)
            if started:
                raise
            await self._refuse(exc, scope, send)

    async def _refuse(self, exc: BodyTooLarge, scope: Scope, send: Send) -> None:
        # The rest of the body is not read: the connection closes after the answer.
        response = JSONResponse(exc.body(), status_code=413, headers={"Connection": "close"})
        await response(scope, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}

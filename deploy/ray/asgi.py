"""One whole HTTP exchange with an ASGI app, in process, as plain values that Ray can carry.

:class:`HttpCall` is a request read whole (method, path, query, headers, body);
:func:`call_app` runs it through the app with a synthetic ``http`` scope and collects the
response's status, raw headers and every body chunk, so the bytes are exactly those the app sent
(uvicorn would send the same chunks). :class:`Lifespan` runs the app's ASGI lifespan (start-up
before the first call, shutdown at the end), as uvicorn does. Nothing here imports Ray.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

Headers = list[tuple[bytes, bytes]]

logger = logging.getLogger("ray.serve")

# uvicorn's answer when an app raises before it starts its response
_PLAIN_500 = ((b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21"))


@dataclass(frozen=True)
class HttpCall:
    """A request read whole: ``query`` is the raw query string, ``headers`` the raw pairs."""

    method: str
    path: str
    query: bytes = b""
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] | None = None


@dataclass(frozen=True)
class HttpAnswer:
    """The app's answer: status, raw header pairs as it sent them, and the whole body."""

    status: int
    headers: Headers
    body: bytes


async def call_app(app: Any, call: HttpCall, state: dict[str, Any] | None = None) -> HttpAnswer:
    """``call`` through the ASGI ``app``; the answer whole (every ``http.response.body`` chunk
    joined). ``state`` is the lifespan state the app's start-up left (ASGI ``scope["state"]``)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode("latin-1"),
        "query_string": call.query,
        "root_path": "",
        "headers": list(call.headers),
        "client": call.client,
        "server": None,
        "state": dict(state or {}),
    }
    sent_body = False
    disconnected = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await disconnected.wait()  # never set: the caller waits for the whole answer
        return {"type": "http.disconnect"}

    status = 500
    headers: Headers = []
    chunks: list[bytes] = []
    complete = False

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers, complete
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            complete = not message.get("more_body", False)

    try:
        await app(scope, receive, send)
    except (
        Exception
    ):  # what uvicorn does with an app's exception: logged, a 500 unless the answer was whole
        logger.exception("%s %s: the app raised", call.method, call.path)
        if not complete:  # nothing sent, or a body cut short: never a truncated 200
            return HttpAnswer(500, list(_PLAIN_500), b"Internal Server Error")
    return HttpAnswer(status, headers, b"".join(chunks))


class Lifespan:
    """The ASGI lifespan of ``app``: :meth:`start` sends ``lifespan.startup`` and waits for its
    answer (raising the app's start-up failure), :meth:`stop` sends ``lifespan.shutdown``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        await self.app(scope, self._inbox.get, self._outbox.put)

    async def _exchange(self, event: str) -> None:
        await self._inbox.put({"type": f"lifespan.{event}"})
        assert self._task is not None
        waiting = asyncio.ensure_future(self._outbox.get())
        done, _ = await asyncio.wait({waiting, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            self._task.result()  # the app's own exception, if it raised one
            raise RuntimeError(f"the app's lifespan ended during {event}")
        answer = waiting.result()
        if answer["type"] != f"lifespan.{event}.complete":
            raise RuntimeError(f"{event} failed: {answer.get('message', answer['type'])}")

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        await self._exchange("startup")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            await self._exchange("shutdown")
            await self._task

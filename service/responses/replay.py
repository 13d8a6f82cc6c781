"""Answer a repeated compute request from the body cache without running FastAPI.

A compute endpoint's response is a pure function of the request line, the body and the two
headers that choose the representation (``Accept``, ``Content-Type``): the models, the device
and the version are fixed for the life of the process. So once a request has been answered
with a cached-body 200, the same request (same method, path, query string, body, ``Accept``
and ``Content-Type``) can be answered again by sending that body with the same headers: no
routing, no body validation, no dependency solving. On a cache hit that framework work is
most of what posenc adds to the cost of sending the bytes.

:class:`ReplayMiddleware` sits inside the bearer auth (a refused request never gets here) and
inside the metrics, ``Vary`` and CORS middleware (a replayed response is counted and decorated
like any other). It keeps only an index: a digest of the request → the body-cache key and the
response headers. The body stays in the :class:`~service.cache.ByteLRU` (one copy, one byte
budget); when the cache has evicted it, the request takes the normal path and the entry is
dropped. Conditional requests (``If-None-Match``) always take the normal path (304 / 412).
Replays are counted as ``posenc_cache_hits_total{cache="replay"}`` (and a body-cache hit);
replayable requests that took the normal path as ``posenc_cache_misses_total{cache="replay"}``.

A route marks a response as replayable by setting ``scope[REPLAY_SCOPE_KEY]`` to its body-cache
key (:func:`service.responses.respond.respond` does, for 200s whose body is cached).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posenc.core.kinds import REGISTRY

REPLAY_SCOPE_KEY = "posenc.replay_body_key"
HIT_TIMING = b'compute;dur=0.000, encode;dur=0.000, cache;desc="hit"'

# Bodies larger than this are not buffered for a digest: such requests (huge token batches)
# are dominated by their own parsing, not by the framework, and take the normal path.
MAX_REPLAY_BODY = 1 << 20
MAX_ENTRIES = 4096


@dataclass(frozen=True)
class _Entry:
    body_key: Hashable
    status: int
    headers: list[tuple[bytes, bytes]]  # without Server-Timing (a hit gets its own)
    route: Any  # scope["route"], so metrics label the replay with the route template


class ReplayIndex:
    """A bounded LRU map from request digest to :class:`_Entry` (thread-safe)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: bytes) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is not None:
                self._entries.move_to_end(digest)
            return entry

    def put(self, digest: bytes, entry: _Entry) -> None:
        with self._lock:
            self._entries[digest] = entry
            self._entries.move_to_end(digest)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def discard(self, digest: bytes) -> None:
        with self._lock:
            self._entries.pop(digest, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def request_digest(scope: Scope, body: bytes) -> bytes | None:
    """Digest of everything a compute response depends on; None for requests never replayed."""
    method = scope.get("method")
    if method not in ("GET", "POST"):
        return None
    # Every Accept and Content-Type header, in order, with its name: a request that repeats one
    # is another request (the route reads the first; a digest of only the last would mix them).
    chosen: list[bytes] = []
    for name, value in scope.get("headers", []):
        if name == b"if-none-match":
            return None
        if name in (b"accept", b"content-type"):
            chosen += (name, value)
    h = hashlib.blake2b(digest_size=16)
    for part in (
        method.encode(),
        scope.get("path", "").encode(),
        scope.get("query_string", b""),
        *chosen,
        body,
    ):  # each part length-prefixed: no two requests give the same byte stream
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


class ReplayMiddleware:
    """Pure ASGI middleware: replay cached compute responses for identical requests.

    Args:
        app: the inner ASGI app.
        fastapi_app: the application whose ``state.posenc`` (a ``ServiceState``) holds the
            body cache and the metrics; read per request, since the lifespan sets it.
    """

    def __init__(self, app: ASGIApp, fastapi_app: Any) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.index = ReplayIndex()
        # the compute endpoints: every kind registered when the app is built
        self.paths = frozenset(kind.path for kind in REGISTRY.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(self.fastapi_app.state, "posenc", None)
        if (
            scope["type"] != "http"
            or state is None
            or not state.ready
            or scope.get("path", "") not in self.paths
            or _declared_length(scope) > MAX_REPLAY_BODY
        ):
            # (a body declared too large to replay goes straight on: the route may refuse it
            # from its headers, 413, without anything of it being read here first)
            await self.app(scope, receive, send)
            return

        body, complete, receive = await _buffer_body(receive)
        digest = request_digest(scope, body) if complete else None
        if digest is not None:
            entry = self.index.get(digest)
            if entry is not None:
                encoded = state.cache.get(entry.body_key)
                if encoded is not None:
                    state.metrics.record_cache("replay", True)
                    state.metrics.record_cache("body", True)
                    if entry.route is not None:
                        scope["route"] = entry.route
                    await _send_replay(send, entry, encoded.body)
                    return
                self.index.discard(digest)
            state.metrics.record_cache("replay", False)

        status = 0
        headers: list[tuple[bytes, bytes]] = []

        async def send_and_watch(message: Message) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
            await send(message)

        await self.app(scope, receive, send_and_watch)
        body_key = scope.get(REPLAY_SCOPE_KEY)
        if digest is not None and body_key is not None and status == 200:
            kept = [(n, v) for n, v in headers if n.lower() != b"server-timing"]
            self.index.put(digest, _Entry(body_key, status, kept, scope.get("route")))


def _declared_length(scope: Scope) -> int:
    """The request's ``Content-Length`` (0 when absent or not a number)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def _buffer_body(receive: Receive) -> tuple[bytes, bool, Receive]:
    """Read the request body, up to MAX_REPLAY_BODY bytes.

    Returns the bytes read, whether that is the whole body, and a ``receive`` for the inner
    app that gives the same messages again and then continues with the original one.
    """
    chunks: list[bytes] = []
    size = 0
    messages: list[Message] = []
    more = True
    while more and size <= MAX_REPLAY_BODY:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":  # a disconnect: let the app see it
            return b"", False, _replaying(messages, receive)
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)
    body = b"".join(chunks)
    if more:
        return body, False, _replaying(messages, receive)
    whole = {"type": "http.request", "body": body, "more_body": False}
    return body, True, _replaying([whole], receive)


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay_receive() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay_receive


async def _send_replay(send: Send, entry: _Entry, body: bytes | memoryview) -> None:
    headers = [*entry.headers, (b"server-timing", HIT_TIMING)]
    await send({"type": "http.response.start", "status": entry.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

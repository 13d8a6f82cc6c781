"""``X-Request-ID`` on every response, and the access log that records it.

:class:`RequestIdMiddleware` is the outermost middleware of the app, so it sees every response
the app sends: 401s of the bearer auth, 404s, 413s, 422s, replayed cache hits, and the 500 of
an exception that escaped every handler (which Starlette's outermost ``ServerErrorMiddleware``
would otherwise send without the header).

The id is the caller's ``X-Request-ID`` when that is sane (1 to 128 characters of
``A-Z a-z 0-9 - _ . : / + = @``), else a generated one (32 random hex digits). It is
available to code serving the request as :data:`request_id_var` (a context variable, so also
in the thread pool), which :class:`service.observability.logs.RequestIdFilter` puts on every log record.

With ``access_log=True`` the middleware writes one record per request to the logger
``service.access`` (INFO) with ``request_id``, ``method``, ``route`` (the route template, or
``unmatched``), ``path``, ``status``, ``duration_ms`` (arrival to the last byte sent),
``bytes`` (of the body sent), ``cache`` (``hit``/``miss`` from ``Server-Timing``, else
None) and where the time went (:mod:`service.observability.timing`): ``queue_ms``,
``compute_ms`` and ``encode_ms`` as the response code recorded them, and ``send_ms`` from the
response's first message to its last; ``POSENC_LOG_FORMAT=json`` writes it as one JSON object.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING

from service.observability import timing
from service.observability.metrics import UNMATCHED

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADER", "PATTERN", "RequestIdMiddleware", "request_id_var", "sane_request_id"]

HEADER = "X-Request-ID"
#: A caller's id that is kept (and so every id the service sends): the whole value matches.
PATTERN = r"[A-Za-z0-9\-_.:/+=@]{1,128}"
_HEADER_KEY = b"x-request-id"
_SANE = re.compile(PATTERN.encode("ascii"))
_CACHE = re.compile(rb'cache;desc="?([a-z]+)')

request_id_var: ContextVar[str | None] = ContextVar("posenc_request_id", default=None)
access_logger = logging.getLogger("service.access")


class _Ids:
    """Random 128-bit ids as 32 hex digits, drawn from a generator seeded once per process from
    ``os.urandom`` (``uuid.uuid4`` reads ``os.urandom`` for every id: 0.16 ms a call on the
    virtual machines posenc is measured on, a tenth of a small request's server time). Request
    ids need to be unique, not unpredictable; a forked child reseeds, so two workers never share
    a sequence."""

    def __init__(self) -> None:
        self._pid = -1
        self._rng = random.Random()

    def new(self) -> str:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._rng.seed(os.urandom(32))
        return f"{self._rng.getrandbits(128):032x}"


_ids = _Ids()


def sane_request_id(value: bytes | None) -> str | None:
    """``value`` as a string when it is a usable request id, else None."""
    if value is None or _SANE.fullmatch(value) is None:
        return None
    return value.decode("ascii")


def _route(scope: Scope) -> str:
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class RequestIdMiddleware:
    """Pure ASGI middleware: ``X-Request-ID`` on every HTTP response, plus the access log.

    Args:
        app: the inner ASGI app.
        access_log: write one ``service.access`` record per request.
    """

    def __init__(self, app: ASGIApp, access_log: bool = True) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers", []):
            if name == _HEADER_KEY:
                given = value
                break
        request_id = sane_request_id(given) or _ids.new()
        token = request_id_var.set(request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        header = (_HEADER_KEY, request_id.encode("ascii"))
        start = time.perf_counter()
        status = 0
        sent = 0
        cache: str | None = None
        started = False
        sending = 0.0  # when the response started: send_ms runs from here to the last byte

        async def send_with_id(message: Message) -> None:
            nonlocal status, sent, cache, started, sending
            if message["type"] == "http.response.start":
                started = True
                sending = time.perf_counter()
                status = int(message["status"])
                headers = [
                    (n, v) for n, v in message.get("headers", []) if n.lower() != _HEADER_KEY
                ]
                for name, value in headers:
                    if name.lower() == b"server-timing":
                        found = _CACHE.search(value)
                        cache = found.group(1).decode() if found else None
                headers.append(header)
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        failed = False
        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            failed = True
            if not started:
                # Starlette's ServerErrorMiddleware (outside every user middleware) logs it and
                # sees that a response has started; the body is the one service.errors gives.
                body = (
                    b'{"detail":"internal error ('
                    + type(exc).__name__.encode()
                    + b'); the server log has the details"}'
                )
                await send_with_id(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send_with_id({"type": "http.response.body", "body": body})
            raise
        finally:
            if self.access_log:
                self._log(scope, request_id, status or 500, sent, cache, start, sending)
            if not failed:
                # After an exception the id stays set: ServerErrorMiddleware logs it next, in
                # this request's own task (and context), so its record carries the id too.
                request_id_var.reset(token)

    @staticmethod
    def _log(
        scope: Scope,
        request_id: str,
        status: int,
        sent: int,
        cache: str | None,
        start: float,
        sending: float,
    ) -> None:
        if not access_logger.isEnabledFor(logging.INFO):
            return
        end = time.perf_counter()
        split = {f"{name}_ms": round(s * 1000, 3) for name, s in timing.phases(scope).items()}
        if sending:
            split["send_ms"] = round((end - sending) * 1000, 3)
        method = scope.get("method", "GET")
        path = scope.get("path", "")
        query = scope.get("query_string", b"")
        target = path + ("?" + query.decode("latin-1") if query else "")
        duration_ms = round((end - start) * 1000, 3)
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else "-"
        # uvicorn's access line, then what it lacks
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d %d B %.3f ms cache=%s id=%s%s',
            where,
            method,
            target,
            scope.get("http_version", "1.1"),
            status,
            sent,
            duration_ms,
            cache or "-",
            request_id,
            "".join(f" {name.removesuffix('_ms')}={ms:.3f}" for name, ms in split.items()),
            extra={
                **split,
                "request_id": request_id,
                "method": method,
                "route": _route(scope),
                "path": path,
                "status": status,
                "duration_ms": duration_ms,
                "bytes": sent,
                "cache": cache,
                "client": where,
            },
        )

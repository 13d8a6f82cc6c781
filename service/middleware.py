"""The service's own ASGI middleware (the app factory, ``service.app``, stacks them).

- :class:`BearerAuthMiddleware`: ``POSENC_API_KEY`` — a 401 with ``WWW-Authenticate: Bearer``
  for a ``/v1/`` request without the right token (constant-time comparison), before routing.
- :class:`ResponseHeadersMiddleware`: ``Vary: Accept`` on every response, and a
  ``Server-Timing`` where the route set none.
- :func:`admin_refusal`: an operator's door (``POST /v1/models/reload``) takes
  ``POSENC_ADMIN_KEY`` or ``POSENC_API_KEY``; with neither set it is a 403 unless
  ``POSENC_ALLOW_RELOAD`` is on.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable, Sequence

from fastapi.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ADMIN_PATHS", "BearerAuthMiddleware", "ResponseHeadersMiddleware", "admin_refusal"]

#: Operator's doors: they also take ``POSENC_ADMIN_KEY``, and are shut without any key.
ADMIN_PATHS = frozenset({"/v1/models/reload"})


def _bearer(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    for name, value in headers:
        if name == b"authorization":
            return bytes(value)
    return b""


def _token_is(header: bytes, *keys: str | None) -> bool:
    """Whether ``Authorization: Bearer <token>`` names one of ``keys`` (constant time)."""
    scheme, _, token = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    given = token.strip()
    return any(k is not None and hmac.compare_digest(given, k.encode()) for k in keys)


def admin_refusal(
    headers: Iterable[tuple[bytes, bytes]],
    *,
    api_key: str | None,
    admin_key: str | None,
    allow: bool,
) -> JSONResponse | None:
    """The 401 or 403 of a request to an operator's door, or None when it may pass.

    With ``POSENC_ADMIN_KEY`` set, the bearer token must be it or ``POSENC_API_KEY``; with
    only the API key set, :class:`BearerAuthMiddleware` has checked it; with neither, the
    door is shut (403) unless ``POSENC_ALLOW_RELOAD`` (``allow``) opens it."""
    if admin_key is None and api_key is None:
        if allow:
            return None
        return JSONResponse(
            {
                "detail": "reloading the models is an operator's action: set POSENC_ADMIN_KEY "
                "(or POSENC_API_KEY) and send it as 'Authorization: Bearer <key>', or set "
                "POSENC_ALLOW_RELOAD=1 to allow it without a key; SIGHUP reloads too",
                "field": "Authorization",
            },
            status_code=403,
        )
    header = _bearer(headers)
    if admin_key is None or _token_is(header, admin_key, api_key):
        return None
    return JSONResponse(
        {
            "detail": "Authorization: this endpoint needs the header "
            "'Authorization: Bearer <POSENC_ADMIN_KEY>' (or POSENC_API_KEY)"
            + (" (the token given is not valid)" if header else ""),
            "field": "Authorization",
        },
        status_code=401,
        headers={
            "WWW-Authenticate": 'Bearer realm="posenc"'
            + (', error="invalid_token"' if header else "")
        },
    )


class BearerAuthMiddleware:
    """401 with ``WWW-Authenticate: Bearer`` for ``/v1/`` requests without the right token
    (``admin_key`` is also taken on :data:`ADMIN_PATHS`)."""

    def __init__(
        self,
        app: ASGIApp,
        api_key: str,
        routes: Sequence[BaseRoute] = (),
        admin_key: str | None = None,
    ) -> None:
        self.app = app
        self.api_key = api_key.encode()
        self.admin_key = admin_key
        self.routes = routes  # the app's routes, to label a refused request for the metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"  # CORS preflight carries no credentials
            or not (path == "/v1" or path.startswith("/v1/"))
        ):
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key):
            await self.app(scope, receive, send)
            return
        if path in ADMIN_PATHS and _token_is(header, self.admin_key):
            await self.app(scope, receive, send)
            return
        _label_route(scope, self.routes)
        error = ', error="invalid_token"' if header else ""
        response = JSONResponse(
            {
                "detail": "Authorization: this endpoint needs the header "
                "'Authorization: Bearer <POSENC_API_KEY>'"
                + (" (the token given is not valid)" if header else ""),
                "field": "Authorization",
            },
            status_code=401,
            headers={"WWW-Authenticate": f'Bearer realm="posenc"{error}'},
        )
        await response(scope, receive, send)


def _label_route(scope: Scope, routes: Sequence[BaseRoute]) -> None:
    """Set ``scope["route"]`` for a request refused before routing, so metrics name it."""
    for route in routes:
        if route.matches(scope)[0] == Match.FULL:
            scope["route"] = route
            return


class ResponseHeadersMiddleware:
    """``Vary: Accept`` on every response, and ``Server-Timing`` where a route set none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if b"vary" not in names:
                    headers.append((b"vary", b"Accept"))
                else:
                    headers = [
                        (
                            n,
                            v
                            if n.lower() != b"vary" or b"accept" in v.lower()
                            else v + b", Accept",
                        )
                        for n, v in headers
                    ]
                if b"server-timing" not in names:
                    total = (time.perf_counter() - start) * 1000
                    headers.append((b"server-timing", f"app;dur={total:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

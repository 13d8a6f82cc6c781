"""Errors as RFC 9457 problem details (``application/problem+json``) for clients that ask.

A request whose ``Accept`` names ``application/problem+json`` gets each 4xx/5xx JSON body
rewritten as a problem: the members the service always sends (``detail``, and ``field`` where
there is one, and any other) stay as they are, and ``type`` (``about:blank``), ``title`` (the
status's reason phrase) and ``status`` are added; the media type is ``application/problem+json``.
Other requests get the plain JSON bodies as before. Error bodies are small, so the body is read
whole before it is rewritten; a streamed success passes through untouched.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROBLEM_JSON = "application/problem+json"


def wants_problem(scope: Scope) -> bool:
    """Whether the request's ``Accept`` names ``application/problem+json``."""
    for name, value in scope.get("headers", ()):
        if name == b"accept" and PROBLEM_JSON.encode() in value.lower():
            return True
    return False


def as_problem(body: Any, status: int) -> dict[str, Any]:
    """The RFC 9457 form of an error body: its members kept, ``type``/``title``/``status``
    added."""
    members = body if isinstance(body, dict) else {"detail": body}
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = f"HTTP {status}"
    return {"type": "about:blank", "title": title, "status": status, **members}


class ProblemJsonMiddleware:
    """Rewrites JSON error bodies as ``application/problem+json`` when the client asks."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not wants_problem(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def send_problem(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                content_type = headers.get(b"content-type", b"")
                if message["status"] >= 400 and content_type.startswith(b"application/json"):
                    start = message  # held until the whole body is here
                    return
            elif start is not None and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await _send_rewritten(send, start, b"".join(chunks))
                return
            await send(message)

        await self.app(scope, receive, send_problem)


async def _send_rewritten(send: Send, start: Message, body: bytes) -> None:
    try:
        problem = as_problem(json.loads(body), start["status"])
        body = json.dumps(problem, separators=(",", ":")).encode()
        media = PROBLEM_JSON.encode()
    except ValueError:
        media = b"application/json"
    headers = [
        (n, v) for n, v in start.get("headers", []) if n not in (b"content-type", b"content-length")
    ]
    headers += [(b"content-type", media), (b"content-length", str(len(body)).encode())]
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

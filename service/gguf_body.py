"""GGUF bodies: ``application/octet-stream`` on ``/v1/configs/positions`` and the RoPE table.

A GGUF file (or its head, up to the end of its key/value section) sent as the body, with the
JSON fields in the query string, is read with the ``llama.cpp`` engine
(:mod:`posenc.readers.gguf.metadata`):

- ``POST /v1/configs/positions``: the answer says how llama.cpp reads the model's positions
  (``max_model_len`` in the query is llama.cpp's context size);
- ``POST /v1/encodings/rope``: the request becomes the endpoint's GET twin with the query
  string plus ``head_dim``, ``engine=llama.cpp`` and ``llamacpp`` (ggml_rope_ext's arguments
  read from the file), so the table, its formats and its streaming are the endpoint's own.

The whole body counts against ``POSENC_MAX_BODY_BYTES`` as any other (the middleware sits
inside :class:`service.body_limit.BodyLimitMiddleware`: a larger one, chunked or not, is a 413
once the limit is crossed). Of it, only the first ``POSENC_MAX_GGUF_HEAD_BYTES`` (default
:data:`HEAD_BYTES`, never more than the body limit) are parsed, the rest read and dropped: a
model's head (its key/value section and tensor directory) is far smaller. The parse runs on a
worker thread, counting key/value pairs, array items, nesting and tensor records against
:class:`posenc.readers.gguf.metadata.GgufBudget`, so no body holds the event loop or costs more than a bounded
amount of CPU. A body that is not GGUF, or whose key/value section is cut short, is a 422
saying how many bytes were read and what is missing; one over a budget a 422 naming it.
"""

from __future__ import annotations

import functools
import json
from typing import Any
from urllib.parse import parse_qsl, urlencode

from anyio import to_thread
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from posenc.core.errors import InvalidArgument
from posenc.engines.llama_cpp import ENGINE as LLAMA_CPP
from posenc.readers.gguf.metadata import gguf_summary, llamacpp_rope_from_gguf, read_gguf_head
from service.errors import posenc_error_body

#: The default bytes of a GGUF body that are parsed (its head: header, key/value pairs, tensor
#: records): ``POSENC_MAX_GGUF_HEAD_BYTES``. Llama 3 8B's head is about 8 MB.
HEAD_BYTES = 16 * 1024 * 1024
GGUF_MEDIA_TYPE = b"application/octet-stream"
POSITIONS_PATH = "/v1/configs/positions"
#: Table endpoints that take a GGUF body.
TABLE_PATHS = frozenset({"/v1/encodings/rope"})


def _content_type(scope: Scope) -> bytes:
    for key, value in scope.get("headers", ()):
        if key == b"content-type":
            return bytes(value).split(b";")[0].strip().lower()
    return b""


async def _head(receive: Receive, limit: int) -> bytes:
    """The body's first ``limit`` bytes, the rest read and dropped (the body limit outside
    bounds how much that is)."""
    kept = bytearray()
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
        more = bool(message.get("more_body"))
    return bytes(kept)


def _int(query: dict[str, str], name: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise InvalidArgument(
            f"{name} must be an integer, got {query[name]!r}", field=name
        ) from None


class GgufBodyMiddleware:
    """Reads GGUF bodies on the endpoints that take them (see the module docstring)."""

    def __init__(self, app: ASGIApp, head_bytes: int = HEAD_BYTES) -> None:
        self.app = app
        self.head_bytes = head_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or (path != POSITIONS_PATH and path not in TABLE_PATHS)
            or _content_type(scope) != GGUF_MEDIA_TYPE
        ):
            await self.app(scope, receive, send)
            return
        data = await _head(receive, self.head_bytes)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        try:  # parsing is CPU work: on a worker thread, never on the event loop
            answer, fields = await to_thread.run_sync(
                functools.partial(_read, data, query, positions=path == POSITIONS_PATH)
            )
            if answer is not None:
                await JSONResponse(answer)(scope, _nothing, send)
                return
        except InvalidArgument as exc:
            await JSONResponse(posenc_error_body(exc), status_code=422)(scope, _nothing, send)
            return
        except (TypeError, ValueError, OverflowError) as exc:  # a key of an unexpected type
            bad = InvalidArgument(
                f"GGUF: a key has a value that cannot be used ({exc})", field="body"
            )
            await JSONResponse(posenc_error_body(bad), status_code=422)(scope, _nothing, send)
            return
        headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
        inner = {
            **scope,
            "method": "GET",
            "query_string": urlencode(fields).encode(),
            "headers": [h for h in headers if h[0] != b"content-length"],
        }
        await self.app(inner, _empty_then(receive), send)


def _read(
    data: bytes, query: dict[str, str], *, positions: bool
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The GGUF's answer to ``/v1/configs/positions`` (``positions``), or the table request's
    GET-twin query: blocking, run on a worker thread."""
    head = read_gguf_head(data)
    rope = llamacpp_rope_from_gguf(head, n_ctx=_int(query, "max_model_len"))
    if positions:
        return gguf_summary(head, rope), {}
    return None, _table_fields(head, rope, query)


def _table_fields(head: Any, rope: Any, query: dict[str, str]) -> dict[str, str]:
    """The GET twin's query: the caller's fields, then what the GGUF gives."""
    given = {k: v for k, v in query.items() if k != "config"}
    if given.get("engine", LLAMA_CPP.name) != LLAMA_CPP.name:
        raise InvalidArgument(
            f"a GGUF body is read with engine llama.cpp, got engine {given['engine']!r}",
            field="engine",
        )
    summary = gguf_summary(head, rope)
    llamacpp = {k: v for k, v in rope.to_dict().items() if v is not None}
    given.setdefault("head_dim", str(summary["head_dim"] or rope.n_dims))
    given.update(engine=LLAMA_CPP.name, llamacpp=json.dumps(llamacpp))
    return given


def _empty_then(receive: Receive) -> Receive:
    """An empty request body, then the client's own messages (its disconnect)."""
    sent = False

    async def inner() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return await receive()

    return inner


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


__all__ = ["GGUF_MEDIA_TYPE", "HEAD_BYTES", "GgufBodyMiddleware"]

"""The errors of the client: one class per HTTP status the service answers, and the mapping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

# --------------------------------------------------------------------------------------- errors


class PosencClientError(Exception):
    """Base class of every error this client raises."""


class PosencConnectionError(PosencClientError):
    """The server could not be reached (or the connection broke) on every attempt.

    The last ``httpx`` transport error is chained as ``__cause__``.

    Attributes:
        attempts: how many attempts were made.
    """

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class PosencHTTPError(PosencClientError):
    """The server answered with a 4xx or 5xx status.

    Attributes:
        status_code: the HTTP status.
        detail: the ``detail`` of the server's JSON body (a string, or FastAPI's list of
            validation errors for 422), or the body's text where it is not JSON.
        response: the ``httpx.Response``.
    """

    def __init__(self, status_code: int, detail: Any, response: httpx.Response | None = None):
        self.status_code = status_code
        self.detail = detail
        self.response = response
        super().__init__(f"HTTP {status_code}: {_format_detail(detail)}")


class Unauthorized(PosencHTTPError):
    """401: the server has ``POSENC_API_KEY`` set and the key was missing or wrong."""


class NotFound(PosencHTTPError):
    """404: unknown path, model or preset."""


class NotAcceptable(PosencHTTPError):
    """406: the endpoint cannot produce the asked format (e.g. ``bfloat16`` as ``npy``)."""


class Conflict(PosencHTTPError):
    """409."""


class PreconditionFailed(PosencHTTPError):
    """412: an ``If-None-Match`` matched on a POST."""


class PayloadTooLarge(PosencHTTPError):
    """413: the output would exceed the server's ``POSENC_MAX_ELEMENTS``."""


class ValidationError(PosencHTTPError):
    """422: a body field is missing, unknown or out of range; ``detail`` names it."""


class TooManyRequests(PosencHTTPError):
    """429: the server's in-flight byte budget (``POSENC_MAX_INFLIGHT_BYTES``) stayed full for
    its ``POSENC_QUEUE_TIMEOUT``; raised once the retries (which honour ``Retry-After``) ran out."""


class ServerError(PosencHTTPError):
    """5xx."""


class ServiceUnavailable(ServerError):
    """503: e.g. ``/readyz`` before the models are loaded."""


_ERRORS: dict[int, type[PosencHTTPError]] = {
    401: Unauthorized,
    404: NotFound,
    406: NotAcceptable,
    409: Conflict,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    422: ValidationError,
    429: TooManyRequests,
    503: ServiceUnavailable,
}


def _format_detail(detail: Any) -> str:
    """One line from a ``detail``; FastAPI's 422 list becomes ``loc: msg; loc: msg``."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, Mapping) and "msg" in item:
                loc = ".".join(str(x) for x in item.get("loc", ()))
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, Mapping) else body
    except ValueError:
        detail = response.text
    code = response.status_code
    cls = _ERRORS.get(code, ServerError if code >= 500 else PosencHTTPError)
    raise cls(code, detail, response)

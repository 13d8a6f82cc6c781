"""The retry policy, without I/O: back-off on connection errors and 503/429 (honouring
``Retry-After``), and polling for readiness."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Protocol

import httpx

from posenc.client.calls import Call
from posenc.client.errors import PosencConnectionError, raise_for_status

# --------------------------------------------------------------------------------------- retries

Outcome = httpx.Response | httpx.TransportError  # what one attempt gives: an answer or an error


class Policy(Protocol):
    """Decides, after each attempt, whether a call is over or is tried again.

    Policies hold all the retry logic and do no I/O, so each client's ``_send`` is only the
    transport call and the sleep, sync or async.
    """

    def settle(self, outcome: Outcome) -> httpx.Response | float:
        """The response that ends the call, or the seconds to wait before the next attempt."""
        ...


@dataclass(frozen=True)
class RetryConfig:
    """Retry settings shared by both clients (see :class:`PosencClient` for their meaning)."""

    base_url: str
    max_attempts: int
    backoff: float
    backoff_max: float
    retry_statuses: frozenset[int]

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): exponential."""
        return float(min(self.backoff * (2 ** (attempt - 1)), self.backoff_max))


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110: delay-seconds or an HTTP-date);
    None when absent or unreadable, 0 for a date in the past."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Backoff:
    """The endpoints' policy: up to ``max_attempts`` attempts, exponential backoff between.

    Connection errors are retried, and so are the ``retry_statuses`` unless the call opts out
    (``healthz``, ``readyz``). A retried response's ``Retry-After`` (429 overload, 503) sets the
    wait when it is longer than the backoff, up to ``backoff_max``.
    """

    def __init__(self, cfg: RetryConfig, call: Call) -> None:
        self.cfg, self.call, self.attempt = cfg, call, 0

    def settle(self, outcome: Outcome) -> httpx.Response | float:
        """The successful response, or the seconds to wait before the next attempt.

        Raises:
            PosencConnectionError: a connection error on the last attempt.
            PosencHTTPError: an error status that is not retried, or the last attempt's.
        """
        self.attempt += 1
        cfg, call, last = self.cfg, self.call, self.attempt == self.cfg.max_attempts
        if isinstance(outcome, httpx.TransportError):
            if last:
                raise PosencConnectionError(
                    f"{call.method} {cfg.base_url}{call.path} failed after {cfg.max_attempts} "
                    f"attempt(s): {type(outcome).__name__}: {outcome}",
                    attempts=cfg.max_attempts,
                ) from outcome
        elif last or not (call.retry_on_status and outcome.status_code in cfg.retry_statuses):
            raise_for_status(outcome)
            return outcome
        else:  # the server's Retry-After (429, 503) over our backoff, within backoff_max
            asked = retry_after_seconds(outcome.headers.get("retry-after"))
            if asked is not None:
                return min(max(asked, cfg.delay(self.attempt)), cfg.backoff_max)
        return cfg.delay(self.attempt)


class Poll:
    """``wait_ready``'s policy: every ``interval`` seconds until a 2xx, for ``timeout`` seconds."""

    def __init__(self, base_url: str, timeout: float, interval: float) -> None:
        self.base_url, self.timeout, self.interval = base_url, timeout, interval
        self.deadline = time.monotonic() + timeout

    def settle(self, outcome: Outcome) -> httpx.Response | float:
        """The 2xx response, or ``interval`` while the deadline is ahead.

        Raises:
            PosencConnectionError: still unreachable, or not ready, at the deadline.
        """
        try:
            if isinstance(outcome, httpx.TransportError):
                raise outcome
            return outcome.raise_for_status()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            if time.monotonic() >= self.deadline:
                raise PosencConnectionError(
                    f"{self.base_url}/readyz not ready after {self.timeout} s: {exc}", attempts=0
                ) from exc
        return self.interval

"""The synchronous client, on ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

from posenc.client.base import BaseClient
from posenc.client.calls import MEDIA_TYPES, Call, Method, query_params, request_body
from posenc.client.errors import PosencConnectionError
from posenc.client.methods import TableKind
from posenc.client.results import SavedTable, TensorResult
from posenc.client.retry import Backoff, Outcome, Policy, Poll
from posenc.core.kinds import REGISTRY

# --------------------------------------------------------------------------------------- clients


class PosencClient(BaseClient[TensorResult, Any, httpx.Client, httpx.BaseTransport]):
    """Synchronous client of the posenc service.

    Every compute endpoint of the service is deterministic (identical requests give
    byte-identical bodies, no state changes), so this client retries the POSTs as well as the
    GETs: on connection errors (refused, reset, timed out; any ``httpx.TransportError``) and on
    the statuses in ``retry_statuses``, waiting ``backoff * 2**(n-1)`` seconds (at most
    ``backoff_max``) after the n-th failed attempt, or the response's ``Retry-After`` when that is
    longer (still at most ``backoff_max``). ``healthz`` and ``readyz`` are retried on
    connection errors only: their status is the answer.

    Args:
        base_url: the service's root, default ``http://127.0.0.1:8000``.
        api_key: sent as ``Authorization: Bearer <api_key>`` (servers with ``POSENC_API_KEY``).
        timeout: seconds per request (connect, read, write, pool), or an ``httpx.Timeout``.
        max_attempts: attempts per call, >= 1 (1 means no retry).
        backoff: seconds before the first retry; doubled for each further one.
        backoff_max: the longest wait between attempts.
        retry_statuses: HTTP statuses that are retried like connection errors.
        format: default response format of the tensor endpoints.
        as_: default array kind, ``"numpy"`` or ``"torch"``.
        device: default torch device (with ``as_="torch"``).
        headers: extra headers sent with every request.
        transport: an ``httpx`` transport (tests; proxies; ``httpx.HTTPTransport(uds=...)``).

    Example:
        >>> with PosencClient(api_key="secret") as client:
        ...     r = client.alibi(num_heads=8, seq_len=16)
        ...     r.slopes          # array([0.5, 0.25, ..., 0.00390625], dtype=float32)
    """

    def _connect(self, **options: Any) -> httpx.Client:
        return httpx.Client(**options)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _send(self, call: Call, policy: Policy | None = None) -> httpx.Response:
        """Send ``call`` until ``policy`` (default: the client's retries) settles it."""
        policy = policy or Backoff(self._cfg, call)
        while True:
            try:
                outcome: Outcome = self._http.send(self._request(call))
            except httpx.TransportError as exc:
                outcome = exc
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                return step
            self._sleep(step)

    def _tensor(self, call: Call) -> TensorResult:
        return call.decode(self._send(call))

    def _json(self, call: Call) -> Any:
        return self._send(call).json()

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> Any:
        """Poll ``/readyz`` until it answers 200; return its JSON.

        Args:
            timeout: seconds to keep trying.
            interval: seconds between polls.

        Raises:
            PosencConnectionError: still unreachable, or not ready, after ``timeout``.
        """
        return self._send(Call("GET", "/readyz"), Poll(self.base_url, timeout, interval)).json()

    def save_table(
        self,
        kind: TableKind,
        path: str | Any,
        /,
        *,
        format: Literal["raw", "npy", "safetensors"] = "npy",
        method: Method = "POST",
        progress: Callable[[int, int | None], None] | None = None,
        chunk_size: int = 1 << 20,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> SavedTable:
        """Write a table's body to ``path`` as it arrives, without holding it in memory.

        For tables over the server's ``POSENC_MAX_ELEMENTS``, which it streams in raw, npy and
        safetensors (up to ``POSENC_MAX_STREAM_ELEMENTS``). The body goes to ``PATH.part`` in
        chunks and is renamed to ``path`` once all of ``Content-Length`` has arrived, so a
        failed download never leaves a truncated file under the final name.

        Args:
            kind: a kind whose tables stream (:data:`posenc.client.methods.TableKind`):
                ``"sinusoidal"``, ``"rope"``, ``"alibi"``...
            path: the file to write (replaced if it exists).
            format: ``"npy"`` (default), ``"safetensors"`` or ``"raw"``.
            method: ``"POST"`` (default) or ``"GET"``.
            progress: called as ``progress(bytes_so_far, content_length)`` after each chunk.
            chunk_size: bytes per read.
            extra: further body fields sent as given (see :meth:`sinusoidal`).
            **fields: the endpoint's body fields (``seq_len=..., head_dim=...``); ``None``
                values are left out.

        Returns:
            :class:`SavedTable`: the path, the bytes written and the response headers.

        Raises:
            ValueError: an unknown ``kind`` or ``format``.
            PosencHTTPError: the server refused the request (e.g. 413 over the stream limit).
            PosencConnectionError: unreachable, or the body ended before ``Content-Length``.
        """
        paths = {name: spec.path for name, spec in REGISTRY.items()}
        if kind not in paths:
            raise ValueError(f"kind must be one of {list(paths)}, got {kind!r}")
        if format not in ("raw", "npy", "safetensors"):
            raise ValueError(f"format must be 'raw', 'npy' or 'safetensors', got {format!r}")
        body = request_body(fields, extra)
        call = Call(
            method=method,
            path=paths[kind],
            json_body=body if method == "POST" else None,
            params=query_params(body) if method == "GET" else None,
            headers={"Accept": MEDIA_TYPES[format]},
            fmt=format,
        )
        step = self._send_streamed(call)
        target = Path(path)
        written = self._write_body(step, call, target, chunk_size, progress)
        return SavedTable(target, written, step.headers)

    def _send_streamed(self, call: Call) -> httpx.Response:
        """``call`` sent with retries, its response left open for streaming (a 4xx/5xx
        response is read whole first, so its detail reaches the typed error)."""
        policy = Backoff(self._cfg, call)
        while True:
            outcome: Outcome
            try:
                response = self._http.send(self._request(call), stream=True)
            except httpx.TransportError as exc:
                outcome = exc
            else:
                if response.status_code >= 400:  # read the detail, free the connection
                    response.read()
                    response.close()
                outcome = response
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                return step
            self._sleep(step)

    def _write_body(
        self,
        step: httpx.Response,
        call: Call,
        target: Path,
        chunk_size: int,
        progress: Callable[[int, int | None], None] | None,
    ) -> int:
        """Stream ``step``'s body to ``TARGET.part``, then rename it to ``target``; the bytes
        written. A body that breaks off or ends short of ``Content-Length`` leaves no file."""
        partial = target.with_name(target.name + ".part")
        length_text = step.headers.get("content-length")
        length = int(length_text) if length_text is not None else None
        written = 0
        try:
            with partial.open("wb") as f:
                for chunk in step.iter_bytes(chunk_size):
                    f.write(chunk)
                    written += len(chunk)
                    if progress is not None:
                        progress(written, length)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise PosencConnectionError(
                f"{call.method} {self.base_url}{call.path}: the body broke off after {written} "
                f"of {length if length is not None else '?'} bytes: {exc}",
                attempts=1,
            ) from exc
        finally:
            step.close()
        if length is not None and written != length:
            partial.unlink(missing_ok=True)
            raise PosencConnectionError(
                f"{call.method} {self.base_url}{call.path}: got {written} of {length} bytes",
                attempts=1,
            )
        partial.replace(target)
        return written

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> PosencClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

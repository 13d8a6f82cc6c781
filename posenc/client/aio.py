"""The asynchronous client, on ``httpx.AsyncClient``: every method is awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import httpx

from posenc.client.base import BaseClient
from posenc.client.calls import Call
from posenc.client.results import TensorResult
from posenc.client.retry import Backoff, Outcome, Policy, Poll


class AsyncPosencClient(
    BaseClient[Awaitable[TensorResult], Awaitable[Any], httpx.AsyncClient, httpx.AsyncBaseTransport]
):
    """Asynchronous client of the posenc service: :class:`PosencClient`'s methods, awaited.

    Takes the same arguments as :class:`PosencClient` (``transport`` an
    ``httpx.AsyncBaseTransport``) and retries the same way: the compute endpoints are
    deterministic, so POSTs are as safe to retry as GETs. Decoding large bodies runs in a worker
    thread so that the event loop stays free.

    Example:
        >>> async with AsyncPosencClient() as client:
        ...     r = await client.rope(preset="llama-2-7b", seq_len=4096)
    """

    def _connect(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(**options)

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _send(self, call: Call, policy: Policy | None = None) -> httpx.Response:
        """Send ``call`` until ``policy`` (default: the client's retries) settles it."""
        policy = policy or Backoff(self._cfg, call)
        while True:
            try:
                outcome: Outcome = await self._http.send(self._request(call))
            except httpx.TransportError as exc:
                outcome = exc
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                return step
            await self._sleep(step)

    async def _tensor(self, call: Call) -> TensorResult:
        return await asyncio.to_thread(call.decode, await self._send(call))

    async def _json(self, call: Call) -> Any:
        return (await self._send(call)).json()

    async def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> Any:
        """Poll ``/readyz`` until it answers 200; return its JSON (see :meth:`PosencClient.wait_ready`)."""
        poll = Poll(self.base_url, timeout, interval)
        return (await self._send(Call("GET", "/readyz"), poll)).json()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPosencClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

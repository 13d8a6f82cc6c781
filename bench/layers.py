"""``python -m bench.layers``: what each layer of the service costs a small cold request.

The app is driven in process (an ASGI call per request, no socket, no HTTP parsing), one request
at a time, each a distinct 128x64 sinusoidal JSON table (a new ``offset`` every time, so no cache
answers it). Each figure is the median over ``--rounds`` rounds of the mean time per request of
a round; the variants alternate round by round, so a drift in the machine's load falls on all of
them alike:

- ``full``: the app as ``create_app`` builds it, with the access log written (JSON records, to
  a file, as the container writes them to its stdout);
- ``without X``: the same app with one middleware left out; ``X``'s cost is ``full`` minus it;
- ``without the access log`` (``POSENC_ACCESS_LOG=false``) and ``without admission`` (the
  in-flight byte budget's acquire and release made no-ops): the other two things version 1.1
  added to every request, beside the request id;
- ``routes only``: no middleware of the service's own (FastAPI's routing, the request model's
  validation, the plan, the response);
- ``full, the same request repeated``: the warm path through the same stack, the figure a cold
  request is held to (its cost minus this one is what being cold costs);
- ``compute`` and ``encode``: the table and its JSON body, called directly (the thread-pool
  part of a miss, without the thread).

The figures print as a markdown table, for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import logging.config
import statistics
import tempfile
import time
from typing import Any

import orjson

from posenc.sinusoidal import sinusoidal_table
from service.admission.budget import ByteBudget
from service.app import create_app
from service.config import Settings
from service.observability.logs import logging_config
from service.responses.formats import Bundle, encode_bundle

PATH = "/v1/encodings/sinusoidal"
WARM = "full, the same request repeated (a cache hit)"


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def _request(app: Any, offset: int) -> None:
    body = orjson.dumps({"seq_len": 128, "d_model": 64, "offset": offset})
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # a client that stays connected
        raise AssertionError

    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(_scope(body), receive, send)
    if status != 200:
        raise SystemExit(f"POST {PATH} -> {status}")


class _NoAdmission(ByteBudget):
    """A budget that admits everything at once and counts nothing (the measure of admission's
    own cost)."""

    async def acquire(self, nbytes: int, timeout: float | None = None) -> float:
        return 0.0

    def shrink(self, held: int, keep: int) -> int:
        return keep

    def release(self, nbytes: int, *, held_s: float | None = None) -> None:
        return None


def _app(without: str | None, settings: Settings) -> Any:
    app = create_app(settings)
    if without == "*":
        app.user_middleware.clear()
    elif without is not None:
        app.user_middleware = [m for m in app.user_middleware if m.cls.__name__ != without]
    return app


async def _round(app: Any, first: int, n: int, *, repeat: bool = False) -> float:
    """Mean seconds per request of ``n`` requests at offsets ``first`` … (all at ``first`` with
    ``repeat``: the same request again, answered by the body cache)."""
    t0 = time.perf_counter()
    for k in range(n):
        await _request(app, first if repeat else first + k)
    return (time.perf_counter() - t0) / n


def _direct(n: int, first: int) -> tuple[float, float]:
    """Mean seconds per table of the compute and of the JSON encode, called directly."""
    tables = []
    t0 = time.perf_counter()
    for k in range(n):
        tables.append(sinusoidal_table(seq_len=128, d_model=64, offset=first + k))
    compute = (time.perf_counter() - t0) / n
    bundles = [Bundle({"pe": t}, {"offset": first + k}) for k, t in enumerate(tables)]
    t0 = time.perf_counter()
    for b in bundles:
        encode_bundle(b, "json")
    return compute, (time.perf_counter() - t0) / n


async def measure(rounds: int, per_round: int, log_path: str) -> list[tuple[str, float]]:
    """Median seconds per request of each variant (and of the direct compute and encode), the
    access log written to ``log_path``."""
    config = logging_config("info", "json")
    config["handlers"]["default"] = {
        **config["handlers"]["default"],
        "class": "logging.FileHandler",
        "filename": log_path,
    }
    del config["handlers"]["default"]["stream"]
    logging.config.dictConfig(config)
    settings = Settings()
    full = create_app(settings)
    names = [m.cls.__name__ for m in full.user_middleware]
    variants: dict[str, Any] = {"full": full}
    variants.update({f"without {n}": _app(n, settings) for n in names})
    variants["without the access log"] = _app(
        None, settings.model_copy(update={"access_log": False})
    )
    variants["without admission"] = _app(None, settings)
    variants["routes only"] = _app("*", settings)
    times: dict[str, list[float]] = {v: [] for v in [*variants, WARM]}
    direct: dict[str, list[float]] = {"compute (direct)": [], "encode JSON (direct)": []}
    async with full.router.lifespan_context(full):
        state = full.state.posenc
        for app in variants.values():  # the same state the lifespan built
            app.state.posenc = state
        variants["without admission"].state.posenc = dataclasses.replace(
            state, _budget=_NoAdmission(state.settings.max_inflight_bytes)
        )
        offset = 10**8
        for app in variants.values():  # warm-up: first calls build the stacks and caches
            offset += 200
            await _round(app, offset, 200)
        for _ in range(rounds):
            for name, app in variants.items():
                offset += per_round
                times[name].append(await _round(app, offset, per_round))
            # the warm path through the same stack: one request, then its repeats (hits)
            offset += 1
            await _request(full, offset)
            times[WARM].append(await _round(full, offset, per_round, repeat=True))
            offset += per_round
            c, e = _direct(per_round, offset)
            direct["compute (direct)"].append(c)
            direct["encode JSON (direct)"].append(e)
    logging.shutdown()
    return [(n, statistics.median(t)) for n, t in {**times, **direct}.items()]


def table(figures: list[tuple[str, float]]) -> list[str]:
    full = dict(figures)["full"]
    lines = [
        "| variant | µs per request | the layer's cost (full − variant), µs |",
        "| --- | ---: | ---: |",
    ]
    for name, seconds in figures:
        cost = "" if name == "full" or "direct" in name else f"{(full - seconds) * 1e6:.0f}"
        lines.append(f"| {name} | {seconds * 1e6:.0f} | {cost} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.layers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--per-round", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="posenc-layers-") as tmp:
        figures = asyncio.run(measure(args.rounds, args.per_round, f"{tmp}/access.log"))
    print("\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

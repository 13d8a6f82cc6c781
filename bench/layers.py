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

``--case embed`` measures the same layers for ``/v1/embed`` with a JSON body of 32 x 512 fresh
token ids (a new batch every request, ids drawn from a seeded stream), raw out; its ``compute``
is ``build_batch`` plus ``embed_tokens`` and its ``encode`` the raw body, called directly, and
``body checks`` the library's coercion of the ids (``posenc.core.kinds.coerce``), which the route runs
after pydantic's.

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
import torch

from posenc.absolute.sinusoidal import sinusoidal_table
from posenc.core.kinds import coerce
from posenc.embedding import EMBED, embed_tokens
from posenc.readers.models import default_model
from posenc.tokens.position_ids import build_batch
from service.admission.budget import ByteBudget
from service.app import create_app
from service.config import Settings
from service.formats import Bundle, encode_bundle
from service.observability.logs import logging_config

WARM = "full, the same request repeated (a cache hit)"


@dataclasses.dataclass(frozen=True)
class Case:
    """What one request of the measure asks: ``body(k)`` is the k-th distinct body."""

    path: str
    query: bytes
    accept: bytes
    body: Any


def _ids(k: int) -> list[list[int]]:
    """32 rows of 512 token ids of the built-in model, the k-th batch of a seeded stream."""
    g = torch.Generator().manual_seed(k)
    return torch.randint(0, 32000, (32, 512), generator=g).tolist()  # type: ignore[no-any-return]


CASES = {
    "sinusoidal": Case(
        "/v1/encodings/sinusoidal",
        b"",
        b"application/json",
        lambda k: {"seq_len": 128, "d_model": 64, "offset": k},
    ),
    "embed": Case("/v1/embed", b"format=raw", b"application/octet-stream", lambda k: None),
}
CASE = CASES["sinusoidal"]
_BODIES: dict[int, bytes] = {}


def _body(k: int) -> bytes:
    """The k-th body of the case (embed batches made once each, before they are timed)."""
    if CASE.path == "/v1/embed":
        if k not in _BODIES:
            _BODIES[k] = orjson.dumps({"input_ids": _ids(k)})
        return _BODIES[k]
    return orjson.dumps(CASE.body(k))


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CASE.path,
        "raw_path": CASE.path.encode(),
        "query_string": CASE.query,
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"accept", CASE.accept),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def _request(app: Any, offset: int) -> None:
    body = _body(offset)
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
        raise SystemExit(f"POST {CASE.path} -> {status}")


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
    """Mean seconds per request of the compute and of the encode, called directly."""
    if CASE.path == "/v1/embed":
        return _direct_embed(n, first)
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


_MODEL = None


def _direct_embed(n: int, first: int) -> tuple[float, float]:
    global _MODEL
    if _MODEL is None:
        _MODEL = default_model()
    rows = [orjson.loads(_body(first + k))["input_ids"] for k in range(n)]
    out = []
    t0 = time.perf_counter()
    for ids in rows:
        batch = build_batch(ids)
        out.append(
            embed_tokens(
                batch.input_ids,
                token_table=_MODEL.token_table,
                position_table=_MODEL.position_table,
                position_ids=batch.position_ids,
                attention_mask=batch.attention_mask,
            )
        )
    compute = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for k, e in enumerate(out):
        encode_bundle(Bundle({"embeddings": e}, {"k": k}), "raw")
    return compute, (time.perf_counter() - t0) / n


def _checks(n: int, first: int) -> float:
    """Mean seconds of the library's coercion of a batch of ids (after pydantic's)."""
    (spec,) = (f for f in EMBED.fields if f.name == "input_ids")
    rows = [orjson.loads(_body(first + k))["input_ids"] for k in range(n)]
    t0 = time.perf_counter()
    for ids in rows:
        coerce(spec, ids)
    return (time.perf_counter() - t0) / n


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
    encode = "encode raw (direct)" if CASE.path == "/v1/embed" else "encode JSON (direct)"
    direct: dict[str, list[float]] = {"compute (direct)": [], encode: []}
    if CASE.path == "/v1/embed":
        direct["body checks (direct)"] = []
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
            await _round(app, offset, 200 if CASE.path != "/v1/embed" else 3)
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
            direct[encode].append(e)
            if CASE.path == "/v1/embed":
                direct["body checks (direct)"].append(_checks(per_round, offset))
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
    parser.add_argument("--case", choices=sorted(CASES), default="sinusoidal")
    args = parser.parse_args(argv)
    global CASE
    CASE = CASES[args.case]
    with tempfile.TemporaryDirectory(prefix="posenc-layers-") as tmp:
        figures = asyncio.run(measure(args.rounds, args.per_round, f"{tmp}/access.log"))
    print("\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

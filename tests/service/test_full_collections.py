"""service.full_collections: no full garbage collection while a large body's request runs, and
the body's size in the scope (issue 39).

A full collection walks every container of a parsed body in one C call (1.5 s for 16 MiB of
``[[],[],...]``), on whichever thread allocates past the threshold: the event loop waited for
it. The mechanism is asserted, not the time: the third threshold is out of reach while a request
with a body over ``LARGE_BODY_BYTES`` runs, and back as it was afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from service import full_collections, json_slices
from service.full_collections import HOLD, LARGE_BODY_BYTES
from service.responses.threads import LOOP_BODY_BYTES, ONE_THREAD_ELEMENTS, computes_on_loop

JSON = {"content-type": "application/json"}


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds, as they were before the test (and put back after)."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_holds_nest_and_the_last_puts_the_thresholds_back(
    thresholds: tuple[int, int, int],
) -> None:
    young, middle, _full = thresholds
    HOLD.hold()
    assert gc.get_threshold() == (young, middle, full_collections.OUT_OF_REACH)
    HOLD.hold()  # a second large request at the same time
    HOLD.let_go()
    assert gc.get_threshold()[2] == full_collections.OUT_OF_REACH and HOLD.count == 1
    HOLD.let_go()
    assert gc.get_threshold() == thresholds and HOLD.count == 0


def _during(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """The thresholds each time a body is parsed (json_slices.loads), inside the request."""
    seen: list[tuple[int, int, int]] = []
    loads = json_slices.loads

    def spy(raw: bytes, *args: Any) -> Any:
        seen.append(gc.get_threshold())
        return loads(raw, *args)

    monkeypatch.setattr(json_slices, "loads", spy)
    return seen


@pytest.mark.parametrize("path", ["/v1/position-ids", "/v1/encodings/rope", "/v1/rope/shift"])
def test_a_large_body_holds_full_collections_until_its_answer(
    app_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    thresholds: tuple[int, int, int],
    path: str,
) -> None:
    seen = _during(monkeypatch)
    field = {"/v1/position-ids": "input_ids", "/v1/encodings/rope": "positions"}.get(path, "k")
    ids = b",".join([b"12345"] * (LARGE_BODY_BYTES // 6 + 1000))
    body = b'{"head_dim": 8, "%s": [' % field.encode() + ids + b"]}"
    if path == "/v1/position-ids":
        body = b'{"input_ids": [[' + ids + b"]]}"
    if path == "/v1/rope/shift":
        body = b'{"positions": [0], "delta": 1, "k": [[[' + ids + b"]]]}"
    assert len(body) > LARGE_BODY_BYTES
    r = app_client.post(path, content=body, headers=JSON)
    assert r.status_code < 500, r.text[:300]
    assert seen and all(t[2] == full_collections.OUT_OF_REACH for t in seen), seen
    assert gc.get_threshold() == thresholds and HOLD.count == 0  # back after the answer


def test_a_body_under_the_bound_leaves_the_collector_alone(
    app_client: Any, monkeypatch: pytest.MonkeyPatch, thresholds: tuple[int, int, int]
) -> None:
    seen = _during(monkeypatch)
    body = b'{"input_ids": [[' + b",".join([b"12345"] * 100_000) + b"]]}"
    assert json_slices.SLICE_BYTES < len(body) < LARGE_BODY_BYTES
    r = app_client.post("/v1/position-ids", content=body, headers=JSON)
    assert r.status_code == 200, r.text[:300]
    assert seen == [thresholds], "a body under the bound held full collections"


def test_a_large_body_is_never_computed_on_the_event_loop() -> None:
    """A small output of a large input (millions of empty token rows) computes on a worker."""
    cpu = torch.device("cpu")
    assert computes_on_loop(ONE_THREAD_ELEMENTS, cpu)
    assert computes_on_loop(0, cpu, LOOP_BODY_BYTES)
    assert not computes_on_loop(0, cpu, LOOP_BODY_BYTES + 1)
    assert not computes_on_loop(ONE_THREAD_ELEMENTS + 1, cpu, 0)

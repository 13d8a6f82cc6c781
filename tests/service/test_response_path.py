"""One response path (issue 29): the walk of a request through
:func:`service.responses.respond.respond`, and the places that each hold one decision.

The walk: a real request is served in-process (``httpx.ASGITransport`` on this thread's event
loop, the stream's block threads replaced by an executor that runs each block where it is
submitted, so that the order is deterministic) under :func:`sys.setprofile`. Every call made
below ``respond()`` (on its task, and the tasks and blocks it starts) into a file of ``service/``
or ``posenc/`` is recorded: a coroutine or generator resumed is not a new call, and a call the
library makes inside itself is the library's own business (a library function called by the
service is one step of the walk, in its file). Each call edge (caller function, callee
function) counts once, at its first occurrence: a loop over row blocks is one walk, not one per
block. The files of those calls, in order, with runs of one file collapsed, are the walk; a
file that appears again after the walk had left it is a re-entry.

Before this module was written the same walk re-entered files 16 (whole), 8 (kept) and 9
(streamed) times; the issue counted 20 its own way. With ``choose()`` a mutable ``Prepared``
filled in by four modules (issue 38) it was 5, 6 and 7; with ``choose()`` giving one immutable
value (``service/responses/paths.py``) it is 4, 4 and 4.

Also here: ``choose()`` gives each of its four values (:class:`Hit`, :class:`Whole`,
:class:`Kept`, :class:`Streamed`) for the request that takes that path, the values are frozen,
and a request is negotiated once (:mod:`service.responses.negotiation`).
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.responses import Response

import service.responses.negotiation
import service.responses.respond
import service.responses.streaming
import service.routes.tables
from posenc import sinusoidal_table
from posenc.core.kinds import REGISTRY
from service.admission.budget import REQUEST_OVERHEAD
from service.app import create_app
from service.config import Settings
from service.responses.bodies import STREAM_HELD_BLOCKS
from service.responses.paths import Chosen, Hit, Kept, Streamed, Whole
from service.responses.plans import Plan

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = str(ROOT / "posenc") + "/"
WATCHED = (LIBRARY, str(ROOT / "service") + "/")
SIN = "/v1/encodings/sinusoidal"
# Fewer than this many re-entries on each path (issue 29: the walk re-entered files 20 times;
# issue 38: 8 before, 4 once choose() gave one immutable value).
MAX_REENTRIES = 5


class _Inline(Executor):
    """Runs each submitted function at once, on the submitting thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # pragma: no cover - handed to the awaiting side
            future.set_exception(exc)
        return future


class _Walk:
    """The profile hook: which project functions were called, in order, while recording."""

    def __init__(self) -> None:
        # per task: the body of a streaming response is sent from a task of its own, beside
        # one that waits for the client's disconnect (not the response path)
        self._recording: ContextVar[bool] = ContextVar("recording", default=False)
        self.files: list[str] = []
        self.calls: list[str] = []  # file:function, for a failing assertion's message
        self._edges: set[tuple[CodeType | None, CodeType]] = set()
        self._frames: set[FrameType] = set()  # frames seen: a later event is a resumption

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not self._recording.get():
            return
        name = frame.f_code.co_filename
        if not name.startswith(WATCHED):
            return
        if frame in self._frames:
            return
        self._frames.add(frame)
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(WATCHED):
            caller = caller.f_back
        if caller is not None and caller.f_code.co_filename.startswith(LIBRARY):
            return  # inside the library: its own business
        edge = (caller.f_code if caller is not None else None, frame.f_code)
        if edge in self._edges:
            return
        self._edges.add(edge)
        self.files.append(str(Path(name).relative_to(ROOT)))
        self.calls.append(f"{Path(name).name}:{frame.f_code.co_name}")

    @contextmanager
    def recording(self, on: bool) -> Iterator[None]:
        """Record (or not) the calls of this task, and of the tasks it starts."""
        token = self._recording.set(on)
        try:
            yield
        finally:
            self._recording.reset(token)

    def visits(self) -> list[str]:
        """The walk: the files in order, runs of one file collapsed."""
        out: list[str] = []
        for name in self.files:
            if not out or out[-1] != name:
                out.append(name)
        return out


def reentries(visits: list[str]) -> int:
    """Visits to a file that the walk had visited, and left, before."""
    return len(visits) - len(set(visits))


def walk_request(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, params: dict[str, str], body: Any
) -> tuple[httpx.Response, list[str]]:
    """Serve one POST to the sinusoidal route in-process; its response and its walk."""
    walk = _Walk()
    respond = service.responses.respond.respond

    async def traced_respond(*args: Any, **kwargs: Any) -> Response:
        with walk.recording(True):
            return await respond(*args, **kwargs)

    monkeypatch.setattr(service.routes.tables, "respond", traced_respond)
    monkeypatch.setattr(service.responses.streaming, "_BLOCK_THREADS", _Inline())

    async def main() -> httpx.Response:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://walk") as client:
                previous = sys.getprofile()
                sys.setprofile(walk)
                try:
                    return await client.post(SIN, params=params, json=body)
                finally:
                    sys.setprofile(previous)

    response = asyncio.run(main())
    return response, walk.visits()


def _settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"device": "cpu", "models": "", "api_key": None, "cors_origins": ""}
    values.update(overrides)
    return Settings(**values)


# path -> (settings overrides, query, body): a small JSON table (whole, computed on the event
# loop), a raw table of two blocks (sent as computed, then kept), and a raw table over
# max_elements (streamed)
PATHS = {
    "whole": ({}, {}, {"seq_len": 16, "d_model": 8}),
    "kept": ({}, {"format": "raw"}, {"seq_len": 1024, "d_model": 512, "offset": 3}),
    "streamed": ({"max_elements": 4096}, {"format": "raw"}, {"seq_len": 512, "d_model": 64}),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_the_walk_reenters_files_fewer_than_5_times(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    overrides, params, body = PATHS[path]
    response, visits = walk_request(monkeypatch, _settings(**overrides), params, body)
    assert response.status_code == 200, response.text
    want = sinusoidal_table(
        seq_len=body["seq_len"], d_model=body["d_model"], offset=body.get("offset", 0)
    )
    if path == "whole":
        got = np.asarray(response.json()["tensors"]["encoding"]["data"], dtype=np.float32)
        np.testing.assert_array_equal(got.reshape(tuple(want.shape)), want.numpy())
    else:
        assert response.content == want.numpy().tobytes()
    # the walk saw the path it was meant to: respond, then the path's own module
    assert visits[0] == "service/responses/respond.py"
    if path != "whole":
        assert "service/responses/streaming.py" in visits
    assert reentries(visits) < MAX_REENTRIES, (path, reentries(visits), visits)


def test_reentries_counts_returns_to_a_file_left_before() -> None:
    assert reentries(["a", "b", "c"]) == 0
    assert reentries(["a", "b", "a", "c", "b", "a"]) == 3


# ---------------------------------------------------------------------------------------------
# One place each
# ---------------------------------------------------------------------------------------------


def _calls(path: Path) -> Iterator[tuple[str, str]]:
    """(enclosing function, called name) of every call in a module: ``f(...)`` and ``x.f(...)``
    by ``f``."""
    tree = ast.parse(path.read_text())

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            inside = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inside = child.name
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Name):
                    yield inside, func.id
                elif isinstance(func, ast.Attribute):
                    yield inside, func.attr
            yield from visit(child, inside)

    yield from visit(tree, "<module>")


def _service_calls(name: str) -> list[tuple[str, str]]:
    """(module path, enclosing function) of each call of ``name`` in ``service/``."""
    return [
        (str(path.relative_to(ROOT)), where)
        for path in sorted((ROOT / "service").rglob("*.py"))
        for where, called in _calls(path)
        if called == name
    ]


def test_too_large_is_raised_in_one_place() -> None:
    """Every 413 of the service comes from ``check_output``; the others call it."""
    assert _service_calls("TooLarge") == [("service/responses/plans.py", "check_output")]
    callers = {module for module, _ in _service_calls("check_output")}
    assert {"service/routes/text.py", "service/routes/token_bodies.py"} <= callers


def test_the_budget_is_taken_in_one_place() -> None:
    """Bytes (and CPU-milliseconds, issue 39) are taken from their budgets only through
    ``reserve()``, once each, in ``respond()``; their acquire and release are called nowhere
    else, and the ``app.state`` hook is gone."""
    outside = [c for c in _service_calls("reserve") if c[0] != "service/admission/budget.py"]
    assert outside == [("service/responses/respond.py", "respond")] * 2
    for name in ("acquire", "release"):
        outside = [c for c in _service_calls(name) if c[0] != "service/admission/budget.py"]
        assert outside == [], name
    budget = ROOT / "service" / "admission" / "budget.py"
    acquires = [where for where, called in _calls(budget) if called == "acquire"]
    assert acquires == ["reserve"]
    for path in (ROOT / "service").rglob("*.py"):
        assert "posenc_stream_hold" not in path.read_text(), path


def test_the_path_is_chosen_in_one_place() -> None:
    """Whole, kept and streamed are started from ``respond()`` alone, on the value ``choose()``
    gave it; the four values are made in ``service/responses/paths.py`` alone, and the bodies
    of kept and streamed are planned there, in ``choose()`` (issue 38: ``streaming.kept_body``
    decided part of the path, and ``Prepared`` was filled in by four modules)."""
    respond_only = [("service/responses/respond.py", "respond")]
    for name in ("choose", "finish", "kept_response", "streamed_response"):
        assert _service_calls(name) == respond_only, name
    for name in ("kept_body", "streamed_body"):
        assert _service_calls(name) == [("service/responses/paths.py", "choose")], name
    for name in ("Hit", "Whole", "Kept", "Streamed"):
        assert {module for module, _ in _service_calls(name)} == {"service/responses/paths.py"}
    for path in (ROOT / "service").rglob("*.py"):
        assert "Prepared" not in path.read_text(), path


def test_each_route_negotiates_once_and_respond_never_does() -> None:
    """Every handler that calls ``respond()`` negotiates once, itself
    (``negotiate_output``), and hands the result over; nothing under ``respond()`` negotiates
    (issue 38: a token route with text negotiated, then ``prepare()`` again)."""
    responders = _service_calls("respond")
    assert len(responders) == 5  # tables (POST, GET), tensor bodies, token bodies, rope/apply
    assert sorted(_service_calls("negotiate_output")) == sorted(responders)
    assert _service_calls("negotiate") == [
        ("service/responses/negotiation.py", "negotiate_output"),
        ("service/routes/configs.py", "config_compare"),  # json or png, not through respond()
    ]


def test_a_plan_holds_its_kind_and_parameters() -> None:
    """A Plan is made from the kind, the parameters and how to compute them; what it knows of
    the request besides is derived, never passed in (issue 29: it copied 7 of the Kind's
    attributes)."""
    made = [f.name for f in dataclasses.fields(Plan) if f.init]
    assert made == ["kind", "params", "compute", "stream", "tensors_key"]
    kind = REGISTRY["sinusoidal"]
    plan = Plan(kind, {"seq_len": 7, "d_model": 4, "dtype": "float32"}, compute=lambda: None)  # type: ignore[arg-type,return-value]
    assert plan.route == kind.path == "/v1/encodings/sinusoidal"
    assert plan.elements == 28 and plan.names == tuple(kind.shapes(plan.params))


# ---------------------------------------------------------------------------------------------
# choose(): one immutable value per path
# ---------------------------------------------------------------------------------------------

TABLE = {"seq_len": 16, "d_model": 8}


def _choices(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, calls: list[dict[str, Any]]
) -> list[tuple[Chosen, Any]]:
    """Serve ``calls`` (keyword arguments of ``TestClient.request``) in order on one app; what
    ``choose()`` gave each, and its response."""
    from fastapi.testclient import TestClient

    chosen: list[Chosen] = []
    choose = service.responses.respond.choose

    def recorded(*args: Any, **kwargs: Any) -> Chosen:
        value = choose(*args, **kwargs)
        chosen.append(value)
        return value

    monkeypatch.setattr(service.responses.respond, "choose", recorded)
    responses: list[Any] = []  # TestClient's responses
    with TestClient(create_app(settings)) as client:
        for call in calls:
            responses.append(client.request(**call))
    assert len(chosen) == len(responses)  # no replay: each request went through choose()
    return list(zip(chosen, responses, strict=True))


def _table(seq_len: int, d_model: int) -> bytes:
    return sinusoidal_table(seq_len=seq_len, d_model=d_model).numpy().tobytes()


def test_choose_gives_whole_then_hits_for_a_json_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON miss is Whole; the same table with another Accept (not a replay) is a body-cache
    Hit of the same bytes, replayable; a matching If-None-Match is a Hit: 412 for POST, 304
    for GET."""
    first = {"method": "POST", "url": SIN, "json": TABLE}
    accept = {**first, "headers": {"Accept": "application/json"}}
    (whole, miss), (hit, cached) = _choices(monkeypatch, _settings(), [first, accept])
    assert isinstance(whole, Whole) and isinstance(hit, Hit)
    assert (whole.fmt, whole.base64, whole.index, whole.tensors) == ("json", False, None, None)
    assert whole.headers == {"ETag": miss.headers["etag"], "Vary": "Accept"}
    assert whole.nbytes > 16 * 8 * 4  # the estimated peak of compute and encode, not the table
    got = np.asarray(miss.json()["tensors"]["encoding"]["data"], dtype=np.float32)
    assert got.tobytes() == _table(16, 8)
    assert hit.response.status_code == cached.status_code == 200
    assert hit.replay_key == whole.body_key and cached.content == miss.content
    assert 'cache;desc="hit"' in cached.headers["server-timing"]

    etag = miss.headers["etag"]
    conditional = [
        {**first, "headers": {"If-None-Match": etag}},
        {"method": "GET", "url": SIN, "params": TABLE, "headers": {"If-None-Match": etag}},
    ]
    (post, refused), (get, unchanged) = _choices(monkeypatch, _settings(), conditional)
    assert isinstance(post, Hit) and isinstance(get, Hit)
    assert (post.replay_key, get.replay_key) == (None, None)  # never replayed
    assert (refused.status_code, unchanged.status_code) == (412, 304)
    assert refused.json() == {"detail": f"If-None-Match: the current representation matches {etag}"}
    assert unchanged.headers["etag"] == etag and unchanged.content == b""


def test_choose_gives_kept_for_a_binary_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw miss of a table within max_elements is Kept (its rows planned, nothing computed);
    once another format has cached its tensors, the same table is Whole, encoding them."""
    raw = {"method": "POST", "url": SIN, "json": TABLE, "params": {"format": "raw"}}
    npy = {**raw, "params": {"format": "npy"}}
    calls = [raw, {"method": "POST", "url": SIN, "json": TABLE}, npy]
    (kept, sent), (_, _), (whole, encoded) = _choices(monkeypatch, _settings(), calls)
    assert isinstance(kept, Kept)
    assert (kept.fmt, kept.body.length, kept.body.primary.name) == ("raw", 16 * 8 * 4, "encoding")
    assert kept.headers["ETag"] == sent.headers["etag"] and sent.content == _table(16, 8)
    assert isinstance(whole, Whole) and whole.fmt == "npy" and whole.tensors is not None
    assert encoded.content.endswith(_table(16, 8))


def test_choose_gives_streamed_past_max_elements(monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw table over max_elements is Streamed, taking the bytes of the blocks it holds at
    once from the in-flight budget."""
    body = {"seq_len": 512, "d_model": 64}
    call = {"method": "POST", "url": SIN, "json": body, "params": {"format": "raw"}}
    [(streamed, sent)] = _choices(monkeypatch, _settings(max_elements=4096), [call])
    assert isinstance(streamed, Streamed)
    assert (streamed.fmt, streamed.body.length) == ("raw", 512 * 64 * 4)
    # one block of 512 rows: its output buffers, its float64 scratch and the request's overhead
    held = STREAM_HELD_BLOCKS * 512 * 64 * 4 + 16 * 512 * 64 + REQUEST_OVERHEAD
    assert streamed.nbytes == streamed.body.held_bytes() == held
    assert sent.content == _table(512, 64)
    assert sent.headers["server-timing"].endswith('cache;desc="stream"')


def test_chosen_values_are_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing rewrites a path's value after choose(): every field refuses assignment, and
    the headers refuse changes."""
    calls = [
        {"method": "POST", "url": SIN, "json": TABLE},
        # another Accept giving JSON (not a replay: TestClient sends */*)
        {"method": "POST", "url": SIN, "json": TABLE, "headers": {"Accept": "application/*"}},
        {
            "method": "POST",
            "url": SIN,
            "json": {"seq_len": 8, "d_model": 4},
            "params": {"format": "npy"},
        },
    ]
    values = [v for v, _ in _choices(monkeypatch, _settings(), calls)]
    streamed = {
        "method": "POST",
        "url": SIN,
        "json": {"seq_len": 512, "d_model": 64},
        "params": {"format": "npy"},
    }
    values += [v for v, _ in _choices(monkeypatch, _settings(max_elements=4096), [streamed])]
    assert [type(v) for v in values] == [Whole, Hit, Kept, Streamed]
    for value in values:
        for field in dataclasses.fields(value):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(value, field.name, None)
        if not isinstance(value, Hit):
            with pytest.raises(TypeError):
                value.headers["ETag"] = '"changed"'  # type: ignore[index]


# ---------------------------------------------------------------------------------------------
# Negotiated once
# ---------------------------------------------------------------------------------------------

# (route, query, body, media type): a table, and text through the token routes (the built-in
# model's tokenizer), whose format decides how far the text is tokenized (a table that may
# stream) before respond() serves it
ONCE = [
    (SIN, {}, TABLE, "application/json"),
    (SIN, {"format": "npy"}, TABLE, "application/x-npy"),
    ("/v1/embed", {}, {"text": ["hi there"]}, "application/json"),
    ("/v1/embed", {"format": "raw"}, {"text": ["hi there"]},
     "application/octet-stream"),
    ("/v1/position-ids", {"format": "safetensors"}, {"text": ["hi"]},
     "application/vnd.safetensors"),
]  # fmt: skip


def test_a_request_is_negotiated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request of ONCE calls ``negotiate`` once (the token routes read the result before
    planning, respond() after) and gets the format it negotiated; refused by its Accept, once
    too, and the 406 is the one negotiation gave."""
    from fastapi.testclient import TestClient

    calls: list[tuple[Any, ...]] = []
    negotiate = service.responses.negotiation.negotiate

    def counted(*args: Any) -> str:
        calls.append(args)
        return negotiate(*args)

    monkeypatch.setattr(service.responses.negotiation, "negotiate", counted)
    with TestClient(create_app(_settings())) as client:  # one app: each start takes a second
        for route, query, body, media in ONCE:
            calls.clear()
            r = client.post(route, params=query, json=body)
            assert r.status_code == 200, (route, query, r.text)
            assert r.headers["content-type"] == media
            assert [format for _, format in calls] == [query.get("format")], (route, query)
            calls.clear()
            refused = client.post(route, json=body, headers={"Accept": "text/csv"})
            assert refused.status_code == 406, refused.text
            assert "text/csv" in refused.text and calls == [("text/csv", None)], route

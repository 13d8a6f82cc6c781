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
(streamed) times; the issue counted 20 its own way.
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

import service.responses.respond
import service.responses.streaming
import service.routes.tables
from posenc import sinusoidal_table
from posenc.core.kinds import REGISTRY
from service.app import create_app
from service.config import Settings
from service.responses.plans import Plan

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = str(ROOT / "posenc") + "/"
WATCHED = (LIBRARY, str(ROOT / "service") + "/")
SIN = "/v1/encodings/sinusoidal"
# Fewer than this many re-entries on each path (issue 29: the walk re-entered files 20 times).
MAX_REENTRIES = 8


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
def test_the_walk_reenters_files_fewer_than_8_times(
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
    """Whole, kept and streamed are started from ``respond()`` alone, after ``choose()``."""
    for name in ("finish", "kept_response", "streamed_response"):
        assert _service_calls(name) == [("service/responses/respond.py", "respond")], name
    for name in ("kept_body", "streamed_body", "prepare"):
        assert _service_calls(name) == [("service/responses/respond.py", "choose")], name


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

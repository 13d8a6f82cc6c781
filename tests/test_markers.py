"""The ``integration`` marker is given in one place (tests/conftest.py): to a test that starts
uvicorn, nginx or Chromium, itself, through a fixture or through a helper it calls; such a test
is ``slow`` too (out of the fast lane)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import _starts_a_process
from tests.helpers import ROOT, free_port, start_service


def _serves() -> None:  # never called: only read
    start_service(free_port(), None, {})  # type: ignore[arg-type]


def _through_a_helper() -> None:  # never called: only read
    _serves()


def _in_a_closure() -> None:  # never called: only read
    def inner() -> object:
        return subprocess.Popen([sys.executable, "-m", "service"])

    inner()


def _computes() -> int:
    return free_port() + 1


def test_a_starter_is_found_directly_through_helpers_and_closures() -> None:
    for fn in (_serves, _through_a_helper, _in_a_closure):
        assert _starts_a_process(fn, set()), fn.__name__
    assert not _starts_a_process(_computes, set())


class _Collected:
    """A pytest plugin keeping the items a nested collection found."""

    items: list[pytest.Item]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = list(session.items)


def test_the_live_half_of_api_is_integration_and_the_in_process_half_is_not() -> None:
    """A collection of a service test file: each ``api`` test runs twice, and only its
    ``[uvicorn]`` half carries the marker, and a test that asks for ``live_server`` does."""
    collected = _Collected()
    path = ROOT / "tests" / "service" / "test_service_config.py"
    code = pytest.main(
        ["--collect-only", "-q", "-p", "no:cacheprovider", str(path)], plugins=[collected]
    )
    assert code == pytest.ExitCode.OK
    marked = {i.name: i.get_closest_marker("integration") is not None for i in collected.items}
    # a server's test is slow too: the fast lane (-m "not slow") starts none
    for item in collected.items:
        if marked[item.name]:
            assert item.get_closest_marker("slow") is not None, item.name
    halves = [name for name in marked if name.endswith(("[inprocess]", "[uvicorn]"))]
    assert len(halves) >= 10
    for name in halves:
        assert marked[name] == name.endswith("[uvicorn]"), name
    # the others: marked exactly when they ask for the live server
    alone = {i.name: "live_server" in i.fixturenames for i in collected.items if "[" not in i.name}  # type: ignore[attr-defined]
    assert any(alone.values())
    for name, live in alone.items():
        assert marked[name] == live, name

"""Shared fixtures of the service tests.

- ``gpt2_file``: a small GPT-2-style safetensors checkpoint (``wte.weight``, ``wpe.weight`` and
  a few other tensors a real file holds), written once per session.
- ``live_server``: ``python -m service --port P`` in a subprocess on a free loopback port, with
  that file in ``POSENC_MODELS``; waits for ``/readyz``, yields the base URL, terminates it.
- ``app_client``: the same configuration in process, through ``TestClient`` (lifespan run).
- ``api``: parametrised over both, so a contract test runs in process and over real HTTP.

Every test that starts uvicorn, nginx or Chromium carries the ``integration`` marker, given
here and nowhere else (:func:`pytest_collection_modifyitems`): a test is one when its own code,
a fixture it uses or a test helper either calls reaches a starter (:data:`STARTERS`), or when
it runs with a fixture parameter ``uvicorn``. ``pytest -m "not integration"`` is then the
in-process lane. Such a test is ``slow`` too: ``pytest -m "not slow"`` (the fast lane) starts no
server.

The suite runs under pytest-xdist (``./run.sh test``: a worker a core): each worker has its own
session fixtures (its own ``live_server``), takes its ports from its own block
(``tests.helpers.free_port``) and writes only under pytest's ``tmp_path``, which is per worker.

Hypothesis (and schemathesis, which runs on it) is set up here, whether ``CI`` is set or not:
Hypothesis loads its own ``ci`` profile when it sees ``CI``, and that profile draws other
examples, so CI and a user running ``./run.sh test`` once ran different tests (issue 28).

- The default lane loads the ``posenc`` profile: ``derandomize`` (each test draws the same
  examples on every run), no example database, no deadline and no timing health check (nothing
  that depends on the machine's speed), schemathesis with the seed :data:`SEED`.
- The exploratory lane, ``./run.sh fuzz`` (``POSENC_FUZZ=1``), loads ``posenc-fuzz``: new
  examples each run from a seed it prints (``POSENC_FUZZ_SEED`` replays one), and every test's
  ``max_examples`` times ``POSENC_FUZZ_SCALE`` (default 5). What it finds becomes an
  ``@example`` or an explicit test in the default lane.
"""

from __future__ import annotations

import inspect
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import torch
from hypothesis import HealthCheck, settings

from tests.helpers import (
    GPT2_NAME,
    GPT2_SHAPE,
    HOST,
    ApiClient,
    clean_env,
    forget_fastapi_endpoints,
    free_port,
    make_settings,
    start_service,
    stop_service,
    wait_ready,
)

FUZZ = os.environ.get("POSENC_FUZZ") == "1"
SEED = (
    int(os.environ.get("POSENC_FUZZ_SEED") or random.SystemRandom().randrange(2**32)) if FUZZ else 0
)
FUZZ_SCALE = int(os.environ.get("POSENC_FUZZ_SCALE", "5"))
if FUZZ:  # pytest-xdist's workers inherit the environment: they draw from the same seed
    os.environ["POSENC_FUZZ_SEED"] = str(SEED)
os.environ["POSENC_HYPOTHESIS_SEED"] = str(
    SEED
)  # schemathesis' seed (tests/service/test_schemathesis.py)
# The apps a test builds in this process (Settings() and make_settings read it from here)
# skip start-up's full collection and gc.freeze: in a worker that has built transformers' models
# the heap is millions of objects, and each start-up walked it (seconds a test app); the servers
# tests start as processes get clean_env() and freeze as deployed. POSENC_GC_FREEZE in README.
os.environ.setdefault("POSENC_GC_FREEZE", "false")

_COMMON = {
    "database": None,
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow],
}
settings.register_profile("posenc", derandomize=True, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("posenc-fuzz", derandomize=False, **_COMMON)  # type: ignore[arg-type]
settings.load_profile("posenc-fuzz" if FUZZ else "posenc")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The apps this test built can be freed (tests.helpers.forget_fastapi_endpoints)."""
    forget_fastapi_endpoints()


def pytest_report_header() -> str:
    if FUZZ:
        return (
            f"hypothesis: exploratory lane, POSENC_FUZZ_SEED={SEED}, max_examples x {FUZZ_SCALE} "
            f"(replay: POSENC_FUZZ_SEED={SEED} ./run.sh fuzz)"
        )
    return "hypothesis: profile posenc (derandomized, the same examples with or without CI)"


#: Names whose use starts a server the tests talk to: tests.helpers' ``start_service`` and
#: ``run_service`` (``python -m service``: uvicorn), ``Popen`` (every ``subprocess.Popen`` in the
#: tests starts uvicorn, ``posenc serve`` or nginx), the ``uvicorn`` module (a server in a
#: thread) and playwright's ``chromium``.
STARTERS = frozenset({"start_service", "run_service", "Popen", "uvicorn", "chromium"})
#: A fixture parameter that selects the real server (``api``'s and its like's ``uvicorn``).
LIVE_PARAM = "uvicorn"


def _code_objects(code: object) -> Iterator[object]:
    yield code
    for const in getattr(code, "co_consts", ()):
        if inspect.iscode(const):
            yield from _code_objects(const)


def _starts_a_process(fn: Callable[..., object], seen: set[object]) -> bool:
    """Whether ``fn`` names a starter, itself or through a function or class of the tests it
    names (followed through its module's globals)."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    scope = getattr(fn, "__globals__", {})
    for c in _code_objects(code):
        for name in getattr(c, "co_names", ()):
            if name in STARTERS:
                return True
            target = scope.get(name)
            module = getattr(target, "__module__", None) or ""
            if not module.startswith("tests"):
                continue
            if inspect.isfunction(target) and _starts_a_process(target, seen):
                return True
            if inspect.isclass(target) and any(
                _starts_a_process(m, seen) for m in vars(target).values() if inspect.isfunction(m)
            ):
                return True
    return False


def is_integration(item: pytest.Item) -> bool:
    """Whether the test starts uvicorn, nginx or Chromium (see the module docstring)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and LIVE_PARAM in callspec.params.values():
        return True
    seen: set[object] = set()
    test = getattr(item, "obj", None)
    if test is not None and _starts_a_process(test, seen):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    return any(
        _starts_a_process(d.func, seen)
        for name in getattr(item, "fixturenames", ())
        for d in defs.get(name, ())
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the tests that start a process ``integration``; and in the exploratory lane,
    every hypothesis test (schemathesis' too) draws from SEED and runs FUZZ_SCALE times its
    examples (its own ``@settings`` would otherwise keep them)."""
    for item in items:
        if is_integration(item):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)  # a server's start and its HTTP: not the fast lane
    if not FUZZ:
        return
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is None:
            continue
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            own, derandomize=False, max_examples=own.max_examples * FUZZ_SCALE
        )
        test._hypothesis_internal_use_seed = SEED  # type: ignore[union-attr]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FUZZ:
        terminalreporter.write_line(
            f"exploratory lane seed: POSENC_FUZZ_SEED={SEED} (replay it with the same tests)"
        )


@pytest.fixture(scope="session")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2-style checkpoint: float32 ``wte`` (V, D) and ``wpe`` (P, D) plus block tensors."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1234)
    v, p, d = GPT2_SHAPE["vocab"], GPT2_SHAPE["positions"], GPT2_SHAPE["d_model"]
    tensors = {
        "wte.weight": torch.randn(v, d, generator=g) * 0.02,
        "wpe.weight": torch.randn(p, d, generator=g) * 0.01,
        "h.0.ln_1.weight": torch.ones(d),
        "h.0.attn.c_attn.weight": torch.randn(d, 3 * d, generator=g),
        "ln_f.bias": torch.zeros(d),
    }
    path = tmp_path_factory.mktemp("models") / "gpt2.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="session")
def live_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``live_server`` writes its stdout and stderr."""
    return tmp_path_factory.mktemp("live") / "service.log"


@pytest.fixture(scope="session")
def live_server(live_log: Path, gpt2_file: Path) -> Iterator[str]:
    """Base URL of a real ``python -m service`` on a free loopback port."""
    port = free_port()
    log_path = live_log
    env = clean_env(
        POSENC_DEVICE="cpu", POSENC_MODELS=f"{GPT2_NAME}={gpt2_file}", POSENC_ALLOW_RELOAD="1"
    )
    proc = start_service(port, log_path, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url
    finally:
        stop_service(proc)


@pytest.fixture(scope="session")
def app_client(gpt2_file: Path) -> Iterator[ApiClient]:
    """In-process client of an app with the same configuration as ``live_server``."""
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file))) as client:
        yield client


@pytest.fixture(scope="session")
def live_client(live_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server, timeout=60) as client:
        yield client


@pytest.fixture(params=["inprocess", "uvicorn"])
def api(request: pytest.FixtureRequest) -> httpx.Client:
    """The service in process (TestClient) and through a real uvicorn on loopback."""
    name = "app_client" if request.param == "inprocess" else "live_client"
    return request.getfixturevalue(name)


# ---------------------------------------------------------------------------------------------
# Decoding responses (independently of service.formats)
# ---------------------------------------------------------------------------------------------

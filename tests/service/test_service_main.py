"""Start-up that explains itself: ``python -m service`` with a bad setting stops with one line
that names the setting and its value, a non-zero exit status and no traceback (there is one at
debug level); a port in use is found before anything loads, so no "ready" line comes first."""

from __future__ import annotations

import gc
import os
import re
import socket
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.helpers import (
    ROOT,
    clean_env,
    forget_fastapi_endpoints,
    free_port,
    make_folder,
    make_settings,
    one_clear_line,
    run_service,
)

READY = re.compile(r"\bready\b", re.IGNORECASE)  # the service's "posenc ... ready on" line


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory, gpt2_file: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad-models")
    garbage = folder / "garbage.safetensors"
    garbage.write_bytes(os.urandom(4096))
    truncated = folder / "truncated.safetensors"
    truncated.write_bytes(gpt2_file.read_bytes()[:-500])
    huge_header = folder / "huge-header.safetensors"
    huge_header.write_bytes((10**12).to_bytes(8, "little") + b"{}")
    empty = folder / "empty.safetensors"
    empty.write_bytes(b"")
    import torch
    from safetensors.torch import save_file

    no_tables = folder / "no-tables.safetensors"
    save_file({"some.other.weight": torch.zeros(2, 2)}, str(no_tables))
    return {
        "garbage": garbage,
        "truncated": truncated,
        "huge-header": huge_header,
        "empty": empty,
        "no-tables": no_tables,
        "directory": folder,
        "missing": folder / "absent.safetensors",
    }


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("missing", "no such file"),
        ("directory", "a folder without model.safetensors or model.safetensors.index.json"),
        ("garbage", "safetensors"),
        ("truncated", "safetensors"),
        ("huge-header", "safetensors"),
        ("empty", "safetensors"),
        ("no-tables", "some.other.weight"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_bad_model_file_stops_start_up(
    bad_files: dict[str, Path], case: str, why: str, workers: str
) -> None:
    path = bad_files[case]
    result = run_service(clean_env(POSENC_MODELS=f"mine={path}"), "--workers", workers)
    line = one_clear_line(result, "POSENC_MODELS", "'mine'", str(path), why)
    assert not READY.search((result.stdout + result.stderr).replace(line, ""))


def test_a_folder_with_a_bad_tokenizer_stops_start_up(tmp_path: Path, gpt2_file: Path) -> None:
    folder = tmp_path / "wordy"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(gpt2_file.read_bytes())
    (folder / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    result = run_service(clean_env(POSENC_MODELS=f"wordy={folder}"))
    one_clear_line(result, "POSENC_MODELS", "'wordy'", "tokenizer.json")


def test_a_model_folder_is_served(tmp_path: Path) -> None:
    """A folder (model.safetensors, config.json, tokenizer.json) starts, with its tokenizer."""
    import httpx

    from tests.helpers import HOST, start_service, stop_service, wait_ready

    folder = make_folder(tmp_path, "wordy")
    port = free_port()
    log = tmp_path / "service.log"
    proc = start_service(port, log, clean_env(POSENC_DEVICE="cpu", POSENC_MODELS=f"wordy={folder}"))
    try:
        wait_ready(proc, f"http://{HOST}:{port}", log)
        model = httpx.get(f"http://{HOST}:{port}/v1/models/wordy", timeout=30).json()
        assert model["tokenizer"] is True and model["pad_token_id"] == 0
        assert str(folder) in model["source"]
    finally:
        stop_service(proc)


def test_an_unreadable_model_file_stops_start_up(tmp_path: Path, gpt2_file: Path) -> None:
    """A file of mode 000 (the image runs as uid 10001, which cannot read it)."""
    path = tmp_path / "secret.safetensors"
    path.write_bytes(gpt2_file.read_bytes())
    path.chmod(0o000)
    if os.access(path, os.R_OK):
        pytest.skip("this user (root) reads a file of mode 000, so it cannot be unreadable")
    result = run_service(clean_env(POSENC_MODELS=f"mine={path}"))
    one_clear_line(result, "POSENC_MODELS", str(path), "cannot be read", "Permission denied")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("POSENC_MAX_ELEMENTS", "lots"),
        ("POSENC_MAX_ELEMENTS", "0"),
        ("POSENC_CACHE_BYTES", "-1"),
        ("POSENC_LOG_LEVEL", "loud"),
        ("POSENC_ACCESS_LOG", "maybe"),
        ("POSENC_MODELS", "no-equals-sign"),
        ("POSENC_DEVICE", "tpu"),
        ("POSENC_DEVICE", "cuda:99"),
    ],
)
def test_a_bad_setting_names_itself_and_its_value(name: str, value: str) -> None:
    result = run_service(clean_env(**{name: value}))
    one_clear_line(result, f"{name}={value!r}")
    assert result.returncode == 2


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_stops_start_up_before_ready(workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_service(clean_env(POSENC_DEVICE="cpu"), "--workers", workers, port=port)
    output = result.stdout + result.stderr
    one_clear_line(result, f"--port {port}", "Address already in use")
    assert not READY.search(output), output


def test_debug_level_shows_the_traceback(bad_files: dict[str, Path]) -> None:
    result = run_service(
        clean_env(POSENC_MODELS=f"mine={bad_files['garbage']}", POSENC_LOG_LEVEL="debug")
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert len([x for x in result.stderr.splitlines() if "cannot start" in x]) == 1


def test_importing_the_app_module_builds_nothing_and_app_is_there_when_asked() -> None:
    """``import service.app`` builds no app (uvicorn's workers call the factory); ``from
    service.app import app`` (``uvicorn service.app:app``) gets one built from the environment,
    serving every route, the same object each time."""
    code = (
        "import service.app as m\n"
        "assert 'app' not in vars(m), 'built on import'\n"
        "from service.app import app\n"
        "from service.app import app as again\n"
        "assert app is again\n"
        "print(sorted(app.openapi()['paths']))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean_env(POSENC_DEVICE="cpu"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    paths = r.stdout.strip().splitlines()[-1]
    for path in (
        "/v1/encodings/rope",
        "/v1/embed",
        "/v1/position-ids/mrope",
        "/v1/configs/positions",
    ):
        assert path in paths


def test_the_objects_of_start_up_are_frozen_until_shutdown(gpt2_file: Path) -> None:
    """service.app.freeze_startup_objects: a full collection skips what start-up made (the
    models among it), and shutdown hands it back to the collector."""
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(make_settings(gpt2_file, gc_freeze=True))) as client:
        assert client.get("/readyz").status_code == 200
        frozen = gc.get_freeze_count()
        assert frozen > 10_000
        state = client.app.state.posenc  # type: ignore[attr-defined]
        assert not any(gc.is_tracked(x) and x is state for x in gc.get_objects(2))
    assert gc.get_freeze_count() == 0


def test_gc_freeze_off_leaves_the_collector_alone(gpt2_file: Path) -> None:
    """POSENC_GC_FREEZE=false (the test apps): start-up freezes nothing, and shutdown does not
    unfreeze what the process froze itself."""
    gc.unfreeze()
    marker = [object()]
    gc.freeze()  # the process's own freeze, before the app
    before = gc.get_freeze_count()
    try:
        with TestClient(create_app(make_settings(gpt2_file, gc_freeze=False))) as client:
            assert client.get("/readyz").status_code == 200
            # nothing added (start-up would freeze its 10,000s); frozen objects freed by their
            # reference counts may leave
            assert gc.get_freeze_count() <= before
        assert gc.get_freeze_count() > before // 2  # not unfrozen at shutdown
        assert marker
    finally:
        gc.unfreeze()


def test_a_shut_down_app_is_freed_once_fastapi_forgets_its_endpoints(gpt2_file: Path) -> None:
    """Nothing but FastAPI's callable caches keeps a finished app alive: cleared
    (tests.helpers.forget_fastapi_endpoints, after every test), the app and its state are
    collected, so a test worker's memory does not grow with the apps it builds."""
    app = create_app(make_settings(gpt2_file))
    with TestClient(app) as client:
        sin = client.post("/v1/encodings/sinusoidal", json={"seq_len": 4, "d_model": 8})
        assert sin.status_code == 200
    gone = weakref.ref(app.state.posenc), weakref.ref(app)
    del app, client
    forget_fastapi_endpoints()
    gc.collect()
    assert [r() is None for r in gone] == [True, True]

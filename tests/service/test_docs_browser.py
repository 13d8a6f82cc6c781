"""`/docs` works in a real browser with no internet.

The service is started as it is deployed (`python -m service` on a loopback port) and `/docs` is
opened in Debian's headless Chromium driven by Playwright. Every request the page makes must go to
the service itself (Swagger UI's assets come from the `swagger_ui_bundle` package, not a CDN; any
other request is recorded and refused), and "Try it out" / "Execute" on a GET and a POST endpoint
must show the service's answer in the page.

Needs `/usr/bin/chromium` (run.sh installs it with apt-get); never `playwright install`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOST = "127.0.0.1"
# Playwright waits (milliseconds): generous, since the machines running the suite are shared.
WAIT_MS = 60_000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is absent (install Debian's chromium: apt-get install chromium; "
        "run.sh test does so as root)",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real service in its own process, as `python -m service` starts it."""
    port = _free_port()
    log = tmp_path_factory.mktemp("docs-browser") / "service.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env["POSENC_DEVICE"] = "cpu"
    with log.open("wb") as out:  # a file, not a pipe, which could fill and block the server
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "--host", HOST, "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the service exited with {proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the service was not ready in 120 s:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def docs(service_url: str, browser) -> Iterator[tuple[object, list[str], list[str]]]:
    """A page on `/docs`, with every request it made and every one that went elsewhere."""
    origin = urlsplit(service_url)[:2]
    context = browser.new_context()
    requests: list[str] = []
    foreign: list[str] = []

    def record(request) -> None:
        requests.append(request.url)
        if urlsplit(request.url).scheme not in ("data", "blob") and (
            urlsplit(request.url)[:2] != origin
        ):
            foreign.append(request.url)

    def refuse_foreign(route) -> None:  # nothing leaves the machine, whatever the page asks
        if urlsplit(route.request.url)[:2] == origin:
            route.continue_()
        else:
            route.abort("internetdisconnected")

    context.on("request", record)
    context.route("**/*", refuse_foreign)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(service_url + "/docs", wait_until="load")
        page.wait_for_selector(".swagger-ui .opblock")
        yield page, requests, foreign
    finally:
        context.close()


def _operation(page, method: str, path: str):
    """The Swagger UI block of one operation, expanded, with "Try it out" switched on."""
    block = page.locator(f".opblock-{method}").filter(
        has=page.locator(f'.opblock-summary-path[data-path="{path}"]')
    )
    assert block.count() == 1, f"/docs shows {block.count()} `{method.upper()} {path}` operations"
    block.locator(".opblock-summary").first.click()
    try_out = block.locator("button.try-out__btn")
    try_out.wait_for()
    if try_out.inner_text().strip().lower() == "try it out":  # tryItOutEnabled may have done it
        try_out.click()
    return block


def _execute(block) -> tuple[str, str]:
    """Ask for JSON, click Execute; the status code and the response body as the page shows."""
    # The responses' "Media type" menu sets the Accept header; where the endpoint offers several
    # formats, choose JSON as a reader of the page would.
    media = block.locator(".response-control-media-type select")
    if media.count():
        media.first.select_option("application/json")
    block.locator("button.execute").click()
    table = block.locator(".live-responses-table")
    table.wait_for()
    body = table.locator(".response-col_description pre").first
    body.wait_for()
    status = table.locator(".response .response-col_status").first.inner_text().strip()
    return status, body.inner_text()


def test_docs_loads_only_from_the_service_itself(docs, service_url: str):
    page, requests, foreign = docs
    assert not foreign, f"/docs asked other hosts (a CDN?): {foreign}"
    assert any(u.endswith(".js") for u in requests), "Swagger UI's script was not loaded"
    assert any(u.endswith(".css") for u in requests), "Swagger UI's stylesheet was not loaded"
    assert page.locator(".swagger-ui .info .title").first.inner_text().strip()
    # Every endpoint of the contract is on the page.
    shown = set(
        page.locator(".opblock-summary-path").evaluate_all(
            "els => els.map(e => e.getAttribute('data-path'))"
        )
    )
    for path in (
        "/v1/encodings/sinusoidal",
        "/v1/encodings/learned",
        "/v1/encodings/rope",
        "/v1/biases/alibi",
        "/v1/biases/relative",
        "/v1/position-ids",
        "/v1/embed",
        "/v1/models",
        "/v1/presets",
        "/v1/info",
        "/healthz",
        "/readyz",
    ):
        assert path in shown, f"/docs does not show {path}"


def test_try_it_out_on_get_presets_shows_the_presets(docs):
    page, _, foreign = docs
    block = _operation(page, "get", "/v1/presets")
    status, body = _execute(block)
    assert status == "200", body
    presets = json.loads(body)["presets"]
    names = {p["name"] for p in presets}
    assert {"llama-2-7b", "gpt2", "t5-base"} <= names
    assert not foreign, f"requests to other hosts: {foreign}"


def test_try_it_out_on_post_sinusoidal_shows_the_encoding(docs, service_url: str):
    page, requests, foreign = docs
    block = _operation(page, "post", "/v1/encodings/sinusoidal")
    example = json.loads(block.locator("textarea.body-param__text").input_value())
    status, body = _execute(block)
    assert status == "200", body
    shown = json.loads(body)
    encoding = shown["tensors"]["encoding"]
    rows = encoding["data"]
    assert encoding["shape"] == [len(rows), len(rows[0])] and rows
    assert all(-1.0 <= v <= 1.0 for row in rows for v in row), "sines and cosines"
    # The page shows exactly what the service answers to the example body.
    request = urllib.request.Request(
        service_url + "/v1/encodings/sinusoidal",
        data=json.dumps(example).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert shown == json.loads(r.read())
    assert any(u.endswith("/v1/encodings/sinusoidal") for u in requests)
    assert not foreign, f"requests to other hosts: {foreign}"

"""Metrics across ``--workers 2``: every scrape, whichever worker answers it, sees the total of
both workers' counters (prometheus-client's multiprocess mode, ``service.observability.metrics``)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import clean_env, free_port, start_service, stop_service, wait_ready


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    # a new connection each time, so that scrapes land on either worker
    text = httpx.get(url + "/metrics", headers={"Connection": "close"}).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


HEALTHZ = ("posenc_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))


@pytest.mark.slow
def test_two_workers_scrapes_always_see_the_total(tmp_path: Path) -> None:
    folder = tmp_path / "prom"
    folder.mkdir()
    (folder / "counter_999999.db").write_bytes(b"stale file of an earlier run")
    port = free_port()
    log = tmp_path / "service.log"
    env = clean_env(
        POSENC_DEVICE="cpu", PROMETHEUS_MULTIPROC_DIR=str(folder), POSENC_LOG_FORMAT="json"
    )
    proc = start_service(port, log, env, "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    served_by: set[str] = set()
    totals: list[float] = []
    try:
        wait_ready(proc, url, log)
        # both workers must be up; /readyz of one says nothing of the other
        for _ in range(200):
            httpx.get(url + "/readyz", headers={"Connection": "close"})
            if len(list(folder.glob("counter_*.db"))) >= 2:
                break
        sent = 0
        for _batch in range(6):
            for _ in range(15):
                r = httpx.get(url + "/healthz", headers={"Connection": "close"})
                assert r.status_code == 200
                sent += 1
            for _ in range(4):
                samples = scrape(url)
                totals.append(samples[HEALTHZ])
                assert samples[HEALTHZ] == sent, (sent, totals)
                # only the scrape itself is in flight, summed over live workers
                assert samples[("posenc_requests_in_progress", ())] == 1
        counter_files = sorted(p.name for p in folder.glob("counter_*.db"))
        served_by = {name.split("_")[1] for name in counter_files}
    finally:
        stop_service(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "999999.db" not in " ".join(counter_files)  # the stale file was removed at start
    assert len(served_by) == 2, counter_files  # both workers counted requests
    assert totals[-1] == 90
    # the workers' log lines are JSON too (uvicorn configures each worker's logging)
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    pids = {r["message"] for r in records if "Started server process" in r["message"]}
    assert len(pids) == 2, pids


DEAD_WORKER = """
from service.observability.metrics import Metrics
m = Metrics()
m.in_progress.inc(5)  # a worker that dies with 5 requests in flight
m.observe_request("/healthz", "GET", 200, 0.001)
"""
SCRAPER = """
from service.observability.metrics import Metrics
body, _ = Metrics().render()
print(body.decode())
"""


def test_gauges_of_a_dead_worker_are_dropped_and_its_counts_kept(tmp_path: Path) -> None:
    """uvicorn replaces a worker that died; its in-flight gauge must not stay in the sum, and
    the requests it served must stay counted (counters never go down)."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    env = clean_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    for script in (DEAD_WORKER, DEAD_WORKER):
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True)
    dead = set(tmp_path.glob("gauge_livesum_*.db"))
    assert len(dead) == 2
    out = subprocess.run(
        [sys.executable, "-c", SCRAPER],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(out)
        for s in family.samples
    }
    assert samples[("posenc_requests_in_progress", ())] == 0  # not 10
    assert samples[HEALTHZ] == 2
    assert not dead & set(tmp_path.glob("gauge_livesum_*.db"))  # the scraper's own may stay

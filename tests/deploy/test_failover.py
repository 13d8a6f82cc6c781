"""Scale-out for real: two replicas behind Debian's nginx running the project's own
deploy/nginx.conf on loopback. Load goes through nginx, one replica is killed with SIGKILL in
the middle of it, and no request fails: nginx retries on the other replica (the file's
``proxy_next_upstream``), and the client retries a response cut off mid-body (every request
here is an idempotent computation, so the contract allows it). The killed replica is then
started again and nginx sends it traffic once more.

The config is the file's, with only what cannot run here replaced: Docker's resolver and the
``posenc-replica`` DNS name (two loopback servers instead, same ``max_fails``/``fail_timeout``)
and ``listen 80`` (a free loopback port). Skipped where nginx is not installed (``./run.sh
test`` installs it as root, as it does chromium).
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.helpers import HOST, clean_env, free_port, start_service, stop_service, wait_ready

ROOT = Path(__file__).resolve().parents[2]
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
]

# (method, path, params or JSON body): small and larger tables, GET and POST, several formats
REQUESTS = [
    ("GET", "/v1/encodings/sinusoidal", {"seq_len": 64, "d_model": 32}),
    ("POST", "/v1/encodings/sinusoidal?format=raw", {"seq_len": 1024, "d_model": 256}),
    ("POST", "/v1/biases/alibi?format=safetensors", {"seq_len": 128, "num_heads": 8}),
    ("POST", "/v1/embed?format=raw", {"input_ids": [[1, 2, 3, 4, 5, 6, 7, 8]] * 4}),
    ("POST", "/v1/encodings/rope?format=npy", {"seq_len": 512, "head_dim": 64}),
]


def render_nginx_conf(upstreams: list[int], listen: int, workdir: Path) -> str:
    """deploy/nginx.conf inside a complete nginx.conf for a foreground, unprivileged run."""
    text = NGINX_CONF.read_text()
    server = re.search(r"^(\s*)server posenc-replica:8000 resolve (.*);$", text, re.M)
    assert server is not None, "deploy/nginx.conf: the upstream server line changed"
    indent, params = server.group(1), server.group(2)
    servers = "\n".join(f"{indent}server {HOST}:{port} {params};" for port in upstreams)
    text = text.replace(server.group(0), servers)
    text, n = re.subn(r"^resolver .*;$", "", text, flags=re.M)
    assert n == 1
    text, n = re.subn(r"^(\s*)listen 80;$", rf"\1listen {HOST}:{listen};", text, flags=re.M)
    assert n == 1
    temp = workdir / "temp"
    temp.mkdir(exist_ok=True)
    return f"""
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log info;
events {{ worker_connections 512; }}
http {{
    log_format failover '$request_id $status $upstream_addr $upstream_status $request_time';
    access_log {workdir}/access.log failover;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
{text}
}}
"""


def test_rendered_config_keeps_the_files_retry_settings(tmp_path: Path) -> None:
    rendered = render_nginx_conf([1001, 1002], 1003, tmp_path)
    location = re.search(r"location / \{.*?\n    \}", NGINX_CONF.read_text(), re.S)
    assert location is not None and location.group(0) in rendered  # verbatim
    for line in (
        "proxy_next_upstream error timeout http_502 http_503 non_idempotent;",
        "proxy_next_upstream_tries 3;",
        "proxy_connect_timeout 2s;",
    ):
        assert line in rendered
    assert "server 127.0.0.1:1001 max_fails=3 fail_timeout=10s;" in rendered
    directives = "\n".join(x for x in rendered.splitlines() if not x.strip().startswith("#"))
    assert "resolver" not in directives and "posenc-replica" not in directives
    conf = tmp_path / "nginx.conf"
    conf.write_text(rendered)
    check = subprocess.run(
        [NGINX, "-t", "-e", "stderr", "-c", str(conf), "-p", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


class Load:
    """Bounded request loops through nginx, in threads; failures counted after client retries."""

    def __init__(self, url: str, expected: dict[int, bytes], per_thread: int, threads: int):
        self.url, self.expected = url, expected
        self.per_thread, self.threads = per_thread, threads
        self.done = 0
        self.failed: list[str] = []
        self.client_retries = Counter[str]()
        self.lock = threading.Lock()

    def one(self, client: httpx.Client, i: int) -> None:
        method, path, payload = REQUESTS[i % len(REQUESTS)]
        for attempt in range(4):
            try:
                if method == "GET":
                    r = client.get(path, params=payload)  # type: ignore[arg-type]
                else:
                    r = client.post(path, json=payload)
                if r.status_code in (502, 503, 504):
                    raise httpx.HTTPStatusError(str(r.status_code), request=r.request, response=r)
                if r.status_code != 200 or r.content != self.expected[i % len(REQUESTS)]:
                    with self.lock:
                        self.failed.append(f"{method} {path}: {r.status_code} {r.text[:100]}")
                    return
                break
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                with self.lock:
                    self.client_retries[type(exc).__name__] += 1
                if attempt == 3:
                    with self.lock:
                        self.failed.append(f"{method} {path}: {exc!r}")
                    return
                time.sleep(0.2)
        with self.lock:
            self.done += 1

    def worker(self, seed: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for k in range(self.per_thread):
                self.one(client, seed + k)

    def run_in_background(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.worker, args=(s,)) for s in range(self.threads)]
        for t in threads:
            t.start()
        return threads


def requests_served(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("posenc_requests_total{") and 'route="/v1/' in line
    )


# httpcore leaves the socket of a connection whose replica died mid-body to the garbage
# collector; the test collects it before it ends, so the warning is this test's, and named here.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)
def test_killing_a_replica_under_load_fails_no_request(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    env = clean_env(POSENC_DEVICE="cpu", POSENC_ACCESS_LOG="false")
    logs = [tmp_path / f"replica{i}.log" for i in range(2)]
    replicas = [start_service(p, log, env) for p, log in zip(ports, logs, strict=True)]
    nginx_port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(render_nginx_conf(ports, nginx_port, tmp_path))
    nginx_log = tmp_path / "nginx.out"
    nginx = None
    restarted = None
    try:
        for proc, port, log in zip(replicas, ports, logs, strict=True):
            wait_ready(proc, f"http://{HOST}:{port}", log)
        with nginx_log.open("wb") as out:
            nginx = subprocess.Popen(
                [NGINX, "-e", "stderr", "-c", str(conf), "-p", str(tmp_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://{HOST}:{nginx_port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, nginx_log.read_text()
            time.sleep(0.1)
        # the right answers, straight from the replica that will survive
        expected = {}
        with httpx.Client(base_url=f"http://{HOST}:{ports[1]}") as direct:
            for i, (method, path, payload) in enumerate(REQUESTS):
                r = (
                    direct.get(path, params=payload)  # type: ignore[arg-type]
                    if method == "GET"
                    else direct.post(path, json=payload)
                )
                assert r.status_code == 200
                expected[i] = r.content

        load = Load(url, expected, per_thread=150, threads=4)
        threads = load.run_in_background()
        deadline = time.monotonic() + 120
        while load.done < 150:  # a quarter of the load, then the kill
            assert any(t.is_alive() for t in threads) and time.monotonic() < deadline, (
                load.done,
                load.failed[:3],
            )
            time.sleep(0.02)
        victim = replicas[0]
        done_at_kill = load.done
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
        total = load.per_thread * load.threads
        survivor_count = requests_served(f"http://{HOST}:{ports[1]}")

        # back in rotation: the same replica on the same port; nginx tries it again after
        # fail_timeout (10 s) and then shares the load with it
        restarted = start_service(ports[0], logs[0], env)
        wait_ready(restarted, f"http://{HOST}:{ports[0]}", logs[0])
        back = Load(url, expected, per_thread=10, threads=2)
        deadline = time.monotonic() + 40
        served_again = 0.0
        rounds = 0
        while served_again == 0 and time.monotonic() < deadline:
            for t in back.run_in_background():
                t.join(timeout=120)
            rounds += 1
            served_again = requests_served(f"http://{HOST}:{ports[0]}")
            if served_again == 0:
                time.sleep(1)
    finally:
        for proc in (nginx, restarted, *replicas):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM) if proc is nginx else stop_service(proc)
        if nginx is not None:
            nginx.wait(timeout=30)
        gc.collect()  # the cut-off connections' sockets, while this test's filter holds

    access = (tmp_path / "access.log").read_text().splitlines()
    failovers = [line for line in access if "," in line.split(" ", 2)[2]]
    upstreams = Counter(
        addr.strip()
        for line in access
        for addr in line.split(" ")[2].split(",")
        if addr.strip() not in ("-", "")
    )
    statuses = Counter(line.split(" ")[1] for line in access)
    summary = (
        f"requests {total} (+{rounds * 20} after the restart), done before the kill "
        f"{done_at_kill}, failed {len(load.failed) + len(back.failed)}, client retries "
        f"{dict(load.client_retries)}, nginx failovers {len(failovers)}, nginx statuses "
        f"{dict(statuses)}, upstream attempts {dict(upstreams)}, survivor served "
        f"{survivor_count:.0f} /v1/ requests, restarted replica served {served_again:.0f}"
    )
    print(summary)  # for the report
    assert load.failed == [] and back.failed == [], summary
    assert load.done == total and back.done == rounds * 20, summary
    assert served_again > 0, summary  # back in rotation
    # the kill happened under load: nginx saw the dead replica and moved requests off it
    assert failovers or sum(load.client_retries.values()) > 0, summary
    assert nginx is not None and nginx.returncode == 0, nginx_log.read_text()

"""posenc on Ray Serve for real: a local Ray cluster bound to 127.0.0.1 alone, running the
project's own deploy/ray/serve.yaml (only its HTTP port changed to a free one), with two replicas
of the service. Through Serve's proxy the answers are byte for byte the plain service's; one
replica is killed with SIGKILL under load and no request is lost (each ends 200, after at most
the client's retry of a 503 with Retry-After); Serve starts a new replica; every replica's
/metrics is reachable through the proxy's ``/metrics``; and nothing the cluster runs listens
beyond loopback. The cluster is started and stopped by PID (deploy/ray/cluster.py), never with
``ray stop``, which would end every Ray on the machine.

Skipped where Ray Serve is not installed (the ``ray`` extra; the test lock has it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from tests.helpers import GPT2_NAME, clean_env

pytest.importorskip("ray.serve", reason="Ray Serve is not installed (the ray extra)")

from deploy.ray.cluster import CONFIG, LOOPBACK, LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

# (method, path, query, JSON body): JSON, safetensors, npy and raw; GET and POST; a model's
# embeddings; the catalog; an error (422 with the numbers)
REQUESTS = [
    ("GET", "/v1/encodings/sinusoidal", {"seq_len": 64, "d_model": 32}, None),
    ("POST", "/v1/encodings/rope", {"format": "safetensors"}, {"seq_len": 256, "head_dim": 64}),
    ("POST", "/v1/biases/alibi", {"format": "safetensors"}, {"seq_len": 64, "num_heads": 8}),
    ("POST", "/v1/encodings/sinusoidal", {"format": "npy"}, {"seq_len": 300, "d_model": 48}),
    ("POST", "/v1/embed", {"format": "raw", "model": GPT2_NAME}, {"input_ids": [[1, 2, 3, 4]] * 3}),
    ("GET", "/v1/presets", {}, None),
    ("GET", "/v1/encodings/sinusoidal", {"seq_len": -3, "d_model": 32}, None),
]


@pytest.fixture(scope="module")
def cluster(gpt2_file: Path) -> Iterator[LocalCluster]:
    """The cluster with the same POSENC_MODELS as the ``live_server`` fixture's service."""
    env = clean_env(POSENC_MODELS=f"{GPT2_NAME}={gpt2_file}", POSENC_ACCESS_LOG="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    running = LocalCluster(env=env)
    running.start()
    try:
        running.wait_ready(timeout=300)
        yield running
    finally:
        # POSENC_KEEP_RAY_FILES=1 keeps the cluster's logs (its workdir) for a failure's study
        left = running.stop(keep_files=bool(os.environ.get("POSENC_KEEP_RAY_FILES")))
        assert left == [], f"Ray processes still alive after stop: {left}"


def send(client: httpx.Client, request: tuple) -> httpx.Response:
    method, path, query, body = request
    return client.request(method, path, params=query, json=body)


def test_config_sets_the_replicas_and_their_share() -> None:
    """serve.yaml is a valid Serve config whose serving deployment has num_replicas and each
    replica's CPU and GPU share; the autoscaling variant differs only in its autoscaling."""
    from ray.serve.schema import ServeDeploySchema

    for name in ("serve.yaml", "serve-autoscaling.yaml"):
        ServeDeploySchema.model_validate(yaml.safe_load((CONFIG.parent / name).read_text()))
    config = yaml.safe_load(CONFIG.read_text())
    (app,) = config["applications"]
    assert app["import_path"] == "deploy.ray.app:build"
    deployments = {d["name"]: d for d in app["deployments"]}
    service = deployments["PosencService"]
    assert service["num_replicas"] == 2
    assert set(service["ray_actor_options"]) >= {"num_cpus", "num_gpus"}
    assert config["http_options"]["host"] == "127.0.0.1"
    assert app["runtime_env"]["env_vars"]["POSENC_DEVICE"] == "auto"
    scaled = yaml.safe_load((CONFIG.parent / "serve-autoscaling.yaml").read_text())
    (scaled_service,) = [
        d for d in scaled["applications"][0]["deployments"] if d["name"] == "PosencService"
    ]
    auto = scaled_service["autoscaling_config"]
    assert auto["min_replicas"] <= auto["max_replicas"] and auto["target_ongoing_requests"] > 0
    assert "num_replicas" not in scaled_service


def test_everything_listens_on_loopback_only(cluster: LocalCluster) -> None:
    pids = set(cluster.pids())
    out = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True, check=True).stdout
    listening = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            address = line.split()[3].rsplit(":", 1)[0].strip("[]")
            listening.append((address, line.split()[3]))
    ports = {a.rsplit(":", 1)[1] for _, a in listening}
    # the GCS, Serve's HTTP proxy, the raylet and the agents at least
    assert {str(cluster.gcs_port), str(cluster.http_port)} <= ports, listening
    assert len(listening) >= 5, listening
    outside = [
        line
        for line in out.splitlines()
        if {int(p) for p in re.findall(r"pid=(\d+)", line)} & pids
        and line.split()[3].rsplit(":", 1)[0].strip("[]") not in LOOPBACK
    ]
    assert outside == [], outside


def test_answers_are_byte_identical_to_one_service(cluster: LocalCluster, live_server: str) -> None:
    with (
        httpx.Client(base_url=live_server, timeout=60) as plain,
        httpx.Client(base_url=cluster.url, timeout=60) as ray,
    ):
        for request in REQUESTS:
            a, b = send(plain, request), send(ray, request)
            assert (b.status_code, b.headers["content-type"]) == (
                a.status_code,
                a.headers["content-type"],
            ), request
            assert b.content == a.content, request
            assert b.headers.get("etag") == a.headers.get("etag"), request
            assert b.headers.get_list("x-request-id") == [b.headers["x-request-id"]]
        statuses = [send(ray, r).status_code for r in REQUESTS]
    assert statuses.count(200) == len(REQUESTS) - 1 and statuses[-1] == 422
    # the same models from the same paths (only the time each process loaded them differs)
    models = [
        httpx.get(url + "/v1/models", timeout=30).json() for url in (live_server, cluster.url)
    ]
    for answer in models:
        for model in answer["models"]:
            model.pop("loaded_at")
    assert models[0] == models[1] and GPT2_NAME in {m["name"] for m in models[1]["models"]}


def replica_metrics(url: str) -> dict[str, float]:
    """``{replica: its /v1/ requests counted}`` from the proxy's ``/metrics``."""
    text = httpx.get(url + "/metrics", timeout=30).text
    served: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"posenc_requests_total\{(.*)\} (\S+)$", line)
        if m and 'route="/v1/' in m.group(1):
            replica = re.search(r'replica="([^"]+)"', m.group(1))
            assert replica is not None, line
            served[replica.group(1)] = served.get(replica.group(1), 0.0) + float(m.group(2))
    return served


def test_metrics_of_every_replica(cluster: LocalCluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=60) as client:
        for i in range(40):  # spread over both replicas by Serve's router
            assert (
                client.get(
                    "/v1/encodings/sinusoidal", params={"seq_len": 8 + i, "d_model": 8}
                ).status_code
                == 200
            )
    served = replica_metrics(cluster.url)
    assert len(served) == 2 and all(v > 0 for v in served.values()), served
    text = httpx.get(cluster.url + "/metrics", timeout=30).text
    assert text.count("# TYPE posenc_requests_total counter") == 1


def whole_cos_table(r: httpx.Response, seq_len: int) -> bool:
    """The raw answer is RoPE's whole cos table (T, 128) float32: row 0 all ones, row 1's first
    column cos(1) (angle 1 x base^0)."""
    if r.headers.get("x-tensor-shape") != f"{seq_len},128" or len(r.content) != seq_len * 512:
        return False
    table = np.frombuffer(r.content, dtype="<f4").reshape(seq_len, 128)
    return bool((table[0] == 1).all()) and table[1, 0] == np.float32(np.cos(1.0))


class Load:
    """Request loops in threads through the proxy; a 503 with Retry-After is retried as
    posenc.client does, anything else that is not the expected 200 is a failure."""

    def __init__(self, url: str, threads: int, per_thread: int) -> None:
        self.url, self.threads, self.per_thread = url, threads, per_thread
        self.done = 0
        self.failed: list[str] = []
        self.retried_503 = 0
        self.lock = threading.Lock()

    def one(self, client: httpx.Client, seq_len: int) -> None:
        body = {"seq_len": seq_len, "head_dim": 128}
        for _attempt in range(5):
            r = client.post("/v1/encodings/rope", params={"format": "raw"}, json=body)
            if r.status_code == 503 and "retry-after" in r.headers:
                with self.lock:
                    self.retried_503 += 1
                time.sleep(float(r.headers["retry-after"]))
                continue
            ok = r.status_code == 200 and whole_cos_table(r, seq_len)
            with self.lock:
                if ok:
                    self.done += 1
                else:
                    self.failed.append(f"{r.status_code} {r.headers} {r.text[:200]}")
            return
        with self.lock:
            self.failed.append(f"seq_len {seq_len}: still 503 after 5 tries")

    def worker(self, seed: int) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as client:
            for k in range(self.per_thread):
                self.one(client, 4096 + 97 * seed + k)  # a new table each time: no cache hits

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.worker, args=(s,)) for s in range(self.threads)]
        for t in threads:
            t.start()
        return threads


def resent(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("posenc_ray_requests_resent_total{")
    )


def test_killing_a_replica_under_load_loses_no_request(cluster: LocalCluster) -> None:
    before = cluster.replica_pids()
    assert len(before) == 2, before
    load = Load(cluster.url, threads=4, per_thread=40)
    threads = load.start()
    deadline = time.monotonic() + 120
    while load.done < 30:
        assert time.monotonic() < deadline and not load.failed, (load.done, load.failed[:3])
        time.sleep(0.01)
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    done_at_kill = load.done
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    summary = (
        f"{load.threads * load.per_thread} requests, {done_at_kill} done before the kill, "
        f"{len(load.failed)} failed, {load.retried_503} client retries of a 503, "
        f"{resent(cluster.url):.0f} sent again by the ingress"
    )
    print(summary)  # for the report
    assert load.failed == [], summary
    assert load.done == load.threads * load.per_thread, summary
    # Serve replaces the replica: two again, one of them new
    deadline = time.monotonic() + 180
    while True:
        now = cluster.replica_pids()
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, (before, now)
        time.sleep(1)
    assert len(set(now) - set(before)) == 1
    # and the new one serves: every live replica appears in /metrics with requests
    deadline = time.monotonic() + 120
    with httpx.Client(base_url=cluster.url, timeout=60) as client:
        while True:
            for i in range(10):
                r = client.get(
                    "/v1/encodings/sinusoidal", params={"seq_len": 5, "d_model": 2 + 2 * i}
                )
                assert r.status_code == 200
            served = replica_metrics(cluster.url)
            if len(served) == 2:
                break
            assert time.monotonic() < deadline, served

"""Operations: health and readiness, /v1/info, /v1/models, /v1/presets, /metrics, the offline
/docs with a working example for every endpoint, and ``python -m service`` itself (bad
configuration ends it with one clear line, ``--workers`` serves through the import string)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import posenc
from service.app import create_app
from tests.helpers import (
    CONTRACT_PRESETS,
    clean_env,
    free_port,
    make_settings,
    run_service,
    start_service,
    stop_service,
    wait_ready,
)

CONTRACT_OPERATIONS = {
    ("post", "/v1/encodings/sinusoidal"),
    ("get", "/v1/encodings/sinusoidal"),
    ("post", "/v1/encodings/learned"),
    ("get", "/v1/encodings/learned"),
    ("post", "/v1/encodings/rope"),
    ("get", "/v1/encodings/rope"),
    ("post", "/v1/biases/alibi"),
    ("get", "/v1/biases/alibi"),
    ("post", "/v1/biases/relative"),
    ("get", "/v1/biases/relative"),
    ("post", "/v1/position-ids"),
    ("post", "/v1/embed"),
    ("get", "/v1/models"),
    ("get", "/v1/presets"),
    ("get", "/v1/info"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
}


def test_health_and_readiness(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json() == {"status": "ready"}


def test_not_ready_before_the_lifespan_has_loaded_the_models(gpt2_file) -> None:
    client = TestClient(create_app(make_settings(gpt2_file)))  # no `with`: no lifespan
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert r.status_code == 503 and "loading" in r.json()["detail"]
    r = client.post("/v1/encodings/sinusoidal", json={"seq_len": 1, "d_model": 2})
    assert r.status_code == 503 and r.json()["detail"]


def test_info_reports_versions_device_and_limits(api: httpx.Client) -> None:
    info = api.get("/v1/info").json()
    assert info["version"] == posenc.__version__
    assert info["torch_version"] == torch.__version__
    assert info["device"] == "cpu"
    assert info["cuda_available"] is torch.cuda.is_available()
    assert info["limits"]["max_elements"] == 67_108_864
    assert info["limits"]["cache_bytes"] == 256 * 1024 * 1024
    assert info["auth"] is False
    assert info["formats"]["safetensors"] == "application/vnd.safetensors"


def test_presets_cover_the_contract_families(api: httpx.Client) -> None:
    presets = {p["name"]: p for p in api.get("/v1/presets").json()["presets"]}
    for name, kind in CONTRACT_PRESETS.items():
        assert presets[name]["kind"] == kind, name
        assert presets[name]["source"] and isinstance(presets[name]["params"], dict)
    assert presets["llama-2-7b"]["params"]["head_dim"] == 128
    assert presets["llama-3.1-8b"]["params"]["scaling"]["factor"] == 8.0
    only = api.get("/v1/presets", params={"kind": "alibi"}).json()["presets"]
    assert {p["name"] for p in only} >= {"bloom-7b1", "mpt-7b"}
    assert all(p["kind"] == "alibi" for p in only)
    assert api.get("/v1/presets/t5-base").json()["params"]["num_heads"] == 12
    # a Hugging Face repository id, slash included, names its preset
    assert api.get("/v1/presets/meta-llama/Llama-3.1-8B").json()["name"] == "llama-3.1-8b"


def test_unknown_names_in_paths_are_404(api: httpx.Client) -> None:
    r = api.get("/v1/presets/llama-9")
    assert r.status_code == 404 and "llama-2-7b" in r.json()["detail"]
    r = api.get("/v1/models/nope")
    assert r.status_code == 404 and "posenc-base" in r.json()["detail"]
    assert api.get("/v1/models/posenc-base").json()["vocab_size"] > 0


def test_metrics_exposition_parses_and_counts_requests(app_client: httpx.Client) -> None:
    app_client.post("/v1/encodings/sinusoidal", json={"seq_len": 2, "d_model": 2, "offset": 99})
    app_client.post("/v1/encodings/sinusoidal", json={"seq_len": 0, "d_model": 2})
    r = app_client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    requests = {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in families["posenc_requests"].samples
        if s.name == "posenc_requests_total"
    }
    assert requests[("/v1/encodings/sinusoidal", "POST", "200")] >= 1
    assert requests[("/v1/encodings/sinusoidal", "POST", "422")] >= 1
    latency = families["posenc_request_duration_seconds"]
    counts = [s for s in latency.samples if s.name.endswith("_count")]
    assert any(s.labels["route"] == "/v1/encodings/sinusoidal" and s.value >= 2 for s in counts)
    assert "posenc_cache_hits" in families and "posenc_cache_misses" in families


# ---------------------------------------------------------------------------------------------
# OpenAPI and /docs
# ---------------------------------------------------------------------------------------------


def test_openapi_lists_every_contract_operation(api: httpx.Client) -> None:
    spec = api.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    operations = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert operations >= CONTRACT_OPERATIONS
    rope_get = spec["paths"]["/v1/encodings/rope"]["get"]
    params = {p["name"]: p for p in rope_get["parameters"]}
    assert {"positions", "scaling", "head_dim", "format", "encoding", "index"} <= set(params)
    post = spec["paths"]["/v1/encodings/rope"]["post"]
    assert {"200", "406", "413", "422"} <= set(post["responses"])
    assert "application/vnd.safetensors" in post["responses"]["200"]["content"]


def _schema(spec: dict, ref_or_schema: dict) -> dict:
    ref = ref_or_schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else ref_or_schema


def test_every_endpoint_has_a_working_example(api: httpx.Client) -> None:
    """The examples /docs shows (request-body examples, query-parameter examples) all work."""
    spec = api.get("/openapi.json").json()
    tried = 0
    for path, operations in spec["paths"].items():
        if "{" in path:
            continue
        for method, op in operations.items():
            if method == "post" and "requestBody" not in op:  # takes no body: /v1/models/reload
                r = api.post(path)
                assert r.status_code == 200, (path, r.text)
                tried += 1
            elif method == "post":
                schema = _schema(spec, op["requestBody"]["content"]["application/json"]["schema"])
                assert schema.get("examples"), path
                for example in schema["examples"]:
                    r = api.post(path, json=example)
                    assert r.status_code == 200, (path, example, r.text)
                    tried += 1
            elif method == "get":
                query = {
                    p["name"]: p["example"]
                    for p in op.get("parameters", [])
                    if p["in"] == "query" and "example" in p
                }
                missing = [
                    p["name"]
                    for p in op.get("parameters", [])
                    if p.get("required") and p["name"] not in query
                ]
                assert not missing, (path, missing)
                r = api.get(path, params=query)
                assert r.status_code == 200, (path, query, r.text)
                tried += 1
    assert tried >= 19  # 8 body examples of the 7 POSTs, 11 GETs


def test_docs_are_served_offline(app_client: httpx.Client) -> None:
    html = app_client.get("/docs")
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    text = html.text
    assert "/docs/static/swagger-ui-bundle.js" in text and "/docs/static/swagger-ui.css" in text
    assert "cdn" not in text.lower() and "https://" not in text
    js = app_client.get("/docs/static/swagger-ui-bundle.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert len(js.content) > 100_000
    assert app_client.get("/docs/static/swagger-ui.css").status_code == 200
    # Swagger UI 4 renders OpenAPI 3.0 only: /docs reads a 3.0 rendering of the same operations
    spec30 = app_client.get("/docs/openapi.json").json()
    spec31 = app_client.get("/openapi.json").json()
    assert spec30["openapi"] == "3.0.3"
    assert spec30["paths"].keys() == spec31["paths"].keys()
    text30 = str(spec30)
    assert "'type': 'null'" not in text30 and "'const'" not in text30
    rope = spec30["components"]["schemas"]["RopeRequest"]
    assert rope["example"] == spec31["components"]["schemas"]["RopeRequest"]["examples"][0]
    assert rope["properties"]["head_dim"]["nullable"] is True


# ---------------------------------------------------------------------------------------------
# python -m service
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_a_gpu_stops_start_up_with_a_clear_message() -> None:
    result = run_service(clean_env(POSENC_DEVICE="cuda"))
    assert result.returncode != 0
    assert "CUDA is not available" in result.stderr and "POSENC_DEVICE" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_bad_configuration_stops_start_up_with_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "absent.safetensors"
    result = run_service(clean_env(POSENC_MODELS=f"mine={missing}"))
    assert result.returncode != 0 and str(missing) in result.stderr
    assert "Traceback" not in result.stderr
    result = run_service(clean_env(POSENC_MAX_ELEMENTS="lots"))
    assert result.returncode != 0 and "POSENC_MAX_ELEMENTS" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_service(clean_env(POSENC_MODELS="no-equals-sign"))
    assert result.returncode != 0 and "name=path" in result.stderr


@pytest.mark.slow
def test_workers_serve_through_the_import_string(tmp_path: Path, gpt2_file: Path) -> None:
    port = free_port()
    log = tmp_path / "workers.log"
    env = clean_env(POSENC_DEVICE="cpu", POSENC_MODELS=f"tiny-gpt2={gpt2_file}")
    proc = start_service(port, log, env, "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        bodies = {
            httpx.post(
                url + "/v1/embed", json={"input_ids": [[1, 2]], "model": "tiny-gpt2"}
            ).content
            for _ in range(6)
        }
        assert len(bodies) == 1  # every worker gives the same bytes
        # uvicorn's supervisor serves nothing: it must not import torch (~200 MiB) to check
        # POSENC_DEVICE; a child process does that check.
        assert _rss_mib(proc.pid) < 150, f"supervisor RSS {_rss_mib(proc.pid)} MiB"
    finally:
        stop_service(proc)
    assert proc.returncode == 0, log.read_text()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.mark.parametrize("device", ["cpu", "auto", "cuda:99", "tpu"])
def test_device_check_in_a_child_process_says_what_the_in_process_check_says(device: str) -> None:
    from service.__main__ import device_problem

    in_process = device_problem(device, isolated=False)
    assert device_problem(device, isolated=True) == in_process
    assert (in_process is None) == (device in ("cpu", "auto"))


def test_workers_with_an_unusable_device_stop_with_one_clear_line() -> None:
    result = run_service(clean_env(POSENC_DEVICE="cuda:99"), "--workers", "2")
    assert result.returncode == 2
    assert "POSENC_DEVICE='cuda:99'" in result.stderr and "cuda:99" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("access_log", ["true", "false"])
def test_access_log_setting_turns_the_per_request_line_on_and_off(
    tmp_path: Path, access_log: str
) -> None:
    port = free_port()
    log = tmp_path / "service.log"
    env = clean_env(POSENC_DEVICE="cpu", POSENC_ACCESS_LOG=access_log)
    proc = start_service(port, log, env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        assert httpx.get(url + "/v1/info").status_code == 200
    finally:
        stop_service(proc)
    logged = '"GET /v1/info HTTP/1.1" 200' in log.read_text()
    assert logged is (access_log == "true"), log.read_text()[-2000:]


def test_live_server_answers_errors_without_tracebacks(
    live_client: httpx.Client, live_log: Path
) -> None:
    """Error paths through the real server: JSON 4xx, the process healthy, nothing in its log."""
    r = live_client.post("/v1/embed", json={"input_ids": [[10**6]]})
    assert r.status_code == 422 and "input_ids[0][0]" in r.json()["detail"]
    scaling = {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}
    r = live_client.post(
        "/v1/encodings/rope", json={"seq_len": 2, "head_dim": 8, "scaling": scaling}
    )
    assert r.status_code == 422 and "scaling" in r.text
    r = live_client.get("/v1/biases/alibi?num_heads=x&seq_len=2")
    assert r.status_code == 422
    assert live_client.get("/healthz").status_code == 200
    log = live_log.read_text(errors="replace")
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]

"""Regression tests of issue 11: no body, of any bytes or media type, gives a 5xx, and a request
for absurd sizes is refused from its numbers without allocating (the RSS of the serving process
does not grow), in process and over a real uvicorn.

What found these: schemathesis' ``{"head_dim": 1121509132, "seq_len": 2729208}`` (a 413 after
40 s and 4.5 GB: ``rope_inv_freq`` ran before the size check), and any non-UTF-8 body sent
without a JSON Content-Type (a 500: ``UnicodeDecodeError`` echoing the bytes in the 422).
"""

from __future__ import annotations

import resource
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

TABLE_POSTS = [
    "/v1/encodings/sinusoidal",
    "/v1/encodings/learned",
    "/v1/encodings/rope",
    "/v1/biases/alibi",
    "/v1/biases/relative",
]
TOKEN_POSTS = ["/v1/embed", "/v1/position-ids"]
ALL_POSTS = TABLE_POSTS + TOKEN_POSTS

JSON = "application/json"
HOSTILE_BODIES: list[tuple[str, bytes, str | None]] = [
    ("non-utf8 as json", b'{"seq_len": "\xff\xfe"}', JSON),
    ("utf16 bom as json", b"\xff\xfe{\x00}\x00", JSON),
    ("non-utf8 no type", b"\xff\xfe\x00\x01garbage\x80", None),
    ("non-utf8 text/plain", b"\xc3\x28\xa0\xa1", "text/plain"),
    ("binary as json", bytes(range(256)), JSON),
    ("binary as octet-stream", bytes(range(256)) * 4, "application/octet-stream"),
    (
        "binary as npy",
        b"\x93NUMPY\x01\x00\x10\x00{'descr': 'x'}\n" + bytes(range(64)),
        "application/x-npy",
    ),
    ("binary as safetensors", b"\xff" * 8 + b"{}", "application/vnd.safetensors"),
    ("json array", b"[1, 2, 3]", JSON),
    ("json string", b'"seq_len"', JSON),
    ("json null", b"null", JSON),
    ("json number", b"1e999", JSON),
    ("json with NaN", b'{"seq_len": NaN, "d_model": Infinity}', JSON),
    (
        "json object of wrong types",
        b'{"seq_len": {"a": []}, "input_ids": "abc", "head_dim": true}',
        JSON,
    ),
    ("json ids of wrong shape", b'{"input_ids": [[[1]]], "num_heads": [1]}', JSON),
    ("huge ids", b'{"input_ids": [[' + b"9" * 5000 + b"]]}", JSON),
    ("deep open brackets", b"[" * 200_000, JSON),
    ("deep balanced arrays", b"[" * 50_000 + b"]" * 50_000, JSON),
    ("deep balanced objects", b'{"a":' * 20_000 + b"1" + b"}" * 20_000, JSON),
    ("json with a charset", b'{"seq_len": 2}', "application/json; charset=latin-1"),
    ("json as form", b"seq_len=2&d_model=4", "application/x-www-form-urlencoded"),
    (
        "multipart",
        b"--x\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--x--\r\n",
        "multipart/form-data; boundary=x",
    ),
    ("bad content type", b'{"seq_len": 2}', "json;;;==//"),
    ("xml", b"<seq_len>2</seq_len>", "application/xml"),
    ("empty json", b"", JSON),
    ("empty no type", b"", None),
    ("whitespace json", b"   \n", JSON),
    ("truncated json", b'{"seq_len": 2, "d_model"', JSON),
]


@pytest.mark.parametrize(
    "name,body,content_type", HOSTILE_BODIES, ids=[b[0] for b in HOSTILE_BODIES]
)
def test_no_body_gives_a_5xx(
    api: httpx.Client, name: str, body: bytes, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type is not None else {}
    for path in ALL_POSTS:
        r = api.post(path, content=body, headers=headers)
        assert r.status_code < 500, (path, r.status_code, r.text[:300])
        if r.status_code != 200:  # a charset-tagged JSON body is fine for some endpoints
            assert 400 <= r.status_code < 500 and r.json()["detail"], (path, r.text)


@pytest.mark.parametrize("path", ALL_POSTS)
def test_json_without_content_type_says_to_send_the_header(api: httpx.Client, path: str) -> None:
    r = api.post(path, content=b'{"seq_len": 4, "d_model": 8, "input_ids": [[1]]}')
    assert r.status_code == 415, r.text
    body = r.json()
    assert "Content-Type: application/json" in body["detail"]
    assert "application/json" in body["accepted"]
    r = api.post(path, content=b'{"seq_len": 4}', headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "'text/plain'" in r.json()["detail"]


def test_unknown_fields_list_the_accepted_names_and_the_closest(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/sinusoidal", json={"seq_len": 2, "d_model": 4, "ofset": 1})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["type"] == "extra_forbidden" and item["loc"] == ["body", "ofset"]
    assert "offset, dtype" in item["msg"] and "did you mean 'offset'?" in item["msg"]
    r = api.post(
        "/v1/encodings/rope",
        json={"seq_len": 2, "head_dim": 8, "scaling": {"type": "linear", "facter": 2}},
    )
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "scaling", "facter"] and "did you mean 'factor'?" in item["msg"]
    r = api.get("/v1/biases/alibi", params={"num_heads": 2, "seq_len": 2, "mod": "causal"})
    (item,) = r.json()["detail"]
    assert item["loc"] == ["query", "mod"] and "did you mean 'mode'?" in item["msg"]
    assert "format" in item["msg"]  # the output options are accepted query names too
    r = api.post("/v1/embed", json={"input_ids": [[1]], "zzzz": 1})
    (item,) = r.json()["detail"]
    assert "accepted fields: input_ids, model" in item["msg"] and "did you mean" not in item["msg"]


def test_config_keys_in_a_body_are_mapped_to_the_body_field(api: httpx.Client) -> None:
    """rope_theta was answered "did you mean 'mrope_section'?": a config.json key gets its body
    field, or "send it inside config" where the body has none."""
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "head_dim": 8, "rope_theta": 5e5})
    (item,) = r.json()["detail"]
    assert "'rope_theta' is a config.json key: its body field is base" in item["msg"]
    assert "did you mean" not in item["msg"]
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "head_dim": 8, "hidden_size": 64})
    (item,) = r.json()["detail"]
    assert "send it inside config" in item["msg"]
    r = api.post(
        "/v1/encodings/rope",
        json={"seq_len": 2, "head_dim": 8, "partial_rotary_factor": 0.5, "rope_scaling": None},
    )
    messages = {tuple(e["loc"]): e["msg"] for e in r.json()["detail"]}
    assert "body field is rotary_dim" in messages[("body", "partial_rotary_factor")]
    assert "body field is scaling" in messages[("body", "rope_scaling")]
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "num_attention_heads": 4})
    (item,) = r.json()["detail"]
    assert "body field is num_heads" in item["msg"]
    r = api.post("/v1/encodings/learned", json={"d_model": 4, "max_position_embeddings": 8})
    (item,) = r.json()["detail"]
    assert "body field is seq_len" in item["msg"]


def test_unknown_preset_and_model_say_did_you_mean(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "preset": "llama-3.1-8"})
    assert r.status_code == 422
    body = r.json()
    assert body["type"] == "unknown_name" and body["suggestion"] == "llama-3.1-8b"
    assert "did you mean 'llama-3.1-8b'?" in body["detail"]
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "preset": "blom-7b1"})
    assert r.json()["suggestion"] == "bloom-7b1"
    # a name in another case, or the Hub repository id, is the preset itself
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "preset": "bigscience/BLOOM-7b1"})
    assert r.status_code == 200 and r.json()["tensors"]["bias"]["shape"] == [32, 2, 2]
    # another model's name is never offered a preset with other tables
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "preset": "Phi-3.5-MoE-instruct"})
    assert r.status_code == 422 and "suggestion" not in r.json()
    r = api.post("/v1/embed", json={"input_ids": [[1]], "model": "posenc-bas"})
    assert r.status_code == 422 and r.json()["suggestion"] == "posenc-base"
    r = api.post("/v1/embed", json={"input_ids": [[1]], "model": "qqqqqqqq"})
    assert r.status_code == 422 and "suggestion" not in r.json()
    assert r.json()["type"] == "unknown_name"


# Huge dimensions with tiny lengths (and the schemathesis case): 413 or 422 from the numbers.
HUGE = 1_121_509_132
ABSURD_REQUESTS: list[tuple[str, str, dict]] = [
    ("POST", "/v1/encodings/rope", {"head_dim": HUGE, "seq_len": 1}),
    ("POST", "/v1/encodings/rope", {"head_dim": HUGE, "seq_len": 2_729_208}),
    ("POST", "/v1/encodings/rope", {"head_dim": 2**52, "positions": [0, 2**50]}),
    (
        "POST",
        "/v1/encodings/rope",
        {
            "head_dim": HUGE,
            "seq_len": 1,
            "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        },
    ),
    (
        "POST",
        "/v1/encodings/rope",
        {
            "head_dim": HUGE,
            "seq_len": 1,
            "scaling": {
                "type": "longrope",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "short_factor": [1.0],
                "long_factor": [1.0],
            },
        },
    ),
    ("GET", "/v1/encodings/rope", {"head_dim": str(HUGE), "seq_len": "2729208"}),
    ("POST", "/v1/encodings/sinusoidal", {"d_model": 2**52, "seq_len": 1}),
    ("POST", "/v1/encodings/sinusoidal", {"d_model": 2, "seq_len": 2**53}),
    ("POST", "/v1/encodings/learned", {"d_model": 2**52, "seq_len": 1}),
    ("POST", "/v1/biases/alibi", {"num_heads": 2**52, "seq_len": 1}),
    ("POST", "/v1/biases/alibi", {"num_heads": 1, "seq_len": 1, "key_len": 2**53}),
    ("POST", "/v1/biases/relative", {"seq_len": 1, "num_heads": 2**52}),
    ("POST", "/v1/biases/relative", {"seq_len": 1, "num_heads": 1, "num_buckets": 2**52}),
    (
        "POST",
        "/v1/biases/relative",
        {"seq_len": 1, "num_heads": 1, "bucketing": "clip", "max_distance": 2**52},
    ),
    ("GET", "/v1/biases/relative", {"seq_len": "1", "num_heads": "4", "num_buckets": str(2**50)}),
]


def _send(client: httpx.Client, method: str, path: str, fields: dict) -> httpx.Response:
    if method == "GET":
        return client.get(path, params=fields)
    return client.post(path, json=fields)


def _server_pid(base_url: str) -> int:
    """The pid of the ``python -m service --port P`` process serving ``base_url``."""
    port = str(urlparse(base_url).port)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"service" in argv and b"--port" in argv and port.encode() in argv:
            return int(proc.name)
    raise AssertionError(f"no service process on port {port}")


def _peak_rss_kib(pid: int | None) -> int:
    """VmHWM (peak resident set) of ``pid``, or of this process for None, in KiB."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _check_refusals(client: httpx.Client, pid: int | None) -> None:
    for method, path, fields in ABSURD_REQUESTS:  # warm up the routes and the error paths
        _send(client, method, path, fields)
    before = _peak_rss_kib(pid)
    for method, path, fields in ABSURD_REQUESTS:
        r = _send(client, method, path, fields)
        assert r.status_code in (413, 422), (path, fields, r.status_code, r.text[:300])
        body = r.json()
        if r.status_code == 413:
            assert body["requested"] > body["limit"] and str(body["limit"]) in body["detail"]
    grown_mib = (_peak_rss_kib(pid) - before) / 1024
    assert grown_mib < 64, f"peak RSS grew by {grown_mib:.0f} MiB while refusing"


def test_absurd_sizes_are_refused_without_allocating_in_process(app_client: httpx.Client) -> None:
    _check_refusals(app_client, None)


def test_absurd_sizes_are_refused_without_allocating_live(
    live_server: str, live_client: httpx.Client
) -> None:
    _check_refusals(live_client, _server_pid(live_server))


def test_the_schemathesis_case_is_the_contract_413(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/rope", json={"head_dim": HUGE, "seq_len": 2_729_208})
    assert r.status_code == 413
    assert r.json()["requested"] == 2 * 2_729_208 * HUGE + HUGE // 2
    # a longrope request within the limit still has its factors checked (422, not 413)
    r = api.post(
        "/v1/encodings/rope",
        json={
            "head_dim": 8,
            "seq_len": 2,
            "scaling": {
                "type": "longrope",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "short_factor": [1.0],
                "long_factor": [1.0],
            },
        },
    )
    assert r.status_code == 422 and "rotary_dim/2 = 4 entries, got 1" in r.text
    # and the attention scaling still reaches meta
    r = api.post(
        "/v1/encodings/rope",
        json={
            "head_dim": 8,
            "seq_len": 2,
            "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        },
    )
    assert r.status_code == 200
    assert r.json()["meta"]["attention_scaling"] == pytest.approx(
        0.1 * __import__("math").log(4.0) + 1.0
    )

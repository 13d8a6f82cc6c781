"""Streamed tables (API.md 1.1 "Streaming large tables"), through a real uvicorn on loopback.

A service with a small ``POSENC_MAX_ELEMENTS`` streams every table endpoint in raw, npy and
safetensors; each body is compared with

- the whole table computed by the library (sinusoidal_table, rope_cos_sin, alibi_bias,
  relative_buckets / relative_bias, deberta_relative_positions, swin_relative_position_index,
  learned_table), decoded with numpy's and safetensors' own
  readers, and
- the body the default service (limit not reached, the whole-table path) sends for the same
  request: the same bytes and the same ETag.

Then: Content-Length is the body's length; JSON and PNG stay 413 and say what streams; the
stream limit is a 413; a ~1 GiB raw stream read in chunks leaves the server's RSS growth under
256 MiB; a client that goes away mid-stream does not break the server.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load_numpy
from safetensors.torch import load as st_load

from posenc import alibi_bias, alibi_slopes, learned_table, sinusoidal_table
from posenc.attention.masks import (
    attention_bias,
    attention_mask,
    combined_blocks,
    mask_inputs,
    mask_rule,
)
from posenc.attention.position_bias import position_bias
from posenc.facts.model_configs import model_config
from posenc.relative_schemes.relative import (
    deberta_relative_positions,
    num_relative_buckets,
    relative_bias,
    relative_bias_table,
    relative_buckets,
    swin_relative_position_index,
)
from posenc.relative_schemes.relative_sinusoidal import relative_sinusoidal_table
from posenc.rope import RopeScaling, rope_cos_sin
from posenc.rope.xpos import xpos_scales
from tests.helpers import HOST, clean_env, free_port, start_service, stop_service, wait_ready

MAX_ELEMENTS = 4096


def _serve(tmp: Path, **env: str) -> Iterator[str]:
    port = free_port()
    log = tmp / "service.log"
    proc = start_service(port, log, clean_env(POSENC_DEVICE="cpu", **env))
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        yield url
    finally:
        stop_service(proc)


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live service whose whole-response limit is 4096 elements (everything bigger streams)."""
    yield from _serve(
        tmp_path_factory.mktemp("stream"),
        POSENC_MAX_ELEMENTS=str(MAX_ELEMENTS),
        POSENC_MAX_STREAM_ELEMENTS=str(2**31),
    )


@pytest.fixture(scope="module")
def client(small_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=small_server, timeout=120) as c:
        yield c


def _yarn() -> dict[str, Any]:
    return {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}


_MASK_PADDING = [[0] * 5 + [1] * 55, [1] * 58 + [0] * 2]


# (route, body, {tensor name: the whole table from the library}), each over 4096 elements.
def _cases() -> list[tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]]:
    rope = rope_cos_sin(
        seq_len=600, rotary_dim=48, scaling=RopeScaling.from_dict(_yarn()), dtype=torch.float16
    )
    rope_i = rope_cos_sin([3, 0, 70_000, 5] * 40, rotary_dim=32, layout="interleaved")
    n_log = num_relative_buckets(num_buckets=32, max_distance=128, bucketing="log")
    buckets = relative_buckets(70, 90)
    return [
        (
            "sinusoidal",
            "/v1/encodings/sinusoidal",
            {"seq_len": 300, "d_model": 64, "offset": 1000, "layout": "concat"},
            {"encoding": sinusoidal_table(seq_len=300, d_model=64, offset=1000, layout="concat")},
        ),
        (
            "sinusoidal-f64-positions",
            "/v1/encodings/sinusoidal",
            {"positions": [9, 1, 2**20, 4] * 30, "d_model": 40, "dtype": "float64"},
            {"encoding": sinusoidal_table([9, 1, 2**20, 4] * 30, d_model=40, dtype=torch.float64)},
        ),
        (
            "learned",
            "/v1/encodings/learned",
            {"seq_len": 333, "d_model": 24, "seed": 7},
            {"encoding": learned_table(333, 24, seed=7)},
        ),
        (
            "rope-yarn-f16",
            "/v1/encodings/rope",
            {
                "seq_len": 600,
                "head_dim": 64,
                "rotary_dim": 48,
                "scaling": _yarn(),
                "dtype": "float16",
            },
            {"cos": rope.cos, "sin": rope.sin, "inv_freq": rope.inv_freq},
        ),
        (
            "rope-interleaved-positions",
            "/v1/encodings/rope",
            {"positions": [3, 0, 70_000, 5] * 40, "head_dim": 32, "layout": "interleaved"},
            {"cos": rope_i.cos, "sin": rope_i.sin, "inv_freq": rope_i.inv_freq},
        ),
        (
            "alibi",
            "/v1/biases/alibi",
            {"num_heads": 6, "seq_len": 40, "key_len": 50},
            {"bias": alibi_bias(6, 40, 50), "slopes": alibi_slopes(6)},
        ),
        (
            "relative",
            "/v1/biases/relative",
            {"seq_len": 70, "key_len": 90, "num_heads": 3, "seed": 4, "dtype": "bfloat16"},
            {
                "buckets": buckets,
                "bias": relative_bias(
                    buckets, relative_bias_table(n_log, 3, seed=4), dtype=torch.bfloat16
                ),
            },
        ),
        (
            "relative-buckets-only",
            "/v1/biases/relative",
            {"seq_len": 80, "bucketing": "clip", "max_distance": 16},
            {"buckets": relative_buckets(80, bucketing="clip", max_distance=16)},
        ),
        (
            "relative-deberta-v3",
            "/v1/biases/relative",
            {"seq_len": 50, "key_len": 700, "config": model_config("deberta-v3-base")},
            {
                "buckets": deberta_relative_positions(
                    50, 700, position_buckets=256, max_position=512
                )
            },
        ),
        (
            "relative-deberta-plain",
            "/v1/biases/relative",
            {"seq_len": 70, "bucketing": "deberta"},
            {"buckets": deberta_relative_positions(70)},
        ),
        (
            "relative-swin",
            "/v1/biases/relative",
            {"config": {**model_config("swin-tiny"), "window_size": 9}, "num_heads": 2},
            {
                "buckets": swin_relative_position_index(9),
                "bias": relative_bias(
                    swin_relative_position_index(9), relative_bias_table(17**2, 2, seed=0)
                ),
            },
        ),
        (
            "relative-sinusoidal",
            "/v1/encodings/relative-sinusoidal",
            {"seq_len": 300, "d_model": 16, "dtype": "float16"},
            {"encoding": relative_sinusoidal_table(300, 16, dtype=torch.float16)},
        ),
        (
            "masks-sliding-padded",
            "/v1/masks",
            {
                "seq_len": 40,
                "key_len": 60,
                "kind": "sliding",
                "window": 7,
                "attention_mask": _MASK_PADDING,
            },
            {
                "mask": attention_mask(
                    mask_rule("sliding", window=7), 40, 60, attention_mask=_MASK_PADDING
                )
            },
        ),
        (
            "masks-chunked-packed-bias-f16",
            "/v1/masks",
            {
                "seq_len": 70,
                "kind": "chunked",
                "chunk_size": 5,
                "cu_seqlens": [0, 9, 40, 70],
                "as": "bias",
                "dtype": "float16",
            },
            {
                "bias": attention_bias(
                    mask_rule("chunked", chunk_size=5),
                    70,
                    cu_seqlens=[0, 9, 40, 70],
                    dtype=torch.float16,
                )
            },
        ),
        (
            "masks-combined-relative",
            "/v1/masks",
            {
                "seq_len": 40,
                "key_len": 60,
                "kind": "sliding",
                "window": 7,
                "attention_mask": _MASK_PADDING,
                "as": "combined",
                "position_bias": "relative",
                "num_heads": 3,
                "seed": 2,
            },
            {
                "combined": combined_blocks(
                    mask_rule("sliding", window=7),
                    mask_inputs(
                        mask_rule("sliding", window=7), 40, 60, attention_mask=_MASK_PADDING
                    ),
                    position_bias("relative", num_heads=3, seed=2),
                ).whole()
            },
        ),
        (
            "xpos",
            "/v1/encodings/xpos",
            {"seq_len": 300, "dim": 16, "scale_base": 64},
            dict(
                zip(
                    ("query_scale", "key_scale"), xpos_scales(300, 16, scale_base=64.0), strict=True
                )
            ),
        ),
    ]


CASES = _cases()


def _decode_raw(r: httpx.Response) -> np.ndarray:
    shape = [int(s) for s in r.headers["x-tensor-shape"].split(",")]
    dtype = r.headers["x-tensor-dtype"]
    if dtype == "bfloat16":
        bits = np.frombuffer(r.content, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    np_dtype = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int64": "<i8", "bool": "?"}[
        dtype
    ]
    return np.frombuffer(r.content, dtype=np_dtype).reshape(shape)


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
@pytest.mark.parametrize(("case", "route", "body", "whole"), CASES, ids=[c[0] for c in CASES])
def test_streamed_table_equals_whole_table(
    client: httpx.Client,
    app_client: httpx.Client,
    fmt: str,
    case: str,
    route: str,
    body: dict[str, Any],
    whole: dict[str, torch.Tensor],
) -> None:
    elements = sum(t.numel() for t in whole.values())
    assert elements > MAX_ELEMENTS  # so the small server must stream
    primary = next(iter(whole))
    if fmt == "npy" and whole[primary].dtype == torch.bfloat16:
        r = client.post(route, params={"format": fmt}, json=body)
        assert r.status_code == 406 and "bfloat16" in r.json()["detail"]
        return
    r = client.post(route, params={"format": fmt}, json=body)
    assert r.status_code == 200, r.text
    assert int(r.headers["content-length"]) == len(r.content)
    # no compute or encode times: the headers left before the compute, and zeros would look
    # measured (they were "compute;dur=0.000, encode;dur=0.000")
    assert r.headers["server-timing"] == 'cache;desc="stream"'

    if fmt == "raw":
        assert r.headers["x-tensor-name"] == primary
        np.testing.assert_array_equal(_decode_raw(r), _as_numpy(whole[primary]))
    elif fmt == "npy":
        np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), whole[primary].numpy())
    else:
        got = st_load(r.content)
        assert set(got) == set(whole)
        for name, table in whole.items():
            assert got[name].dtype == table.dtype and torch.equal(got[name], table), name
        if all(t.dtype != torch.bfloat16 for t in whole.values()):
            for name, arr in st_load_numpy(r.content).items():
                np.testing.assert_array_equal(arr, whole[name].numpy())

    # The whole-table path (the default limit) gives the same bytes and the same ETag.
    ref = app_client.post(route, params={"format": fmt}, json=body)
    assert ref.status_code == 200
    assert "stream" not in ref.headers["server-timing"]
    assert r.content == ref.content
    assert r.headers["etag"] == ref.headers["etag"]


def test_get_stream_has_etag_and_304(client: httpx.Client) -> None:
    params = {"seq_len": 200, "d_model": 64, "format": "npy"}
    r = client.get("/v1/encodings/sinusoidal", params=params)  # type: ignore[arg-type]
    assert r.status_code == 200 and r.headers["cache-control"].startswith("public")
    etag = r.headers["etag"]
    again = client.get("/v1/encodings/sinusoidal", params=params, headers={"If-None-Match": etag})  # type: ignore[arg-type]
    assert again.status_code == 304 and again.content == b""
    post = client.post(
        "/v1/encodings/sinusoidal",
        params={"format": "npy"},
        json={"seq_len": 200, "d_model": 64},
        headers={"If-None-Match": etag},
    )
    assert post.status_code == 412


@pytest.mark.parametrize("fmt", ["json", "png"])
def test_json_and_png_over_the_limit_say_what_streams(client: httpx.Client, fmt: str) -> None:
    r = client.post(
        "/v1/encodings/sinusoidal", params={"format": fmt}, json={"seq_len": 300, "d_model": 64}
    )
    assert r.status_code == 413
    detail = r.json()["detail"]
    assert "19200 elements" in detail and f"limit of {MAX_ELEMENTS} elements" in detail
    assert "raw, npy and safetensors stream" in detail and str(2**31) in detail


def test_over_the_stream_limit_is_413_at_once(client: httpx.Client) -> None:
    """2^31 elements asked: refused from the numbers, before anything is allocated."""
    r = client.post(
        "/v1/encodings/rope", params={"format": "raw"}, json={"seq_len": 2**24, "head_dim": 128}
    )
    assert r.status_code == 413
    detail = r.json()["detail"]
    assert f"{2 * 2**24 * 128 + 64} elements" in detail and "POSENC_MAX_STREAM_ELEMENTS" in detail


def test_mrope_rows_over_the_limit_are_413_not_streamed(client: httpx.Client) -> None:
    """Three rows of M-RoPE positions are computed whole: over the whole-response limit they are
    a 413 naming the limit, in every format (one row of the same positions streams)."""
    section = {"head_dim": 16, "mrope_section": [2, 3, 3]}
    rows = [list(range(200)), list(range(200)), list(range(200))]  # 2 * 200 * 16 + 8 elements
    for fmt in ("raw", "npy", "safetensors", "json"):
        r = client.post(
            "/v1/encodings/rope", params={"format": fmt}, json={**section, "positions": rows}
        )
        assert r.status_code == 413, (fmt, r.text)
        assert r.json()["requested"] == 2 * 200 * 16 + 8
    one_row = client.post(
        "/v1/encodings/rope",
        params={"format": "raw"},
        json={**section, "positions": list(range(200))},
    )
    assert one_row.status_code == 200
    want = rope_cos_sin(list(range(200)), rotary_dim=16).cos.numpy()  # t = h = w: plain RoPE
    np.testing.assert_allclose(
        np.frombuffer(one_row.content, "<f4").reshape(200, 16), want, rtol=0, atol=1e-6
    )


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _server_pid(port: int) -> int:
    """The pid listening on ``port`` (the service started by the fixture), from /proc."""
    import os

    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "0A":
                inode = fields[9]
    assert inode is not None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return int(pid)
            except OSError:
                continue
    raise RuntimeError(f"no process listens on {port}")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/encodings/sinusoidal", {"seq_len": 1, "d_model": 2**30}),
        ("/v1/encodings/rope", {"seq_len": 1, "head_dim": 2**29}),
        ("/v1/encodings/learned", {"seq_len": 1, "d_model": 2**30}),
        ("/v1/biases/alibi", {"seq_len": 1, "num_heads": 1, "key_len": 2**30}),
        ("/v1/biases/relative", {"seq_len": 1, "key_len": 2**30}),
    ],
)
def test_a_row_too_wide_to_stream_is_413_with_nothing_made(
    client: httpx.Client, small_server: str, path: str, body: dict[str, Any]
) -> None:
    """Huge dimensions with tiny lengths: within POSENC_MAX_STREAM_ELEMENTS, but one row (the
    last dimension) would be a block of gigabytes. A 413 that says so, and the server's RSS
    does not move (a float64 row of 2^30 would be 8 GiB)."""
    pid = _server_pid(int(small_server.rsplit(":", 1)[1]))
    before = _rss_bytes(pid)
    r = client.post(path, params={"format": "raw"}, json=body)
    assert r.status_code == 413, r.text
    assert "one row of" in r.json()["detail"] and r.json()["limit"] == MAX_ELEMENTS
    assert _rss_bytes(pid) - before < 64 * 2**20


def test_gigabyte_raw_stream_keeps_memory_bounded(client: httpx.Client, small_server: str) -> None:
    """RoPE cos for 2^21 positions x 128 (1 GiB of float32), read in chunks; the server's RSS
    grows by less than 256 MiB, and the bytes are the closed form at sampled rows."""
    pid = _server_pid(int(small_server.rsplit(":", 1)[1]))
    seq_len, dim = 2**21, 128
    client.post(
        "/v1/encodings/rope", params={"format": "raw"}, json={"seq_len": 9000, "head_dim": 8}
    )
    before = _rss_bytes(pid)
    peak = before
    total = 0
    row_bytes = dim * 4
    sampled: dict[int, np.ndarray] = {}
    want_rows = {0, 1, 12_345, seq_len // 2 + 7, seq_len - 1}
    carry = b""
    with client.stream(
        "POST",
        "/v1/encodings/rope",
        params={"format": "raw"},
        json={"seq_len": seq_len, "head_dim": dim},
    ) as r:
        assert r.status_code == 200
        assert int(r.headers["content-length"]) == seq_len * dim * 4
        for chunk in r.iter_bytes(1 << 20):
            # keep the sampled rows (a row may straddle two chunks)
            first_row = (total - len(carry)) // row_bytes
            data = carry + chunk
            for row in want_rows:
                lo = (row - first_row) * row_bytes
                if lo >= 0 and lo + row_bytes <= len(data):
                    sampled[row] = np.frombuffer(data[lo : lo + row_bytes], "<f4").copy()
            carry = data[len(data) - len(data) % row_bytes :]
            total += len(chunk)
            if total % (64 << 20) < len(chunk):
                peak = max(peak, _rss_bytes(pid))
    peak = max(peak, _rss_bytes(pid))
    assert total == seq_len * dim * 4
    print(f"RSS growth streaming 1 GiB: {(peak - before) / 2**20:.0f} MiB")
    assert peak - before < 256 * 2**20, f"RSS grew by {(peak - before) / 2**20:.0f} MiB"
    assert set(sampled) == want_rows
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    for row, got in sampled.items():
        want = np.cos(row * inv_freq)
        np.testing.assert_allclose(got[: dim // 2], want, atol=1e-6, rtol=0)
        np.testing.assert_array_equal(got[: dim // 2], got[dim // 2 :])


def test_client_going_away_mid_stream_leaves_the_server_well(
    client: httpx.Client, small_server: str
) -> None:
    pid = _server_pid(int(small_server.rsplit(":", 1)[1]))
    before = _rss_bytes(pid)
    for _ in range(3):
        with httpx.stream(
            "POST",
            small_server + "/v1/encodings/sinusoidal",
            params={"format": "raw"},
            json={"seq_len": 2**20, "d_model": 256},
            timeout=60,
        ) as r:
            assert r.status_code == 200
            it = r.iter_raw(1 << 16)
            for _ in range(4):
                next(it)
        # leaving the block closes the connection with most of the 1 GiB unsent
    assert client.get("/healthz").status_code == 200
    r = client.post(
        "/v1/encodings/sinusoidal", params={"format": "raw"}, json={"seq_len": 100, "d_model": 64}
    )
    assert r.status_code == 200
    np.testing.assert_array_equal(_decode_raw(r), sinusoidal_table(seq_len=100, d_model=64).numpy())
    time.sleep(0.5)
    assert _rss_bytes(pid) - before < 256 * 2**20


def test_many_block_stream_equals_whole_table(client: httpx.Client) -> None:
    """48 MiB of sinusoidal table: six 8 MiB blocks through the reused buffers, every byte."""
    seq_len, d_model = 2**16, 192
    with client.stream(
        "POST",
        "/v1/encodings/sinusoidal",
        params={"format": "npy"},
        json={"seq_len": seq_len, "d_model": d_model, "offset": 3},
    ) as r:
        assert r.status_code == 200
        body = b"".join(r.iter_bytes())
    assert len(body) == int(r.headers["content-length"])
    got = np.load(io.BytesIO(body))
    want = sinusoidal_table(seq_len=seq_len, d_model=d_model, offset=3).numpy()
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# Client and CLI: streamed tables written to disk as they arrive
# ---------------------------------------------------------------------------------------------


def test_client_save_table_writes_the_stream(small_server: str, tmp_path: Path) -> None:
    from posenc.client import PayloadTooLarge, PosencClient

    seen: list[tuple[int, int | None]] = []
    with PosencClient(small_server) as pc:
        saved = pc.save_table(
            "rope",
            tmp_path / "cos.npy",
            seq_len=40_000,
            head_dim=64,
            progress=lambda done, total: seen.append((done, total)),
            chunk_size=1 << 16,
        )
        assert saved.nbytes == (tmp_path / "cos.npy").stat().st_size
        np.testing.assert_array_equal(
            np.load(tmp_path / "cos.npy"), rope_cos_sin(seq_len=40_000, rotary_dim=64).cos.numpy()
        )
        assert seen[-1] == (saved.nbytes, saved.nbytes) and len(seen) > 10
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)

        saved = pc.save_table(
            "alibi", tmp_path / "a.safetensors", format="safetensors", method="GET",
            num_heads=4, seq_len=100, mode="symmetric",
        )  # fmt: skip
        got = st_load((tmp_path / "a.safetensors").read_bytes())
        assert torch.equal(got["bias"], alibi_bias(4, 100, mode="symmetric"))
        assert torch.equal(got["slopes"], alibi_slopes(4))

        with pytest.raises(PayloadTooLarge, match="POSENC_MAX_STREAM_ELEMENTS"):
            pc.save_table("rope", tmp_path / "huge.bin", format="raw", seq_len=2**24, head_dim=128)
    assert not (tmp_path / "huge.bin").exists() and not (tmp_path / "huge.bin.part").exists()


def test_cli_table_url_streams_to_disk_with_progress(
    small_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from posenc.cli import main

    out = tmp_path / "pe.bin"
    code = main(
        ["table", "sinusoidal", "--url", small_server, "--seq-len", "5000", "--d-model", "128",
         "--offset", "9", "-o", str(out)]
    )  # fmt: skip
    assert code == 0
    want = sinusoidal_table(seq_len=5000, d_model=128, offset=9)
    assert out.read_bytes() == want.numpy().tobytes()
    err = capsys.readouterr().err
    assert f"done, {5000 * 128 * 4} bytes" in err and "100.0%" in err

    out = tmp_path / "rel.safetensors"
    args = ["table", "relative", "--url", small_server, "--seq-len", "80", "--num-heads", "2",
            "-o", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    assert capsys.readouterr().err == ""
    got = st_load(out.read_bytes())
    buckets = relative_buckets(80)
    assert torch.equal(got["buckets"], buckets)
    table = relative_bias_table(32, 2, seed=0)
    assert torch.equal(got["bias"], relative_bias(buckets, table))

    code = main(
        ["table", "sinusoidal", "--url", small_server, "--seq-len", "100", "--d-model", "64",
         "-o", str(tmp_path / "x.png")]
    )  # fmt: skip
    assert code == 2  # png over the limit: 413, a usage error
    assert "raw, npy and safetensors stream" in capsys.readouterr().err


def test_cli_local_bin_is_the_raw_bytes(tmp_path: Path) -> None:
    from posenc.cli import main

    out = tmp_path / "cos.bin"
    assert main(["table", "rope", "--seq-len", "50", "--head-dim", "16", "-o", str(out), "-q"]) == 0
    assert out.read_bytes() == rope_cos_sin(seq_len=50, rotary_dim=16).cos.numpy().tobytes()


def test_info_gives_the_stream_limit(client: httpx.Client) -> None:
    limits = client.get("/v1/info").json()["limits"]
    assert limits["max_elements"] == MAX_ELEMENTS and limits["max_stream_elements"] == 2**31


def test_a_stream_holds_its_blocks_from_the_budget(gpt2_file: Path) -> None:
    """A streamed table takes the bytes of the blocks it holds at once from the in-flight
    budget (the one ``budget.reserve``: three output buffers of its largest block, the float64
    scratch of one block, the request's overhead), not the table's; they are all given back
    once the body has been sent."""
    from fastapi.testclient import TestClient

    from service.admission.budget import REQUEST_OVERHEAD
    from service.app import create_app
    from service.responses.bodies import STREAM_BLOCK_BYTES, STREAM_HELD_BLOCKS
    from tests.helpers import make_settings

    app = create_app(make_settings(gpt2_file, max_elements=MAX_ELEMENTS))
    with TestClient(app) as c:
        r = c.post(
            "/v1/encodings/sinusoidal",
            params={"format": "npy"},
            json={"seq_len": 2**15, "d_model": 256},
        )
        budget = app.state.posenc.budget
        assert (budget.in_flight, budget.holders) == (0, 0)
    assert r.status_code == 200
    want = sinusoidal_table(seq_len=2**15, d_model=256).numpy()
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), want)
    rows = STREAM_BLOCK_BYTES // (256 * 4)  # rows of the largest block (4 blocks here)
    block = rows * 256
    assert budget.peak == STREAM_HELD_BLOCKS * block * 4 + 16 * block + REQUEST_OVERHEAD
    assert budget.peak < 2 * len(r.content)  # a few blocks, not the whole table and its scratch


def test_block_threads_compute_without_the_intra_op_pool() -> None:
    """Stream blocks are computed one per thread (pipelined with sending); the rest of the
    process keeps torch's intra-op thread count."""
    from service.responses.streaming import _BLOCK_THREADS
    from service.responses.threads import libgomp

    before = torch.get_num_threads()
    in_pool = _BLOCK_THREADS.submit(torch.get_num_threads).result()
    if libgomp() is None:
        pytest.skip("torch does not use GNU OpenMP here")
    assert in_pool == 1
    assert torch.get_num_threads() == before


def test_streamed_npy_of_a_bfloat16_table_is_the_whole_paths_406() -> None:
    """npy has no bfloat16: a table streamed past max_elements says so with the 406 the whole
    path gives (it was a 500: the npy header refused the dtype before the 406 was raised)."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    body = {"seq_len": 512, "d_model": 64, "dtype": "bfloat16"}  # 32768 elements
    answers = []
    for limit in (MAX_ELEMENTS, 1 << 20):  # streamed, then whole
        settings = Settings(
            device="cpu", models="", api_key=None, cors_origins="", max_elements=limit
        )
        with TestClient(create_app(settings), raise_server_exceptions=False) as c:
            answers.append(c.post("/v1/encodings/sinusoidal", params={"format": "npy"}, json=body))
    streamed, whole = answers
    assert streamed.status_code == whole.status_code == 406, streamed.text
    assert streamed.json()["detail"] == whole.json()["detail"]
    assert "'encoding' is bfloat16" in streamed.json()["detail"]

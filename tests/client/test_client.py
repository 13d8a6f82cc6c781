"""posenc.client against a real ``python -m service`` (uvicorn on loopback).

Values are checked against closed forms computed here in numpy float64 (never against the
service's own code): the sinusoidal table of Vaswani et al. §3.5, RoPE's ``base**(-2i/R)``
frequencies, ALiBi's 8-head slopes ``2**-1 … 2**-8`` (Press et al.), T5's exact buckets for
distances below ``max_exact``, ``torch.manual_seed(s); nn.Embedding(...)`` tables, and a GPT-2
style checkpoint's ``wte[ids] + wpe[pos]``. The retry policy's own tests (backoff, attempts,
``Retry-After``) are in test_retry.py.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

import posenc
from posenc.client import (
    AsyncPosencClient,
    NotAcceptable,
    PayloadTooLarge,
    PosencClient,
    PosencHTTPError,
    TensorResult,
    Unauthorized,
    ValidationError,
)
from tests.helpers import GPT2_NAME, clean_env, free_port, start_service, stop_service, wait_ready
from tests.references import sinusoidal

API_KEY = "s3cret-test-key"


@pytest.fixture(scope="module")
def client(live_server: str):
    with PosencClient(live_server, timeout=60) as c:
        yield c


# ------------------------------------------------------------------------------ tensor endpoints


def test_sinusoidal_equals_float64_formula_in_every_format(client: PosencClient) -> None:
    ref = sinusoidal(np.arange(48), 16).astype(np.float32)
    result = client.sinusoidal(seq_len=48, d_model=16)
    assert isinstance(result, TensorResult)
    assert result.keys() == ["encoding"]
    assert result.encoding.dtype == np.float32 and result.encoding.shape == (48, 16)
    np.testing.assert_allclose(result.encoding, ref, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(result.encoding[0], np.tile([0.0, 1.0], 8))
    # Fields left as None are not sent: the server's defaults show in meta.
    assert result.meta["base"] == 10000.0 and result.meta["layout"] == "interleaved"
    for fmt in ("json", "npy", "raw"):
        other = client.sinusoidal(seq_len=48, d_model=16, format=fmt)
        np.testing.assert_array_equal(other.primary, result.encoding, err_msg=fmt)
    assert client.sinusoidal(seq_len=48, d_model=16, format="json").meta == result.meta


def test_sinusoidal_stays_exact_at_large_positions(client: PosencClient) -> None:
    positions = np.array([0, 1, 1000, 2**20 - 1, 999_999])
    result = client.sinusoidal(positions=positions.tolist(), d_model=64, offset=0)
    ref = sinusoidal(positions, 64).astype(np.float32)
    np.testing.assert_allclose(result.encoding, ref, rtol=0, atol=1e-6)
    shifted = client.sinusoidal(seq_len=3, d_model=64, offset=2**20 - 3, format="json")
    ref = sinusoidal(np.arange(2**20 - 3, 2**20), 64).astype(np.float32)
    np.testing.assert_allclose(shifted.encoding, ref, rtol=0, atol=1e-6)


def test_get_and_post_give_the_same_bytes(client: PosencClient) -> None:
    scaling = {"type": "linear", "factor": 4.0}
    post = client.rope(seq_len=10, head_dim=16, scaling=scaling, positions=None)
    get = client.rope(seq_len=10, head_dim=16, scaling=scaling, method="GET")
    assert get.content == post.content
    assert get.headers["etag"] == post.headers["etag"]
    by_positions = client.sinusoidal(positions=[3, 1, 4], d_model=8, method="GET")
    np.testing.assert_array_equal(
        by_positions.encoding, client.sinusoidal(positions=[3, 1, 4], d_model=8).encoding
    )


def test_rope_tables_follow_the_frequency_formula(client: PosencClient) -> None:
    result = client.rope(seq_len=32, head_dim=16, rotary_dim=8, base=500.0, format="json")
    assert result.keys() == ["cos", "sin", "inv_freq"]
    inv_freq = 500.0 ** (-np.arange(0, 8, 2) / 8)  # (R/2,)
    angles = np.arange(32)[:, None] * np.concatenate([inv_freq, inv_freq])[None, :]  # half layout
    np.testing.assert_allclose(result.inv_freq, inv_freq.astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(result.cos, np.cos(angles).astype(np.float32), rtol=0, atol=1e-6)
    np.testing.assert_allclose(result.sin, np.sin(angles).astype(np.float32), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(result.cos[0], np.ones(8, np.float32))  # identity at 0
    assert result.meta["attention_scaling"] == 1.0 and result.meta["rotary_dim"] == 8
    # Linear scaling divides the frequencies by the factor.
    linear = client.rope(seq_len=4, head_dim=8, scaling={"type": "linear", "factor": 2.0})
    np.testing.assert_allclose(
        linear.inv_freq, (1e4 ** (-np.arange(0, 8, 2) / 8) / 2).astype(np.float32), rtol=1e-6
    )


def test_rope_preset_values_are_overridable(client: PosencClient) -> None:
    preset = client.rope(preset="llama-3.1-8b", seq_len=2)
    assert preset.cos.shape == (2, 128) and preset.meta["base"] == 500000.0
    assert preset.meta["scaling"]["type"] == "llama3"
    # None is not sent (the preset's value stays); extra= sends an explicit null.
    small = client.rope(
        preset="llama-3.1-8b", seq_len=2, head_dim=64, rotary_dim=32, extra={"scaling": None}
    )
    assert small.cos.shape == (2, 32) and small.meta["scaling"] is None
    kept = client.rope(preset="llama-3.1-8b", seq_len=2, scaling=None)
    assert kept.meta["scaling"]["type"] == "llama3"
    get = client.rope(
        preset="llama-3.1-8b", seq_len=2, head_dim=64, rotary_dim=32, extra={"scaling": None},
        method="GET",
    )  # fmt: skip
    assert get.content == small.content


def test_alibi_slopes_and_causal_bias(client: PosencClient) -> None:
    slopes = 2.0 ** -np.arange(1, 9)  # Press et al.: 8 heads give 2^-1 … 2^-8
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    dist = (i - j).astype(np.float64)
    ref = np.where(j <= i, -slopes[:, None, None] * dist, -np.inf).astype(np.float32)  # (H, T, S)
    for fmt in ("safetensors", "json"):  # JSON sends -inf as null
        result = client.alibi(num_heads=8, seq_len=5, format=fmt)
        assert result.keys() == ["bias", "slopes"]
        np.testing.assert_array_equal(result.slopes, slopes.astype(np.float32))
        np.testing.assert_array_equal(result.bias, ref, err_msg=fmt)
    sym = client.alibi(num_heads=8, seq_len=2, key_len=4, mode="symmetric", as_="torch")
    q = np.arange(2)[:, None] + 2  # query i sits at i + S - T
    ref_sym = -slopes[:, None, None] * np.abs(q - np.arange(4)[None, :])
    torch.testing.assert_close(sym.bias, torch.from_numpy(ref_sym.astype(np.float32)))


def test_relative_buckets_and_seeded_bias(client: PosencClient) -> None:
    result = client.relative(seq_len=6, num_heads=3)
    rel = np.arange(6)[None, :] - np.arange(6)[:, None]  # j - i, all |rel| < max_exact = 8
    np.testing.assert_array_equal(result.buckets, np.where(rel > 0, 16, 0) + np.abs(rel))
    assert result.buckets.dtype == np.int64
    torch.manual_seed(0)
    table = torch.nn.Embedding(32, 3).weight.detach().numpy()  # (NB, H)
    np.testing.assert_array_equal(result.bias, table[result.buckets].transpose(2, 0, 1))
    assert client.relative(seq_len=2).keys() == ["buckets"]  # no bias without num_heads


def test_learned_is_the_seeded_embedding_and_the_models_table(
    client: PosencClient, gpt2_file: Path
) -> None:
    torch.manual_seed(7)
    expected = torch.nn.Embedding(5, 6).weight.detach()
    got = client.learned(seq_len=5, d_model=6, seed=7, as_="torch", device="cpu")
    torch.testing.assert_close(got.encoding, expected, rtol=0, atol=0)
    wpe = load_file(str(gpt2_file))["wpe.weight"]
    from_model = client.learned(seq_len=7, model=GPT2_NAME)
    np.testing.assert_array_equal(from_model.encoding, wpe[:7].numpy())


def test_position_ids_of_a_ragged_batch(client: PosencClient) -> None:
    right = client.position_ids(input_ids=[[5, 6, 7], [8]], pad_token_id=0)
    np.testing.assert_array_equal(right.position_ids, [[0, 1, 2], [0, 0, 0]])
    np.testing.assert_array_equal(right.attention_mask, [[1, 1, 1], [1, 0, 0]])
    left = client.position_ids(
        input_ids=[[5, 6, 7], [8, 9]], padding_side="left", start=2, pad_position=1
    )
    np.testing.assert_array_equal(left.position_ids, [[2, 3, 4], [1, 2, 3]])
    np.testing.assert_array_equal(left.attention_mask, [[1, 1, 1], [0, 1, 1]])


def test_embed_is_token_plus_position_embedding(client: PosencClient, gpt2_file: Path) -> None:
    weights = load_file(str(gpt2_file))
    wte, wpe = weights["wte.weight"], weights["wpe.weight"]
    result = client.embed(input_ids=[[3, 1, 4], [1, 5]], model=GPT2_NAME, as_="torch")
    assert result.keys() == ["embeddings", "position_ids", "attention_mask"]
    torch.testing.assert_close(result.embeddings[0], wte[[3, 1, 4]] + wpe[:3], rtol=0, atol=0)
    torch.testing.assert_close(result.embeddings[1, :2], wte[[1, 5]] + wpe[:2], rtol=0, atol=0)
    assert torch.count_nonzero(result.embeddings[1, 2]) == 0  # the padded slot


def test_bfloat16_decodes_to_numpy_float32_or_torch_bfloat16(client: PosencClient) -> None:
    ref = torch.from_numpy(sinusoidal(np.arange(8), 8)).to(torch.bfloat16)
    as_torch = client.sinusoidal(seq_len=8, d_model=8, dtype="bfloat16", as_="torch")
    assert as_torch.encoding.dtype == torch.bfloat16
    torch.testing.assert_close(as_torch.encoding, ref, rtol=0, atol=0)
    for fmt in ("safetensors", "json", "raw"):
        as_numpy = client.sinusoidal(seq_len=8, d_model=8, dtype="bfloat16", format=fmt)
        assert as_numpy.encoding.dtype == np.float32  # numpy has no bfloat16; exact upcast
        np.testing.assert_array_equal(as_numpy.encoding, ref.float().numpy(), err_msg=fmt)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_tensors_on_cuda(client: PosencClient) -> None:
    result = client.alibi(num_heads=4, seq_len=3, as_="torch", device="cuda")
    assert result.bias.device.type == "cuda" and result.slopes.device.type == "cuda"
    np.testing.assert_array_equal(result.slopes.cpu().numpy(), 2.0 ** -np.arange(2, 10, 2))


def test_png_heatmap_bytes(client: PosencClient) -> None:
    result = client.alibi(num_heads=4, seq_len=6, format="png", query={"index": 1})
    assert result.media_type == "image/png" and result.tensors == {}
    image = Image.open(io.BytesIO(result.content))
    assert image.format == "PNG" and min(image.size) > 32


# ------------------------------------------------------------------------------ JSON endpoints


def test_catalogue_and_operations(client: PosencClient) -> None:
    models = client.models()
    tiny = next(m for m in models["models"] if m["name"] == GPT2_NAME)
    assert (tiny["vocab_size"], tiny["d_model"], tiny["max_positions"]) == (97, 24, 40)
    assert models["default"] in {m["name"] for m in models["models"]}
    names = {p["name"] for p in client.presets()["presets"]}
    assert {"llama-2-7b", "llama-3.1-8b", "mistral-7b", "bloom-7b1", "t5-base", "gpt2"} <= names
    info = client.info()
    assert info["version"] == posenc.__version__ and info["device"] == "cpu"
    assert client.healthz()["status"] == "ok" and client.readyz()["status"] == "ready"


# ------------------------------------------------------------------------------ errors


def test_validation_error_carries_the_servers_detail(client: PosencClient) -> None:
    with pytest.raises(ValidationError) as info:
        client.sinusoidal(seq_len=4, d_model=7)
    err = info.value
    assert err.status_code == 422 and isinstance(err, PosencHTTPError)
    assert any(item["loc"][-1] == "d_model" for item in err.detail)
    assert "d_model" in str(err)
    with pytest.raises(ValidationError, match="bogus"):
        client.sinusoidal(seq_len=4, d_model=8, extra={"bogus": 1})
    with pytest.raises(ValidationError, match=r"input_ids\[0\]\[1\]"):
        client.embed(input_ids=[[1, 10_000]], model=GPT2_NAME)


def test_payload_too_large_gives_limit_and_size(client: PosencClient) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        # over POSENC_MAX_STREAM_ELEMENTS (2^31): smaller tables stream in safetensors
        client.sinusoidal(seq_len=3_000_000, d_model=1024)
    assert info.value.status_code == 413
    assert "2147483648" in str(info.value.detail) and "3072000000" in str(info.value.detail)


def test_not_acceptable_for_bfloat16_npy(client: PosencClient) -> None:
    with pytest.raises(NotAcceptable, match="bfloat16") as info:
        client.sinusoidal(seq_len=2, d_model=4, dtype="bfloat16", format="npy")
    assert info.value.status_code == 406


def test_client_side_argument_errors() -> None:
    with pytest.raises(ValueError, match="as_='torch'"):
        PosencClient(device="cuda")
    with PosencClient() as c:
        with pytest.raises(ValueError, match="format must be one of"):
            c.sinusoidal(seq_len=2, d_model=4, format="csv")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="as_='torch'"):
            c.sinusoidal(seq_len=2, d_model=4, device="cpu")
    with pytest.raises(ValueError, match="max_attempts"):
        PosencClient(max_attempts=0)


# ------------------------------------------------------------------------------ async


def test_async_client_matches_sync(client: PosencClient, live_server: str) -> None:
    async def run() -> tuple[TensorResult, TensorResult, dict]:
        async with AsyncPosencClient(live_server) as ac:
            sin, ali, info = await asyncio.gather(
                ac.sinusoidal(seq_len=16, d_model=8),
                ac.alibi(num_heads=8, seq_len=3, format="json", as_="torch"),
                ac.info(),
            )
            with pytest.raises(ValidationError):
                await ac.sinusoidal(seq_len=4, d_model=5)
            return sin, ali, info

    sin, ali, info = asyncio.run(run())
    assert sin.content == client.sinusoidal(seq_len=16, d_model=8).content
    torch.testing.assert_close(
        ali.slopes, torch.tensor(2.0 ** -np.arange(1, 9), dtype=torch.float32)
    )
    assert info["version"] == posenc.__version__


# ----------------------------------------------------------------- waiting for the server


class _CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        return super().handle_request(request)


def test_waits_for_a_server_that_starts_late_and_sends_the_api_key(tmp_path: Path) -> None:
    """A client aimed at a port where nothing listens yet keeps retrying until the server is
    up; that server has POSENC_API_KEY, so the same run checks the bearer token."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    transport = _CountingTransport()
    keyed = PosencClient(
        url, api_key=API_KEY, max_attempts=2000, backoff=0.02, backoff_max=0.1, transport=transport
    )
    proc = start_service(port, tmp_path / "keyed.log", clean_env(POSENC_DEVICE="cpu", POSENC_API_KEY=API_KEY))  # fmt: skip
    try:
        result = keyed.alibi(num_heads=8, seq_len=2)  # refused, then 503 while loading, then 200
        assert transport.attempts > 1
        np.testing.assert_array_equal(result.slopes, 2.0 ** -np.arange(1, 9, dtype=np.float32))
        wait_ready(proc, url, tmp_path / "keyed.log")
        with PosencClient(url) as anonymous:
            assert anonymous.healthz()["status"] == "ok"  # stays open
            with pytest.raises(Unauthorized) as info:
                anonymous.sinusoidal(seq_len=2, d_model=4)
            assert info.value.status_code == 401 and "Bearer" in str(info.value.detail)
        with PosencClient(url, api_key="wrong") as wrong, pytest.raises(Unauthorized):
            wrong.models()
        assert keyed.models()["default"]
    finally:
        keyed.close()
        stop_service(proc)

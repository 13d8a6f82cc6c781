"""``.gguf`` files in ``POSENC_MODELS``: ``/v1/embed`` rows are the dequantized token table's
rows (gguf's own ``quants.dequantize`` output, recorded beside each fixture), ``cos``/``sin``
are llama.cpp's unscaled rope (normal mode: interleaved pairs, theta from the file) computed
here in float64, ``/v1/models`` gives the ggml type. Text is tokenized with the file's own
vocabulary: ``/v1/tokenize`` and ``/v1/embed`` ids equal llama.cpp's ``llama_tokenize``
(recorded in tests/fixtures/gguf/tokens.json by scripts/record_gguf_tokens.py); a file with no
vocabulary, or one posenc does not rebuild, is a 422 that names it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from posenc.readers.gguf.tensors import GGML_TYPES
from tests.helpers import (
    ApiClient,
    clean_env,
    json_tensor,
    make_settings,
    one_clear_line,
    run_service,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"
TYPES = [name for name, _, _ in GGML_TYPES.values()]
IDS = [[0, 1, 2, 3], [3, 3, 1, 0]]
ROOT = FIXTURES.parent.parent.parent
TOKENS = json.loads((FIXTURES / "tokens.json").read_text("utf-8"))["files"]
VOCABS = {
    "v-spm": "tests/fixtures/gguf/vocab-spm.gguf",
    "v-llama3": "tests/fixtures/gguf/vocab-bpe-llama-bpe.gguf",
    "v-conv": "tests/fixtures/llamacpp/gguf/converted-llama3.gguf",
}


@pytest.fixture(scope="module")
def api(gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    models = ",".join(
        [f"g-{t.lower()}={FIXTURES / f'tiny-{t}.gguf'}" for t in TYPES]
        + [f"{name}={ROOT / file}" for name, file in VOCABS.items()]
    )
    with TestClient(create_app(make_settings(gpt2_file, models=models))) as client:
        yield client


def test_models_list_the_ggml_type(api: httpx.Client) -> None:
    listed = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    for t in TYPES:
        m = listed[f"g-{t.lower()}"]
        assert m["dtype"] == t and m["gguf"]["tensor_type"] == t
        assert m["shape"] == [4, 256] and m["family"] == "GGUF" and m["model_type"] == "llama"
        assert m["positional"] == "rope" and m["tokenizer"] is False
        assert m["gguf"]["llamacpp_rope"]["freq_base"] == 500000.0


@pytest.mark.parametrize("type_name", TYPES)
def test_embed_rows_are_the_dequantized_rows(api: httpx.Client, type_name: str) -> None:
    r = api.post("/v1/embed", json={"input_ids": IDS, "model": f"g-{type_name.lower()}"})
    assert r.status_code == 200, r.text
    body = r.json()
    table = np.load(FIXTURES / f"tiny-{type_name}.npy")  # gguf's quants.dequantize
    got = json_tensor(body, "embeddings").astype(np.float32)
    assert np.array_equal(got.view(np.uint32), table[np.array(IDS)].view(np.uint32))
    pos = json_tensor(body, "position_ids")
    assert pos.tolist() == [[0, 1, 2, 3]] * 2
    inv = 500000.0 ** (-np.arange(0, 64, 2, dtype=np.float64) / 64)  # (32,)
    angles = np.repeat(pos[..., None] * inv, 2, axis=-1)  # interleaved pairs (B, T, 64)
    assert np.array_equal(
        json_tensor(body, "cos").astype(np.float32), np.cos(angles).astype(np.float32)
    )
    assert np.array_equal(
        json_tensor(body, "sin").astype(np.float32), np.sin(angles).astype(np.float32)
    )


def test_text_is_a_422_that_names_gguf(api: httpx.Client) -> None:
    """The tiny files hold a token table and no vocabulary."""
    r = api.post("/v1/embed", json={"text": ["hello"], "model": "g-q8_0"})
    assert r.status_code == 422, r.text
    assert "GGUF" in r.text and "tokenizer.ggml.tokens" in r.text and "input_ids" in r.text
    assert r.json()["field"] == "model"


@pytest.mark.parametrize("name", list(VOCABS))
def test_tokenize_and_embed_text_give_llama_cpp_ids(api: httpx.Client, name: str) -> None:
    recorded = TOKENS[VOCABS[name]]
    texts = [t for t in recorded if t]
    r = api.post("/v1/tokenize", json={"text": texts, "model": name})
    assert r.status_code == 200, r.text
    assert r.json()["input_ids"] == [recorded[t] for t in texts]
    listed = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    assert listed[name]["tokenizer"] is True
    for text in texts[:3]:  # text embeds as its llama.cpp ids do
        by_text = api.post("/v1/embed", json={"text": [text], "model": name})
        by_ids = api.post("/v1/embed", json={"input_ids": [recorded[text]], "model": name})
        assert by_text.status_code == 200, by_text.text
        got, want = by_text.json(), by_ids.json()
        assert json_tensor(got, "input_ids").tolist() == [recorded[text]]
        del got["tensors"]["input_ids"]
        assert got == want


def test_unsupported_gguf_tokenizer_is_a_422_naming_it(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from tests.helpers import make_settings as settings

    raw = (ROOT / VOCABS["v-llama3"]).read_bytes()
    bert = tmp_path / "bert.gguf"  # tokenizer.ggml.model "gpt2" -> "bert", same length
    bert.write_bytes(
        raw.replace(b"\x04\x00\x00\x00\x00\x00\x00\x00gpt2", b"\x04" + b"\x00" * 7 + b"bert", 1)
    )
    models = f"b={bert}"
    with TestClient(create_app(settings(FIXTURES / "tiny-F32.gguf", models=models))) as client:
        r = client.post("/v1/tokenize", json={"text": ["hello"], "model": "b"})
        assert r.status_code == 422, r.text
        assert "'bert'" in r.json()["detail"] and r.json()["field"] == "model"
        ok = client.post("/v1/embed", json={"input_ids": [[1, 2]], "model": "b"})
        assert ok.status_code == 200, ok.text


def test_truncated_gguf_stops_start_up_with_one_clear_line(tmp_path: Path) -> None:

    bad = tmp_path / "cut.gguf"
    bad.write_bytes((FIXTURES / "tiny-F32.gguf").read_bytes()[:900])
    result = run_service(clean_env(POSENC_MODELS=f"cut={bad}", POSENC_DEVICE="cpu"))
    one_clear_line(result, str(bad), "truncated", "token_embd.weight", "3516 missing")


def _rope_closed_form(pos: np.ndarray, speed: np.ndarray, layout: str, scale: float = 1.0) -> Any:
    """cos, sin ``(T, R)`` of ``pos · speed`` in float64, in posenc's layout."""
    angles = pos[:, None].astype(np.float64) * speed[None, :]  # (T, R/2)
    cos, sin = np.cos(angles) * scale, np.sin(angles) * scale
    if layout == "interleaved":
        return np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)
    return np.concatenate((cos, cos), -1), np.concatenate((sin, sin), -1)


def _yarn_speed(inv: np.ndarray, factor: float, orig: int, base: float, dims: int) -> np.ndarray:
    """YaRN's mix (the YaRN paper; transformers' _compute_yarn_parameters), beta 32 and 1."""

    def corr(beta: float) -> float:
        return dims * math.log(orig / (beta * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr(32.0)), 0), min(math.ceil(corr(1.0)), dims - 1)
    i = np.arange(dims // 2, dtype=np.float64)
    extrapolate = 1 - np.clip((i - low) / max(high - low, 0.001), 0, 1)
    return inv / factor * (1 - extrapolate) + inv * extrapolate


SCALED = {  # model name -> (file, layout, speed of the 8 pairs, magnitude), R = 16, base 1e4
    "s-linear": ("scaled-linear.gguf", "interleaved", lambda inv: inv / 4.0, 1.0),
    "s-yarn": (
        "scaled-yarn.gguf",
        "interleaved",
        lambda inv: _yarn_speed(inv, 4.0, 4096, 10000.0, 16),
        1 + 0.1 * math.log(4.0),
    ),
    "s-mrope": ("scaled-mrope.gguf", "half", lambda inv: inv, 1.0),  # text: one row for all
}


@pytest.fixture(scope="module")
def scaled_api(gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    models = ",".join(f"{name}={FIXTURES / file}" for name, (file, *_) in SCALED.items())
    models += f",s-llama3={ROOT / VOCABS['v-conv']}"
    with TestClient(create_app(make_settings(gpt2_file, models=models))) as client:
        yield client


@pytest.mark.parametrize("name", list(SCALED))
def test_scaled_gguf_rope_cos_sin_are_the_closed_form(scaled_api: httpx.Client, name: str) -> None:
    """Linear (freq_scale 1/4), YaRN (factor 4 over 4096, its ramp and 1 + 0.1 ln 4) and a
    Qwen2-VL file's M-RoPE (text: the same position on every section) in float64."""
    _, layout, speed, scale = SCALED[name]
    positions = [0, 1, 7, 1000, 4095, 4096, 16383, 100000]
    r = scaled_api.post(
        "/v1/embed", json={"input_ids": [[1] * 8], "position_ids": [positions], "model": name}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["meta"]["rope"]["llamacpp"]["n_dims"] == 16
    inv = 10000.0 ** (-np.arange(0, 16, 2, dtype=np.float64) / 16)  # (8,)
    cos, sin = _rope_closed_form(np.array(positions), speed(inv), layout, scale)
    got_cos, got_sin = json_tensor(body, "cos")[0], json_tensor(body, "sin")[0]
    # llama.cpp's float32 arguments (freq_base, attn_factor) against float64 constants
    np.testing.assert_allclose(got_cos, cos.astype(np.float32), rtol=0, atol=3e-7)
    np.testing.assert_allclose(got_sin, sin.astype(np.float32), rtol=0, atol=3e-7)


def test_llama3_gguf_divides_by_its_rope_freqs_tensor(scaled_api: httpx.Client) -> None:
    """The converted Llama 3 file's ``rope_freqs`` tensor (read from the file, past the head)
    divides the speeds: transformers' llama3 rule for factor 8, 1 → 4 over 8192, base 5e5."""
    positions = [0, 3, 8191, 65536]
    r = scaled_api.post(
        "/v1/embed",
        json={"input_ids": [[1] * 4], "position_ids": [positions], "model": "s-llama3"},
    )
    assert r.status_code == 200, r.text
    inv = 500000.0 ** (-np.arange(0, 16, 2, dtype=np.float64) / 16)
    wavelen = 2 * math.pi / inv
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    llama3 = np.where(wavelen > 8192 / 1.0, inv / 8.0, inv)
    middle = (wavelen <= 8192 / 1.0) & (wavelen >= 8192 / 4.0)
    llama3 = np.where(middle, (1 - smooth) * inv / 8.0 + smooth * inv, llama3)
    cos, sin = _rope_closed_form(np.array(positions), llama3, "interleaved")
    body = r.json()
    assert body["meta"]["rope"]["rope_type"] == "llama3"
    # the file holds the factors in float32: 2.69453 rounded by 2^-24 relative moves the angle
    # 34.4 (position 65536) by about 2e-6
    np.testing.assert_allclose(json_tensor(body, "cos")[0], cos, rtol=0, atol=1e-5)
    np.testing.assert_allclose(json_tensor(body, "sin")[0], sin, rtol=0, atol=1e-5)
    assert not np.allclose(json_tensor(body, "cos")[0], _rope_closed_form(
        np.array(positions), inv, "interleaved")[0], atol=1e-2)  # fmt: skip


@pytest.mark.parametrize("name", list(VOCABS))
def test_detokenize_gives_the_text_back(api: httpx.Client, name: str) -> None:
    """Decoding llama.cpp's ids skips BOS (a control token) and gives each text back, but for
    texts with a user-defined token (a SentencePiece vocabulary adds a space after one)."""
    recorded = TOKENS[VOCABS[name]]
    texts = [t for t in recorded if "<|tool|>" not in t]
    r = api.post("/v1/detokenize", json={"input_ids": [recorded[t] for t in texts], "model": name})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == texts

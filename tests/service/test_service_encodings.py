"""/v1/encodings/{sinusoidal,learned,rope} against their formulas, evaluated here in numpy float64.

Every test runs in process and through a real uvicorn (the ``api`` fixture). The references
never call posenc: sinusoidal and RoPE come from the contract's formulas (RoPE scaling from
transformers' ``modeling_rope_utils`` definitions, rewritten in numpy), learned tables from
``torch.manual_seed(seed); nn.Embedding(...)`` and the checkpoint file itself.
"""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import GPT2_NAME, GPT2_SHAPE, base64_tensor, json_tensor
from tests.references import llama3_inv_freq, rope_cos_sin, rope_inv_freq, sinusoidal

# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------


def close(got, want, tol=1e-6):
    """API.md: within tol, relative where values exceed 1."""
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# Sinusoidal
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "concat", "tensor2tensor"])
def test_sinusoidal_layouts_match_the_formula(api: httpx.Client, layout: str) -> None:
    r = api.post("/v1/encodings/sinusoidal", json={"seq_len": 50, "d_model": 32, "layout": layout})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tensors"]["encoding"]["dtype"] == "float32"
    close(json_tensor(body, "encoding"), sinusoidal(range(50), 32, layout=layout))
    assert body["meta"]["layout"] == layout


def test_sinusoidal_position_zero_is_zeros_and_ones(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/sinusoidal", json={"seq_len": 1, "d_model": 8})
    assert json_tensor(r.json(), "encoding").tolist() == [[0, 1, 0, 1, 0, 1, 0, 1]]


def test_sinusoidal_is_exact_at_large_positions_with_offset(api: httpx.Client) -> None:
    """float32 output within 1e-6 of the float64 formula below 2**20 (float32 angles drift 1e-2)."""
    positions = [0, 7, 65_535, 999_983, 2**20 - 6]
    r = api.post(
        "/v1/encodings/sinusoidal",
        json={"positions": positions, "offset": 5, "d_model": 64, "base": 500.0},
        params={"encoding": "base64"},
    )
    assert r.status_code == 200, r.text
    got = base64_tensor(r.json(), "encoding")
    assert got.dtype == np.float32 and got.shape == (5, 64)
    close(got, sinusoidal([p + 5 for p in positions], 64, base=500.0))


def test_sinusoidal_seq_len_with_offset_and_float64(api: httpx.Client) -> None:
    r = api.post(
        "/v1/encodings/sinusoidal",
        json={"seq_len": 6, "offset": 1000, "d_model": 10, "dtype": "float64"},
        params={"encoding": "base64"},
    )
    got = base64_tensor(r.json(), "encoding")
    assert got.dtype == np.float64
    close(got, sinusoidal(range(1000, 1006), 10), tol=1e-12)


@pytest.mark.parametrize(("dtype", "tol"), [("float16", 1e-3), ("bfloat16", 8e-3)])
def test_sinusoidal_half_precision_dtypes(api: httpx.Client, dtype: str, tol: float) -> None:
    r = api.post(
        "/v1/encodings/sinusoidal",
        json={"seq_len": 20, "d_model": 16, "dtype": dtype},
        params={"encoding": "base64"},
    )
    body = r.json()
    assert body["tensors"]["encoding"]["dtype"] == dtype
    close(base64_tensor(body, "encoding"), sinusoidal(range(20), 16), tol=tol)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"seq_len": 4, "d_model": 7}, "d_model"),
        ({"seq_len": 4, "d_model": 0}, "d_model"),
        ({"seq_len": 0, "d_model": 8}, "seq_len"),
        ({"positions": [0, -1], "d_model": 8}, "positions"),
        ({"positions": [], "d_model": 8}, "positions"),
        ({"seq_len": 4, "d_model": 8, "base": -2}, "base"),
        ({"seq_len": 4, "d_model": 8, "layout": "sideways"}, "layout"),
        ({"seq_len": 4, "d_model": 8, "dtype": "int8"}, "dtype"),
        ({"seq_len": 4, "d_model": True}, "d_model"),
        ({"seq_len": 4, "d_model": 8, "colour": "red"}, "colour"),
    ],
)
def test_sinusoidal_invalid_fields_are_422_naming_the_field(
    app_client: httpx.Client, body: dict, field: str
) -> None:
    r = app_client.post("/v1/encodings/sinusoidal", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list)
    assert any(field in e["loc"] for e in detail), detail


def test_sinusoidal_needs_exactly_one_of_seq_len_and_positions(app_client: httpx.Client) -> None:
    for body in ({"d_model": 8}, {"d_model": 8, "seq_len": 2, "positions": [0, 1]}):
        r = app_client.post("/v1/encodings/sinusoidal", json=body)
        assert r.status_code == 422
        msg = r.json()["detail"][0]["msg"]
        assert "seq_len" in msg and "positions" in msg, msg


# ---------------------------------------------------------------------------------------------
# Learned
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7, 2**40])
def test_learned_seeded_table_is_torch_manual_seed_embedding(api: httpx.Client, seed: int) -> None:
    r = api.post(
        "/v1/encodings/learned",
        json={"seq_len": 12, "d_model": 6, "seed": seed},
        params={"encoding": "base64"},
    )
    assert r.status_code == 200, r.text
    torch.manual_seed(seed)
    want = torch.nn.Embedding(12, 6).weight.detach().numpy()
    np.testing.assert_array_equal(base64_tensor(r.json(), "encoding"), want)


def test_learned_from_a_model_is_its_position_table(api: httpx.Client, gpt2_file) -> None:
    wpe = load_file(str(gpt2_file))["wpe.weight"].numpy()
    r = api.post(
        "/v1/encodings/learned",
        json={"seq_len": 9, "model": GPT2_NAME},
        params={"encoding": "base64"},
    )
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(base64_tensor(r.json(), "encoding"), wpe[:9])
    # seq_len omitted: the whole table
    r = api.post("/v1/encodings/learned", json={"model": GPT2_NAME}, params={"encoding": "base64"})
    np.testing.assert_array_equal(base64_tensor(r.json(), "encoding"), wpe)


def test_learned_seq_len_beyond_the_model_table_is_422_giving_its_size(api: httpx.Client) -> None:
    size = GPT2_SHAPE["positions"]
    r = api.post("/v1/encodings/learned", json={"seq_len": size + 1, "model": GPT2_NAME})
    assert r.status_code == 422
    body = r.json()
    assert body["field"] == "seq_len"
    assert str(size) in body["detail"] and "seq_len" in body["detail"]


def test_learned_d_model_must_match_the_model(app_client: httpx.Client) -> None:
    r = app_client.post(
        "/v1/encodings/learned", json={"seq_len": 2, "model": GPT2_NAME, "d_model": 8}
    )
    assert r.status_code == 422
    assert str(GPT2_SHAPE["d_model"]) in r.json()["detail"]


def test_learned_unknown_model_is_422_listing_the_loaded_ones(app_client: httpx.Client) -> None:
    r = app_client.post("/v1/encodings/learned", json={"seq_len": 2, "model": "gpt-17"})
    assert r.status_code == 422
    body = r.json()
    assert body["field"] == "model" and GPT2_NAME in body["detail"] and "gpt-17" in body["detail"]


def test_learned_without_d_model_or_model_is_422(app_client: httpx.Client) -> None:
    r = app_client.post("/v1/encodings/learned", json={"seq_len": 2})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "d_model"]


def test_learned_preset_gives_gpt2_shape(app_client: httpx.Client) -> None:
    """GPT-2's published config: n_positions 1024, n_embd 768; the body overrides seq_len."""
    r = app_client.post(
        "/v1/encodings/learned", json={"preset": "gpt2", "seq_len": 3}, params={"format": "npy"}
    )
    assert r.status_code == 200, r.text
    import io

    arr = np.load(io.BytesIO(r.content))
    torch.manual_seed(0)
    np.testing.assert_array_equal(arr, torch.nn.Embedding(3, 768).weight.detach().numpy())


# ---------------------------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_tables_match_the_formula(api: httpx.Client, layout: str) -> None:
    r = api.post(
        "/v1/encodings/rope", json={"seq_len": 30, "head_dim": 16, "layout": layout, "base": 500.0}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    inv_freq = rope_inv_freq(16, 500.0)
    cos, sin = rope_cos_sin(range(30), inv_freq, layout)
    close(json_tensor(body, "cos"), cos)
    close(json_tensor(body, "sin"), sin)
    close(json_tensor(body, "inv_freq"), inv_freq)
    assert body["meta"]["attention_scaling"] == 1.0
    assert list(body["tensors"]) == ["cos", "sin", "inv_freq"]


def test_rope_partial_rotary_and_explicit_positions(api: httpx.Client) -> None:
    """GPT-NeoX rotary_pct: only rotary_dim of head_dim channels; tables are (T, rotary_dim)."""
    positions = [3, 0, 2**20 - 1, 12345]
    r = api.post(
        "/v1/encodings/rope",
        json={"positions": positions, "head_dim": 64, "rotary_dim": 16},
        params={"encoding": "base64"},
    )
    body = r.json()
    assert body["tensors"]["cos"]["shape"] == [4, 16]
    assert body["tensors"]["inv_freq"]["shape"] == [8]
    cos, sin = rope_cos_sin(positions, rope_inv_freq(16, 10000.0))
    close(base64_tensor(body, "cos"), cos)
    close(base64_tensor(body, "sin"), sin)


def test_rope_linear_scaling_divides_the_frequencies(api: httpx.Client) -> None:
    r = api.post(
        "/v1/encodings/rope",
        json={"seq_len": 10, "head_dim": 8, "scaling": {"type": "linear", "factor": 4.0}},
    )
    body = r.json()
    inv_freq = rope_inv_freq(8, 10000.0) / 4.0
    close(json_tensor(body, "inv_freq"), inv_freq)
    close(json_tensor(body, "cos"), rope_cos_sin(range(10), inv_freq)[0])


def test_rope_yarn_applies_its_attention_scaling(app_client: httpx.Client) -> None:
    """YaRN's default attention factor is 0.1·ln(factor) + 1; cos at position 0 equals it."""
    r = app_client.post(
        "/v1/encodings/rope",
        json={
            "seq_len": 4,
            "head_dim": 8,
            "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    want = 0.1 * math.log(4.0) + 1.0
    assert body["meta"]["attention_scaling"] == pytest.approx(want, rel=1e-12)
    close(json_tensor(body, "cos")[0], np.full(8, want))
    assert np.all(json_tensor(body, "sin")[0] == 0)


def test_rope_dynamic_rescales_only_beyond_the_original_length(app_client: httpx.Client) -> None:
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    short = app_client.post(
        "/v1/encodings/rope", json={"seq_len": 16, "head_dim": 8, "scaling": scaling}
    ).json()
    close(json_tensor(short, "inv_freq"), rope_inv_freq(8, 10000.0))
    long = app_client.post(
        "/v1/encodings/rope", json={"positions": [0, 31], "head_dim": 8, "scaling": scaling}
    ).json()
    # transformers _compute_dynamic_ntk_parameters with seq_len 32
    base = 10000.0 * ((2.0 * 32 / 16) - (2.0 - 1)) ** (8 / (8 - 2))
    close(json_tensor(long, "inv_freq"), rope_inv_freq(8, base))


def test_rope_llama3_preset_is_the_published_config(api: httpx.Client) -> None:
    """meta-llama/Llama-3.1-8B config.json: head_dim 128, rope_theta 500000, rope_scaling llama3
    factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192."""
    positions = [0, 1, 8191, 100_000]
    r = api.post(
        "/v1/encodings/rope",
        json={"positions": positions, "preset": "llama-3.1-8b"},
        params={"encoding": "base64"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    inv_freq = llama3_inv_freq(rope_inv_freq(128, 500000.0), 8.0, 1.0, 4.0, 8192)
    close(base64_tensor(body, "inv_freq"), inv_freq)
    cos, sin = rope_cos_sin(positions, inv_freq)
    close(base64_tensor(body, "cos"), cos)
    close(base64_tensor(body, "sin"), sin)
    assert body["meta"]["preset"] == "llama-3.1-8b"


def test_rope_body_fields_override_the_preset(app_client: httpx.Client) -> None:
    base = {"seq_len": 5, "preset": "llama-3.1-8b"}
    # base overridden, scaling kept from the preset
    r = app_client.post("/v1/encodings/rope", json={**base, "base": 10000.0}).json()
    want = llama3_inv_freq(rope_inv_freq(128, 10000.0), 8.0, 1.0, 4.0, 8192)
    close(json_tensor(r, "inv_freq"), want)
    # an explicit null scaling overrides the preset's scaling
    r = app_client.post("/v1/encodings/rope", json={**base, "scaling": None}).json()
    close(json_tensor(r, "inv_freq"), rope_inv_freq(128, 500000.0))
    assert r["meta"]["scaling"] is None
    # rotary_dim overridden: partial rotary of the preset's head_dim
    r = app_client.post("/v1/encodings/rope", json={**base, "rotary_dim": 32}).json()
    assert r["tensors"]["cos"]["shape"] == [5, 32] and r["meta"]["head_dim"] == 128


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"seq_len": 4}, "head_dim"),
        ({"seq_len": 4, "head_dim": 7}, "head_dim"),
        ({"seq_len": 4, "head_dim": 8, "rotary_dim": 16}, "rotary_dim"),
        ({"seq_len": 4, "head_dim": 8, "scaling": {"type": "warp"}}, "type"),
        ({"seq_len": 4, "head_dim": 8, "scaling": {"type": "linear"}}, "factor"),
        ({"seq_len": 4, "head_dim": 8, "scaling": {"type": "linear", "factor": 2, "x": 1}}, "x"),
        ({"seq_len": 4, "head_dim": 8, "preset": "llama-9"}, "preset"),
        ({"seq_len": 4, "head_dim": 8, "preset": "bloom-7b1"}, "preset"),
    ],
)
def test_rope_invalid_requests_are_422_naming_the_field(
    app_client: httpx.Client, body: dict, where: str
) -> None:
    r = app_client.post("/v1/encodings/rope", json=body)
    assert r.status_code == 422, r.text
    assert where in r.text


def test_rope_unknown_preset_lists_the_known_ones(app_client: httpx.Client) -> None:
    r = app_client.post("/v1/encodings/rope", json={"seq_len": 4, "preset": "llama-9"})
    body = r.json()
    assert body["field"] == "preset" and "llama-3.1-8b" in body["detail"]
    r = app_client.post("/v1/encodings/rope", json={"seq_len": 4, "preset": "bloom-7b1"})
    assert "alibi" in r.json()["detail"] and "mistral-7b" in r.json()["detail"]

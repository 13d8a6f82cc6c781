"""POST/GET /v1/encodings/diffusion-rope and /v1/encodings/sincos-2d, and diffusers files at
/v1/configs/positions, against closed forms written in numpy here (never posenc's own).

Runs in process and through a real uvicorn (``api``); the streamed path through an in-process
app whose element limit is small.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers import ApiClient, json_tensor, make_settings

ROPE = "/v1/encodings/diffusion-rope"
SINCOS = "/v1/encodings/sincos-2d"


def flux_reference(height: int, width: int, text_len: int) -> tuple[np.ndarray, ...]:
    """(ids, cos, sin) of FLUX's rule: text ids 0 first, then (0, h, w); axes 16, 56, 56."""
    ids = np.array(
        [[0, 0, 0]] * text_len + [[0, h, w] for h in range(height) for w in range(width)],
        dtype=np.float64,
    )
    parts = [
        ids[:, a : a + 1] * 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        for a, d in enumerate((16, 56, 56))
    ]
    angles = np.concatenate(parts, axis=1)
    return ids, np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)


def dit_reference(height: int, width: int) -> np.ndarray:
    """DiT-XL-2-256's table: D = 1152, base 16, interpolation_scale 1, [w part | h part]."""

    def one(channels: int, pos: np.ndarray) -> np.ndarray:
        omega = 1.0 / 10000 ** (np.arange(channels // 2) / (channels / 2))
        return np.concatenate([np.sin(pos[:, None] * omega), np.cos(pos[:, None] * omega)], 1)

    h, w = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    rows, cols = h.ravel() / (height / 16), w.ravel() / (width / 16)
    return np.concatenate([one(576, cols), one(576, rows)], axis=1)


def test_flux_post_and_get(api: httpx.Client) -> None:
    body = {"model": "flux", "height": 3, "width": 4, "text_len": 2, "dtype": "float64"}
    r = api.post(ROPE, json=body)
    assert r.status_code == 200, r.text
    ids, cos, sin = flux_reference(3, 4, 2)
    out = r.json()
    np.testing.assert_array_equal(json_tensor(out, "ids"), ids)
    np.testing.assert_allclose(json_tensor(out, "cos"), cos, rtol=0, atol=1e-14)
    np.testing.assert_allclose(json_tensor(out, "sin"), sin, rtol=0, atol=1e-14)
    meta = out["meta"]
    assert meta["axes"] == [16, 56, 56] and meta["layout"] == "interleaved"
    assert meta["text"] == "first" and meta["source"]["checkpoint"] == "FLUX.1-dev"
    got = api.get(ROPE, params={"model": "flux", "height": 3, "width": 4, "text_len": 2})
    assert got.status_code == 200, got.text
    np.testing.assert_allclose(json_tensor(got.json(), "cos"), cos, rtol=0, atol=1e-6)


def test_a_config_body_as_npy(api: httpx.Client) -> None:
    config = {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 56]}
    r = api.post(ROPE, params={"format": "npy"}, json={"config": config, "height": 2, "width": 2})
    assert r.status_code == 200, r.text
    _, cos, _ = flux_reference(2, 2, 0)
    np.testing.assert_allclose(np.load(io.BytesIO(r.content)), cos, rtol=0, atol=1e-6)


def test_sincos_post_and_get(api: httpx.Client) -> None:
    r = api.post(SINCOS, json={"model": "dit", "height": 3, "width": 5, "dtype": "float64"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        json_tensor(r.json(), "pos_embed"), dit_reference(3, 5), rtol=0, atol=1e-13
    )
    got = api.get(SINCOS, params={"model": "dit", "height": 2, "width": 2})
    assert got.status_code == 200, got.text
    np.testing.assert_allclose(
        json_tensor(got.json(), "pos_embed"), dit_reference(2, 2), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (ROPE, {"height": 2, "width": 2}, "model"),
        (ROPE, {"model": "flux", "frames": 2, "height": 2, "width": 2}, "frames"),
        (ROPE, {"model": "nope", "height": 2, "width": 2}, "model"),
        (
            ROPE,
            {"config": {"_class_name": "MochiTransformer3DModel"}, "height": 1, "width": 1},
            "config._class_name",
        ),
        (SINCOS, {"model": "sd3", "height": 193, "width": 2}, "height"),
    ],
)
def test_refusals_are_422_naming_the_field(
    api: httpx.Client, path: str, body: dict[str, object], field: str
) -> None:
    r = api.post(path, json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_a_4k_video_grid_is_413_as_json(api: httpx.Client) -> None:
    # HunyuanVideo at 3840 x 2160, 129 frames: 33 x 135 x 240 patches, 1,069,200 tokens
    body = {"model": "hunyuan-video", "frames": 33, "height": 135, "width": 240}
    r = api.post(ROPE, json=body)
    assert r.status_code == 413, r.text


@pytest.fixture(scope="module")
def small_client(gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file, max_elements=4096))) as client:
        yield client


def test_streams_over_the_element_limit(
    small_client: httpx.Client, app_client: httpx.Client
) -> None:
    body = {"model": "flux", "height": 5, "width": 7, "text_len": 3}  # 38 x 128 x 3 > 4096
    streamed = small_client.post(ROPE, params={"format": "npy"}, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
    whole = app_client.post(ROPE, params={"format": "npy"}, json=body)
    assert streamed.content == whole.content
    _, cos, _ = flux_reference(5, 7, 3)
    np.testing.assert_allclose(np.load(io.BytesIO(streamed.content)), cos, rtol=0, atol=1e-6)
    table = small_client.post(
        SINCOS, params={"format": "npy"}, json={"model": "dit", "height": 4, "width": 4}
    )
    assert table.status_code == 200, table.text
    np.testing.assert_allclose(np.load(io.BytesIO(table.content)), dit_reference(4, 4), atol=1e-6)


def test_configs_positions_reads_diffusers_files(api: httpx.Client) -> None:
    config = {
        "_class_name": "WanTransformer3DModel",
        "attention_head_dim": 128,
        "patch_size": [1, 2, 2],
    }
    r = api.post("/v1/configs/positions", json={"config": config})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["kind"] == "diffusion_rope" and out["model_type"] == "WanTransformer3DModel"
    said = out["diffusers"]
    assert said["file"] == "transformer_config" and said["model"] == "wan"
    assert said["endpoint"] == ROPE and said["defaulted"] == ["rope_max_seq_len"]
    index = {
        "_class_name": "StableDiffusion3Pipeline",
        "transformer": ["diffusers", "SD3Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    r = api.post("/v1/configs/positions", json={"config": index})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["kind"] == "sincos_2d" and out["diffusers"]["file"] == "model_index"
    assert out["warnings"], "a model_index.json gives class defaults only"
    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    plain = api.post("/v1/configs/positions", json={"config": llama}).json()
    assert plain["kind"] == "rope" and plain.get("diffusers") is None


def _hostile_bodies() -> list[tuple[str, dict[str, object]]]:
    """Every published config and every diffusers class of the sweep, with grids at the edges,
    and config values of the wrong type, to each endpoint."""
    from posenc.diffusion.published import PUBLISHED
    from posenc.diffusion.sweep import SWEEP

    configs: list[dict[str, object]] = [dict(c) for _r, c, _v in PUBLISHED.values()]
    configs += [{"_class_name": name} for name in SWEEP]
    configs += [
        {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": "16,56,56"},
        {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [15, 57, 56]},
        {"_class_name": "WanTransformer3DModel", "attention_head_dim": 0},
        {"_class_name": "WanTransformer3DModel", "rope_max_seq_len": None},
        {"_class_name": "HunyuanVideoTransformer3DModel", "rope_theta": float("inf")},
        {"_class_name": "HunyuanVideoTransformer3DModel", "rope_theta": -1},
        {
            "_class_name": "CogVideoXTransformer3DModel",
            "use_rotary_positional_embeddings": True,
            "attention_head_dim": 40,
        },
        {
            "_class_name": "CogVideoXTransformer3DModel",
            "use_rotary_positional_embeddings": True,
            "sample_height": 1,
        },
        {
            "_class_name": "LTXVideoTransformer3DModel",
            "num_attention_heads": 1,
            "attention_head_dim": 1,
        },
        {"_class_name": "SD3Transformer2DModel", "pos_embed_max_size": None},
        {"_class_name": "SD3Transformer2DModel", "sample_size": 1},
        {"_class_name": "PixArtTransformer2DModel", "interpolation_scale": 0},
        {"_class_name": 7},
        {"_class_name": "X", "transformer": ["diffusers", 3]},
        {"transformer": ["diffusers", "FluxTransformer2DModel"], "_class_name": "FluxPipeline"},
    ]
    grids = [
        {"height": 1, "width": 1},
        {"frames": 3, "height": 2, "width": 9, "text_len": 5},
        {"frames": 1, "height": 4097, "width": 3, "text_len": 4095},
        {"frames": 2**40, "height": 2**40, "width": 2**40, "text_len": 2**52},
    ]
    bodies: list[tuple[str, dict[str, object]]] = []
    for config in configs:
        for grid in grids:
            bodies += [(ROPE, {"config": config, **grid}), (SINCOS, {"config": config, **grid})]
        bodies.append(("/v1/configs/positions", {"config": config}))
    return bodies


def test_no_5xx_for_any_config_or_grid(app_client: httpx.Client) -> None:
    import json as _json

    failures = []
    for path, body in _hostile_bodies():
        if path == SINCOS:
            body = {k: v for k, v in body.items() if k != "text_len"}
        content = _json.dumps(body)  # Infinity as Python's json writes it
        r = app_client.post(path, content=content, headers={"content-type": "application/json"})
        if r.status_code >= 500 or r.status_code not in (200, 400, 413, 422):
            failures.append((path, body, r.status_code, r.text[:200]))
        elif r.status_code != 200:
            assert r.json().get("detail"), r.text
    assert not failures, failures[:5]

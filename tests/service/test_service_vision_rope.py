"""POST/GET /v1/encodings/vision-rope against the contract, with references written here.

The reference tables are the contract's rule evaluated in numpy float64 (axial frequencies
``θ^(−2i/s)``, ``s = Dh/2``, rows then columns, rotate_half layout; Qwen-VL's spatial-merge block
order), never posenc. Runs in process and through a real uvicorn (``api``); the streamed path
through an in-process app whose element limit is small.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import load as st_load

from tests.helpers import ApiClient, json_tensor, make_settings

ROUTE = "/v1/encodings/vision-rope"

# Qwen/Qwen2.5-VL-7B-Instruct's config.json, the keys its vision tower reads.
QWEN25 = {
    "model_type": "qwen2_5_vl",
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "window_size": 112,
        "temporal_patch_size": 2,
    },
}
GRIDS = [[1, 4, 6], [2, 2, 4]]


def qwen_reference(grids: list[list[int]], head_dim: int, merge: int, theta: float = 1e4):
    """(cos, sin, ids) of the Qwen-VL rule, in numpy float64."""
    ids = []
    for t, h, w in grids:
        frame = [
            (bh * merge + ih, bw * merge + iw)
            for bh in range(h // merge)
            for bw in range(w // merge)
            for ih in range(merge)
            for iw in range(merge)
        ]
        ids += frame * t
    pos = np.array(ids, dtype=np.float64)  # (N, 2)
    s = head_dim // 2
    f = theta ** (-np.arange(0, s, 2, dtype=np.float64) / s)  # (Dh/4,)
    half = np.concatenate([pos[:, :1] * f, pos[:, 1:] * f], axis=1)  # (N, Dh/2)
    angles = np.concatenate([half, half], axis=1)
    return np.cos(angles), np.sin(angles), np.array(ids, dtype=np.int64)


def test_qwen25_vl_tables_and_meta(api: httpx.Client) -> None:
    r = api.post(ROUTE, json={"config": QWEN25, "grid_thw": GRIDS})
    assert r.status_code == 200, r.text
    body = r.json()
    cos, sin, ids = qwen_reference(GRIDS, 80, 2)
    assert json_tensor(body, "cos").shape == (40, 80)
    np.testing.assert_allclose(json_tensor(body, "cos"), cos, rtol=0, atol=1e-6)
    np.testing.assert_allclose(json_tensor(body, "sin"), sin, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(json_tensor(body, "position_ids"), ids)
    meta = body["meta"]
    assert meta["model_type"] == "qwen2_5_vl_vision"
    assert (meta["head_dim"], meta["rope_theta"], meta["layout"]) == (80, 10000.0, "half")
    assert meta["grids"] == GRIDS


@pytest.mark.parametrize("model_type", ["mlcd", "mlcd_vision_model"])
def test_mlcd_patch_rows_row_major_and_its_class_token_named(
    api: httpx.Client, model_type: str
) -> None:
    """MLCD (both spellings of its model_type): the Qwen-VL rule with merge size 1 (row-major
    ids), Dh = 1664 / 16; the grid defaults to image_size / patch_size; the class token, rotated
    by a trained parameter, is not a row and meta says so."""
    config = {"model_type": model_type, "hidden_size": 1664, "num_attention_heads": 16}
    r = api.post(ROUTE, json={"config": config, "grid_thw": [[1, 3, 5]]})
    assert r.status_code == 200, r.text
    cos, sin, ids = qwen_reference([[1, 3, 5]], 104, 1)
    np.testing.assert_allclose(json_tensor(r.json(), "cos"), cos, rtol=0, atol=1e-6)
    np.testing.assert_allclose(json_tensor(r.json(), "sin"), sin, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(json_tensor(r.json(), "position_ids"), ids)
    meta = r.json()["meta"]
    assert meta["model_type"] == "mlcd_vision_model" and meta["merge_size"] == 1
    assert "class_pos_emb" in meta["class_token"]
    small = {**config, "image_size": 56, "patch_size": 14}
    default = api.post(ROUTE, json={"config": small}).json()["meta"]
    assert default["grids"] == [[1, 4, 4]] and default["tokens"] == 16
    video = api.post(ROUTE, json={"config": config, "grid_thw": [[2, 3, 5]]})
    assert video.status_code == 422 and "grid_thw" in video.text


def test_get_twin_equals_post(api: httpx.Client) -> None:
    body = {"config": QWEN25, "grid_thw": GRIDS, "dtype": "float64"}
    post = api.post(ROUTE, params={"format": "safetensors"}, json=body)
    get = api.get(
        ROUTE,
        params={
            "config": json.dumps(QWEN25),
            "grid_thw": json.dumps(GRIDS),
            "dtype": "float64",
            "format": "safetensors",
        },
    )
    assert post.status_code == 200 and get.status_code == 200, get.text
    assert post.content == get.content
    cos, _, _ = qwen_reference(GRIDS, 80, 2)
    np.testing.assert_allclose(st_load(post.content)["cos"], cos, rtol=0, atol=1e-15)


def test_llama4_fixed_grid_needs_no_grid(api: httpx.Client) -> None:
    config = {
        "model_type": "llama4",
        "vision_config": {
            "model_type": "llama4_vision_model",
            "hidden_size": 1408,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
            "rope_theta": 10000,
        },
    }
    r = api.post(ROUTE, json={"config": config})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = json_tensor(body, "position_ids")
    assert ids.shape == (577, 2) and ids[-1].tolist() == [-1, -1] and ids[1].tolist() == [0, 1]
    cos = json_tensor(body, "cos")
    np.testing.assert_array_equal(cos[-1], np.ones(88))
    # token 1 is row 0, column 1: its first pair turns by (column + 1) · 1 = 2 radians
    np.testing.assert_allclose(cos[1, :2], [np.cos(2.0)] * 2, rtol=0, atol=1e-6)
    assert body["meta"]["layout"] == "interleaved" and body["meta"]["grids"] == [[1, 24, 24]]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"config": QWEN25, "grid_thw": [[1, 3, 4]]}, "grid_thw", "multiples of the merge size 2"),
        ({"config": QWEN25}, "grid_thw", "grid_thw is required"),
        (
            {
                "config": {
                    "model_type": "gemma3",
                    "vision_config": {"model_type": "siglip_vision_model"},
                },
                "grid_thw": [[1, 2, 2]],
            },
            "config.model_type",
            "learned absolute position embeddings",
        ),
    ],
)
def test_errors_are_422_naming_the_field(
    api: httpx.Client, body: dict, field: str, words: str
) -> None:
    r = api.post(ROUTE, json=body)
    assert r.status_code == 422, r.text
    assert words in r.text and field in r.text


def test_over_the_limit_is_413_before_computing(api: httpx.Client) -> None:
    r = api.post(ROUTE, json={"config": QWEN25, "grid_thw": [[4096, 2048, 2048]]})
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
    body = {"config": QWEN25, "grid_thw": [[1, 8, 8], [3, 4, 6]]}  # 136 tokens x 162 > 4096
    streamed = small_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
    whole = app_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.content == whole.content
    cos, _, _ = qwen_reference(body["grid_thw"], 80, 2)  # type: ignore[arg-type]
    np.testing.assert_allclose(np.load(io.BytesIO(streamed.content)), cos, rtol=0, atol=1e-6)


def test_precision_engine_streams_the_modules_float32_bytes(
    small_client: httpx.Client, app_client: httpx.Client
) -> None:
    """``precision: "engine"`` (issue 30): Qwen2_5_VLVisionRotaryEmbedding's float32 cos, bit
    for bit, streamed or whole; the exact table differs from it by float32 angle error."""
    import torch
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    body = {"config": QWEN25, "grid_thw": [[1, 8, 8], [3, 4, 6]], "precision": "engine"}
    streamed = small_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
    whole = app_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.content == whole.content
    ids = json_tensor(app_client.post(ROUTE, json=body).json(), "position_ids")
    vision = Qwen2_5_VLConfig(vision_config=QWEN25["vision_config"]).vision_config  # type: ignore[arg-type]
    module = m.Qwen2_5_VLVisionRotaryEmbedding(vision)  # type: ignore[arg-type]
    pos = torch.from_numpy(np.asarray(ids, dtype=np.int64))  # (N, 2)
    cos_hf, _sin_hf = module(torch.zeros(1), pos)
    assert np.array_equal(np.load(io.BytesIO(whole.content)), cos_hf.numpy())
    exact = app_client.post(ROUTE, params={"format": "npy"}, json={**body, "precision": "exact"})
    assert exact.content != whole.content


def test_configs_positions_describes_the_vision_tower(api: httpx.Client) -> None:
    whole = {  # with the text keys of the same file, which the text reader needs
        **QWEN25,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    r = api.post("/v1/configs/positions", json={"config": whole})
    assert r.status_code == 200, r.text
    vision = r.json()["vision"]
    assert vision["model_type"] == "qwen2_5_vl_vision" and vision["rotary"] is True
    assert (vision["head_dim"], vision["layout"], vision["merge_size"]) == (80, "half", 2)
    assert vision["endpoint"] == ROUTE
    llama = {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
    }
    text = api.post("/v1/configs/positions", json={"config": llama})
    assert text.status_code == 200 and text.json()["vision"] is None
    siglip = {
        "model_type": "llava",
        "text_config": llama,
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    r = api.post("/v1/configs/positions", json={"config": siglip})
    assert r.status_code == 200, r.text
    vision = r.json()["vision"]
    assert (vision["model_type"], vision["rotary"], vision["learned"]) == (
        "siglip_vision_model",
        False,
        True,
    )
    assert vision["endpoint"] == "/v1/encodings/vision-learned"
    assert vision["resize"]["rule"] == "interpolate_pos_encoding"


def test_configs_positions_describes_a_vision_config_sent_alone(api: httpx.Client) -> None:
    """A rotary tower's own config (Pixtral's, as Mistral 3's file holds it) is kind vision_rope
    with the tower the whole file's ``vision`` gives, not a 422 from the text reader."""
    pixtral = {
        "model_type": "pixtral",
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "head_dim": 64,
        "image_size": 1540,
        "patch_size": 14,
        "rope_theta": 10000.0,
    }
    llama = {
        "model_type": "mistral",
        "hidden_size": 5120,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_hidden_layers": 40,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000000.0,
    }
    whole = {"model_type": "mistral3", "text_config": llama, "vision_config": pixtral}
    tower = api.post("/v1/configs/positions", json={"config": whole})
    assert tower.status_code == 200, tower.text
    assert tower.json()["kind"] == "rope" and tower.json()["vision"]["rotary"] is True
    alone = api.post("/v1/configs/positions", json={"config": pixtral})
    assert alone.status_code == 200, alone.text
    body = alone.json()
    assert body["kind"] == "vision_rope" and body["rope"] == {} and body["layer_types"] == []
    assert body["vision"] == tower.json()["vision"]
    assert (body["head_dim"], body["layout"]) == (64, body["vision"]["layout"])
    assert body["vision"]["endpoint"] in body["warnings"][0]
    # its table is served by the endpoint it names
    grid = api.post(ROUTE, json={"config": pixtral, "grid_thw": [[1, 4, 6]]})
    assert grid.status_code == 200, grid.text


def test_configs_positions_describes_a_non_rotary_tower_sent_alone(api: httpx.Client) -> None:
    """SigLIP's vision config alone: kind none, the tower under vision with what it uses."""
    r = api.post("/v1/configs/positions", json={"config": {"model_type": "siglip_vision_model"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "none" and body["rope"] == {} and body["head_dim"] is None
    vision = body["vision"]
    assert (vision["model_type"], vision["rotary"], vision["learned"]) == (
        "siglip_vision_model",
        False,
        True,
    )
    assert (vision["native_grid"], vision["table_rows"], vision["width"]) == ([14, 14], 196, 768)
    assert "learned absolute 2-D position table" in body["warnings"][0]
    assert "/v1/encodings/vision-learned" in body["warnings"][0]
    gemma3n = {"model_type": "gemma3n_vision"}  # neither rotary nor learned: what it uses
    r = api.post("/v1/configs/positions", json={"config": gemma3n})
    assert r.status_code == 200, r.text
    assert r.json()["vision"] == {
        "model_type": "gemma3n_vision",
        "rotary": False,
        "learned": False,
        "uses": "a MobileNet-v5 convolutional tower (no position embeddings)",
    }


# ---------------------------------------------------------------------------------------------
# Issue 33: per-grid merge sizes, a 3-D tower, and engine timm
# ---------------------------------------------------------------------------------------------


def test_video_llama3_merge_sizes_per_grid(api: httpx.Client) -> None:
    """Each grid's ids in blocks of its own merge size (the Qwen-VL rule per grid)."""
    config = {"model_type": "video_llama_3", "vision_config": {"hidden_size": 768}}
    grids, merges = [[1, 4, 6], [2, 2, 4]], [2, 1]
    r = api.post(ROUTE, json={"config": config, "grid_thw": grids, "merge_sizes": merges})
    assert r.status_code == 200, r.text
    body = r.json()
    parts = [qwen_reference([g], 64, m) for g, m in zip(grids, merges, strict=True)]
    cos = np.concatenate([p[0] for p in parts])
    ids = np.concatenate([p[2] for p in parts])
    np.testing.assert_allclose(json_tensor(body, "cos"), cos, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(json_tensor(body, "position_ids"), ids)
    assert body["meta"]["merge_sizes"] == merges
    bad = api.post(ROUTE, json={"config": QWEN25, "grid_thw": GRIDS, "merge_sizes": [2, 2]})
    assert bad.status_code == 422 and bad.json()["field"] == "merge_sizes"


def test_minimax_m3_three_axes_and_partial_width(api: httpx.Client) -> None:
    """Dh 80: F = ⌊80/3⌋ // 2 = 13 per axis, 78 rotated channels; ids (frame, row, column)."""
    config = {"model_type": "minimax_m3_vl", "vision_config": {}}
    r = api.post(ROUTE, json={"config": config, "grid_thw": [[2, 2, 2]]})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = json_tensor(body, "position_ids")
    assert ids.shape == (8, 3) and ids[-1].tolist() == [1, 1, 1]
    f = 1e4 ** (-np.arange(0, 26, 2, dtype=np.float64) / 26)  # (13,)
    half = np.concatenate([ids[:, :1] * f, ids[:, 1:2] * f, ids[:, 2:] * f], axis=1)
    np.testing.assert_allclose(
        json_tensor(body, "sin"), np.sin(np.concatenate([half, half], 1)), rtol=0, atol=1e-6
    )
    assert body["meta"]["rotary_dim"] == 78 and body["meta"]["position_axes"][0] == "frame"


TIMM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "timm"


@pytest.mark.parametrize("name", ["rope_vit_base_patch16_axial", "vit_small_patch16_dinov3"])
def test_engine_timm_equals_timms_recorded_tables(api: httpx.Client, name: str) -> None:
    """The service's engine timm against timm's own tables (tests/fixtures/timm)."""
    case = json.loads((TIMM_FIXTURES / "cases.json").read_text())["cases"][name]
    r = api.post(
        ROUTE,
        params={"format": "safetensors"},
        json={"engine": "timm", "config": case["config"], "grid_thw": case["grid_thw"]},
    )
    assert r.status_code == 200, r.text
    got = st_load(r.content)
    timm = st_load((TIMM_FIXTURES / "tables.safetensors").read_bytes())
    np.testing.assert_allclose(got["cos"], timm[f"{name}/cos"], rtol=0, atol=2e-6)
    np.testing.assert_allclose(got["sin"], timm[f"{name}/sin"], rtol=0, atol=2e-6)


def test_engine_timm_axial_closed_form_and_meta(api: httpx.Client) -> None:
    """ROPE-ViT axial, θ 100, Dh 8 (F = 2, f = (1, 0.1)), xy: (x, x, 0.1x, 0.1x, y, y, ...)."""
    config = {"rope_type": "cat", "dim": 16, "num_heads": 2, "in_pixels": False}
    config |= {"temperature": 100.0, "grid_indexing": "xy"}
    r = api.post(ROUTE, json={"engine": "timm", "config": config, "grid_thw": [[1, 3, 4]]})
    assert r.status_code == 200, r.text
    body = r.json()
    rows, cols = np.divmod(np.arange(12), 4)
    f = np.array([1.0, 0.1])
    half = np.concatenate([cols[:, None] * f, rows[:, None] * f], axis=1)
    np.testing.assert_allclose(
        json_tensor(body, "cos"), np.cos(np.repeat(half, 2, axis=1)), rtol=0, atol=1e-6
    )
    np.testing.assert_array_equal(json_tensor(body, "position_ids"), np.stack([rows, cols], 1))
    meta = body["meta"]
    assert (meta["engine"], meta["layout"], meta["rotary_dim"]) == ("timm", "interleaved", 8)
    assert meta["reference"].endswith("RotaryEmbeddingCat")
    bad = api.post(
        ROUTE, json={"engine": "timm", "config": {"rope_type": "xy"}, "grid_thw": [[1, 2, 2]]}
    )
    assert bad.status_code == 422 and bad.json()["field"] == "config.rope_type"


def test_engine_timm_mixed_streams_like_the_whole_table(
    small_client: httpx.Client, app_client: httpx.Client
) -> None:
    config = {"rope_type": "mixed", "dim": 64, "num_heads": 2, "depth": 3, "seed": 5}
    body = {"engine": "timm", "config": config, "grid_thw": [[1, 4, 5]]}  # 120 rows x 32
    streamed = small_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
    whole = app_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.content == whole.content
    assert np.load(io.BytesIO(whole.content)).shape == (120, 32)


def test_packed_grids_give_cu_seqlens(app_client: httpx.Client) -> None:
    """docs/configs.md's example: one image of 24 patches, a two-frame video of 8 each."""
    body = {
        "config": {"model_type": "qwen2_5_vl",
                   "vision_config": {"hidden_size": 1280, "num_heads": 16,
                                     "spatial_merge_size": 2}},
        "grid_thw": [[1, 4, 6], [2, 2, 4]],
    }  # fmt: skip
    r = app_client.post("/v1/encodings/vision-rope", json=body)
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert meta["cu_seqlens"] == [0, 24, 32, 40] and meta["max_seqlen"] == 24
    assert meta["segments"] == "frame"

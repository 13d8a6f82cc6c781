"""POST/GET /v1/encodings/vision-learned against the towers' own forwards in transformers.

The reference rows are what each tower's embeddings forward adds (tests/lib/
vision_learned_reference.py: the module with every parameter zeroed but its position table,
set to ``torch.manual_seed(seed); torch.randn(P, D)``), never posenc's code. Runs in process and
through a real uvicorn (``api``); the streamed path through an in-process app whose element limit
is small.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load
from transformers import CONFIG_MAPPING

from tests.helpers import ApiClient, json_tensor, make_settings
from tests.lib.vision_learned_reference import model_rows

ROUTE = "/v1/encodings/vision-learned"

# openai/clip-vit-base-patch32's config.json, the keys its vision tower reads.
CLIP = {
    "model_type": "clip",
    "vision_config": {
        "hidden_size": 768,
        "image_size": 224,
        "num_attention_heads": 12,
        "patch_size": 32,
        "model_type": "clip_vision_model",
    },
}


def seeded(rows: int, cols: int, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(1, rows, cols)[0]


def reference(model_type: str, keys: dict, grid: tuple[int, int], seed: int = 0) -> np.ndarray:
    config = CONFIG_MAPPING[model_type](**keys)
    side = keys.get("image_size", config.image_size) // config.patch_size
    prefix = {"clip_vision_model": 1, "deit": 2}.get(model_type, 0)
    table = seeded(prefix + side * side, config.hidden_size, seed)
    return model_rows(config, grid, table).double().numpy()


def test_clip_upsampled_non_square_equals_its_forward(api: httpx.Client) -> None:
    r = api.post(ROUTE, json={"config": CLIP, "grid": [5, 9], "seed": 7})
    assert r.status_code == 200, r.text
    body = r.json()
    want = reference("clip_vision_model", CLIP["vision_config"], (5, 9), seed=7)  # type: ignore[arg-type]
    got = json_tensor(body, "pos_embed")
    assert got.shape == (1 + 45, 768)
    np.testing.assert_allclose(got, want, rtol=0, atol=8e-6 * np.abs(want).max())
    # the class row, kept first as it is (JSON holds float32's shortest decimal)
    np.testing.assert_array_equal(got[0].astype(np.float32), want[0].astype(np.float32))
    meta = body["meta"]
    assert meta["model_type"] == "clip_vision_model" and meta["class_token"] is True
    assert meta["resize"] == "interpolate_pos_encoding" and meta["rule"]["mode"] == "bicubic"
    assert (meta["native_grid"], meta["grids"], meta["table"]) == ([7, 7], [[5, 9]], "seeded")


def test_engine_precision_is_the_forward_bit_for_bit(api: httpx.Client) -> None:
    body = {"config": CLIP, "grid": [3, 4], "seed": 7, "precision": "engine"}
    r = api.post(ROUTE, params={"format": "npy"}, json=body)
    assert r.status_code == 200, r.text
    want = reference("clip_vision_model", CLIP["vision_config"], (3, 4), seed=7)  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), want.astype(np.float32))


def test_formats_and_get_twin_agree(api: httpx.Client) -> None:
    body = {"config": CLIP, "grid_thw": [[1, 2, 3], [1, 8, 8]], "include": "both"}
    js = api.post(ROUTE, json=body).json()
    st = api.post(ROUTE, params={"format": "safetensors"}, json=body)
    raw = api.post(ROUTE, params={"format": "raw"}, json=body)
    get = api.get(
        ROUTE,
        params={
            "config": json.dumps(CLIP),
            "grid_thw": json.dumps(body["grid_thw"]),
            "include": "both",
            "format": "safetensors",
        },
    )
    assert st.status_code == raw.status_code == get.status_code == 200, get.text
    assert st.content == get.content
    tensors = st_load(st.content)
    assert tensors["pos_embed"].shape == (1 + 6 + 1 + 64, 768)
    assert tensors["resample"].shape == (72, 50)
    np.testing.assert_array_equal(
        tensors["pos_embed"], json_tensor(js, "pos_embed").astype(np.float32)
    )
    assert raw.headers["x-tensor-name"] == "pos_embed"
    assert raw.headers["x-tensor-shape"] == "72,768"
    flat = np.frombuffer(raw.content, dtype="<f4").reshape(72, 768)
    np.testing.assert_array_equal(flat, tensors["pos_embed"])
    # the matrix applied to the seeded table is the resized table
    table = seeded(50, 768, 0).double().numpy()
    np.testing.assert_allclose(
        tensors["resample"].astype(np.float64) @ table, tensors["pos_embed"], rtol=0, atol=2e-5
    )


def test_resample_needs_no_weights_and_is_the_towers_resize_of_the_identity(
    api: httpx.Client,
) -> None:
    """SigLIP 2 NaFlex with 16 patches and width 16: the forward on the identity table."""
    keys = {"num_patches": 16, "hidden_size": 16, "num_attention_heads": 1}
    config = {"model_type": "siglip2_vision_model", **keys}
    r = api.post(ROUTE, json={"config": config, "grid": [3, 7], "include": "resample"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body["tensors"]) == ["resample"]
    model = CONFIG_MAPPING["siglip2_vision_model"](**keys)  # type: ignore[arg-type]
    want = model_rows(model, (3, 7), torch.eye(16)).double().numpy()
    np.testing.assert_allclose(json_tensor(body, "resample"), want, rtol=0, atol=1e-6)
    assert body["meta"]["resize"] == "naflex" and body["meta"]["class_token"] is False


def test_idefics3_bucket_ids_and_rows(api: httpx.Client) -> None:
    vision = {"model_type": "idefics3_vision", "hidden_size": 32, "num_attention_heads": 4}
    r = api.post(ROUTE, json={"config": {"model_type": "idefics3", "vision_config": vision},
                              "grid": [4, 10]})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    ids = json_tensor(body, "position_ids")
    rows = [int(k * 7 / 4) for k in range(4)]  # floor(k·s/h), s = 224 // 32 = 7, no ties here
    cols = [int(k * 7 / 10) for k in range(10)]
    np.testing.assert_array_equal(ids, [r_ * 7 + c for r_ in rows for c in cols])
    want = reference("idefics3_vision", {"hidden_size": 32, "num_attention_heads": 4}, (4, 10))
    np.testing.assert_array_equal(
        json_tensor(body, "pos_embed").astype(np.float32), want.astype(np.float32)
    )


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"config": {"model_type": "qwen2_5_vl"}}, "config.model_type", "vision-rope"),
        ({"grid": [2, 2]}, "config", "give config"),
        ({"config": CLIP, "model": "gpt2"}, "model", "not both"),
        ({"config": CLIP, "grid": [2, 2], "grid_thw": [[1, 2, 2]]}, "grid_thw", "not both"),
        ({"config": CLIP, "grid_thw": [[2, 2, 2]]}, "grid_thw", "t must be 1"),
        ({"config": CLIP, "grid": [0, 2]}, "grid", "greater than or equal to 1"),
        ({"config": CLIP, "include": "weights"}, "include", "pos_embed"),
    ],
)
def test_errors_are_422_naming_the_field(
    api: httpx.Client, body: dict, field: str, words: str
) -> None:
    r = api.post(ROUTE, json=body)
    assert r.status_code == 422, r.text
    assert words in r.text and field in r.text


def test_over_the_limit_is_413_before_computing(api: httpx.Client) -> None:
    r = api.post(ROUTE, json={"config": CLIP, "grid": [1_000_000, 1_000_000]})
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
    body = {"config": CLIP, "grid": [6, 4]}  # 25 x 768 > 4096
    streamed = small_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
    whole = app_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert streamed.content == whole.content
    too_big_for_json = small_client.post(ROUTE, json=body)
    assert too_big_for_json.status_code == 413


SIGLIP2_SMALL = {
    "model_type": "siglip2_vision_model",
    "num_patches": 16,
    "hidden_size": 16,
    "num_attention_heads": 1,
}


@pytest.mark.parametrize(
    ("config", "precision", "grids"),
    [
        (SIGLIP2_SMALL, "exact", [[1, 30, 20], [1, 3, 7]]),  # naflex, mixing, by rectangles
        (
            {
                "model_type": "clip",
                "vision_config": {
                    "model_type": "clip_vision_model",
                    "hidden_size": 16,
                    "num_attention_heads": 1,
                    "image_size": 224,
                    "patch_size": 32,
                },
            },
            "exact",
            [[1, 40, 9], [1, 2, 2]],
        ),
        (
            {"model_type": "idefics3_vision", "hidden_size": 16, "num_attention_heads": 1},
            "engine",  # a gather: the model's own rows, by blocks
            [[1, 25, 31]],
        ),
        (
            {
                "model_type": "glm4v_vision",
                "hidden_size": 16,
                "num_heads": 1,
                "image_size": 64,
                "patch_size": 8,
                "spatial_merge_size": 2,
            },
            "engine",  # grid_sample patch by patch, in merge-block order
            [[1, 20, 12], [1, 4, 30]],
        ),
    ],
)
def test_streamed_blocks_are_the_whole_table_and_the_forward(
    small_client: httpx.Client,
    app_client: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
    config: dict,
    precision: str,
    grids: list[list[int]],
) -> None:
    """Past a 4096-element limit, in blocks of 1 KiB (a few rows each, cutting grid rows):
    npy, raw and safetensors bytes equal the unstreamed answer's, JSON's values and the
    tower's own forward (bit for bit for engine, within 8e-6 · max|T| for exact)."""
    import service.responses.bodies as bodies

    monkeypatch.setattr(bodies, "STREAM_BLOCK_BYTES", 1024)
    body = {"config": config, "grid_thw": grids, "precision": precision, "seed": 3}
    whole = app_client.post(ROUTE, json=body)
    assert whole.status_code == 200, whole.text
    want = json_tensor(whole.json(), "pos_embed").astype(np.float32)
    assert want.size > 4096
    for fmt in ("npy", "raw", "safetensors"):
        streamed = small_client.post(ROUTE, params={"format": fmt}, json=body)
        assert streamed.status_code == 200, streamed.text
        assert streamed.headers["server-timing"].endswith('cache;desc="stream"')
        kept = app_client.post(ROUTE, params={"format": fmt}, json=body)
        assert streamed.content == kept.content, fmt
    got = np.load(io.BytesIO(small_client.post(ROUTE, params={"format": "npy"}, json=body).content))
    np.testing.assert_array_equal(got, want)
    vision = config.get("vision_config", config)
    model = CONFIG_MAPPING[vision["model_type"]](
        **{k: v for k, v in vision.items() if k != "model_type"}
    )
    meta = whole.json()["meta"]
    table = seeded(meta["table_rows"], meta["width"], 3)
    rows = np.concatenate([model_rows(model, (h, w), table).numpy() for _, h, w in grids])
    if precision == "engine":
        np.testing.assert_array_equal(got, rows)
    else:
        np.testing.assert_allclose(got, rows, rtol=0, atol=8e-6 * float(table.abs().max()))


def test_engine_of_a_mixing_rule_is_not_streamed(small_client: httpx.Client) -> None:
    """The model's own bicubic runs on the whole grid: past the limit it is a 413 (the exact
    precision streams)."""
    body = {"config": CLIP, "grid": [6, 4], "precision": "engine"}
    r = small_client.post(ROUTE, params={"format": "npy"}, json=body)
    assert r.status_code == 413, r.text
    assert "POSENC_MAX_ELEMENTS" in r.text
    assert (
        small_client.post(
            ROUTE, params={"format": "npy"}, json={**body, "precision": "exact"}
        ).status_code
        == 200
    )


def test_a_table_or_weights_over_the_limit_is_413_before_computing(api: httpx.Client) -> None:
    """A config whose table (P x D) alone is over the limit, though the grid asked is one
    patch, and a grid whose axis weights are: 413 naming what, nothing allocated."""
    wide = {"model_type": "vit", "hidden_size": 2**20, "image_size": 224, "patch_size": 2}
    r = api.post(ROUTE, json={"config": wide, "grid": [1, 1], "include": "resample"})
    assert r.status_code == 200, r.text  # no table needed for the matrix alone
    r = api.post(ROUTE, json={"config": wide, "grid": [1, 1]}, params={"format": "npy"})
    assert r.status_code == 413, r.text
    assert "config" in r.text
    fine = {"model_type": "vit", "hidden_size": 1, "image_size": 2**16, "patch_size": 1}
    r = api.post(ROUTE, json={"config": fine, "grid": [1, 1]}, params={"format": "npy"})
    assert r.status_code == 413, r.text
    assert "grid" in r.text


def test_configs_positions_names_the_rule_and_the_endpoint(api: httpx.Client) -> None:
    """A ViT config alone and CLIP's whole file: the learned tower, its rule and endpoint."""
    r = api.post("/v1/configs/positions", json={"config": {"model_type": "vit"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kind"] == "none"
    vision = body["vision"]
    assert (vision["learned"], vision["rotary"], vision["endpoint"]) == (True, False, ROUTE)
    assert (vision["native_grid"], vision["table_rows"], vision["class_token"]) == (
        [14, 14],
        197,
        True,
    )
    assert vision["resize"] == {
        "rule": "interpolate_pos_encoding",
        "mode": "bicubic",
        "align_corners": False,
        "antialias": False,
    }
    llava = {  # LLaVA-1.5's file: CLIP ViT-L/14-336 and a Llama text model
        "model_type": "llava",
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": 1024,
            "image_size": 336,
            "patch_size": 14,
        },
        "text_config": {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
        },
    }
    r = api.post("/v1/configs/positions", json={"config": llava})
    assert r.status_code == 200, r.text
    vision = r.json()["vision"]
    assert (vision["model_type"], vision["table_rows"], vision["width"]) == (
        "clip_vision_model",
        577,
        1024,
    )


# ---------------------------------------------------------------------------------------------
# Vision model folders in POSENC_MODELS (a ViT and a CLIP saved by transformers, random weights)
# ---------------------------------------------------------------------------------------------

VIT_KEYS = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 16, "image_size": 64, "patch_size": 16}  # fmt: skip


@pytest.fixture(scope="module")
def vision_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from transformers import CLIPConfig, CLIPModel, ViTConfig, ViTModel

    torch.manual_seed(0)
    vit = tmp_path_factory.mktemp("vit")
    ViTModel(ViTConfig(**VIT_KEYS)).save_pretrained(vit)  # type: ignore[arg-type]
    clip = tmp_path_factory.mktemp("clip")
    text = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
            "intermediate_size": 8, "vocab_size": 50}  # fmt: skip
    CLIPModel(CLIPConfig(text_config=text, vision_config=VIT_KEYS)).save_pretrained(clip)
    return {"vit": vit, "clip": clip}


@pytest.fixture(scope="module")
def vision_client(gpt2_file: Path, vision_folders: dict[str, Path]) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    models = f"gpt2={gpt2_file},vit={vision_folders['vit']},clip={vision_folders['clip']}"
    with TestClient(create_app(make_settings(gpt2_file, models=models))) as client:
        yield client


def _own_interpolation(model: torch.nn.Module, grid: tuple[int, int]) -> np.ndarray:
    """The loaded model's own interpolate_pos_encoding on its own table."""
    h, w = grid
    width = VIT_KEYS["hidden_size"]
    embeddings = torch.zeros(1, 1 + h * w, width)
    patch = VIT_KEYS["patch_size"]
    with torch.no_grad():
        out = model.interpolate_pos_encoding(embeddings, h * patch, w * patch)  # type: ignore[operator]
    return out[0].detach().double().numpy()


@pytest.mark.parametrize("name", ["vit", "clip"])
def test_vision_folder_table_resized_as_the_model_does(
    vision_client: httpx.Client, vision_folders: dict[str, Path], name: str
) -> None:
    from transformers import CLIPModel, ViTModel

    if name == "vit":
        embeddings = ViTModel.from_pretrained(vision_folders["vit"]).embeddings
    else:
        embeddings = CLIPModel.from_pretrained(vision_folders["clip"]).vision_model.embeddings
    for grid in [(2, 7), (4, 4)]:
        body = {"model": name, "grid": list(grid), "precision": "engine"}
        r = vision_client.post(ROUTE, params={"format": "npy"}, json=body)
        assert r.status_code == 200, r.text
        want = _own_interpolation(embeddings, grid).astype(np.float32)
        np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), want)
    meta = vision_client.post(ROUTE, json={"model": name, "grid": [3, 3]}).json()["meta"]
    assert (meta["table"], meta["model"], meta["class_token"]) == ("checkpoint", name, True)


def test_vision_folders_listed_with_what_they_serve(vision_client: httpx.Client) -> None:
    listed = {m["name"]: m for m in vision_client.get("/v1/models").json()["models"]}
    vit = listed["vit"]
    assert vit["serves"] == [ROUTE] and vit["vocab_size"] == 0
    assert vit["vision"]["tensor"] == "embeddings.position_embeddings"
    assert (vit["vision"]["table_rows"], vit["vision"]["native_grid"]) == (17, [4, 4])
    assert listed["clip"]["vision"]["tensor"] == (
        "vision_model.embeddings.position_embedding.weight"
    )
    assert "/v1/embed" in listed["gpt2"]["serves"] and listed["gpt2"]["vision"] is None


def test_embed_on_a_vision_folder_is_422_saying_so(vision_client: httpx.Client) -> None:
    r = vision_client.post("/v1/embed", json={"model": "vit", "input_ids": [[1, 2]]})
    assert r.status_code == 422, r.text
    assert "vision model" in r.text and "vision-learned" in r.text
    r = vision_client.post(ROUTE, json={"model": "gpt2"})
    assert r.status_code == 422 and "not a vision model folder" in r.text, r.text


def test_fixed_tower_other_grid_is_422(api: httpx.Client) -> None:
    config = {"model_type": "ovis2", "vision_config": {"model_type": "ovis2_vision"}}
    r = api.post(ROUTE, json={"config": config, "grid": [16, 15]})
    assert r.status_code == 422 and "without resizing" in r.text, r.text
    r = api.post(ROUTE, json={"config": config})
    assert r.status_code == 200 and r.json()["meta"]["resize"] == "fixed", r.text

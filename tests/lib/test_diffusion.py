"""posenc.diffusion against hand-worked cases and closed forms written here (numpy float64).

diffusers' own outputs are checked in test_diffusion_fixtures.py (recorded) and
test_diffusion_live.py (run where diffusers imports); this file needs neither. The rules of one
model family are beside their modules: test_cogvideox.py, test_ltx_video.py, test_sincos.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument, TooLarge
from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D, describe, diffusion_rope_grid, sincos_grid
from posenc.diffusion.wan import wan_axes
from posenc.resolve import compute, context, resolve_fields


def rope(**fields: Any) -> dict[str, np.ndarray]:
    params = resolve_fields(DIFFUSION_ROPE, {"dtype": "float64", **fields})
    return {k: v.numpy() for k, v in compute(DIFFUSION_ROPE, params).items()}


def sincos(**fields: Any) -> np.ndarray:
    params = resolve_fields(SINCOS_2D, {"dtype": "float64", **fields})
    return compute(SINCOS_2D, params)["pos_embed"].numpy()


def axis_angles(pos: np.ndarray, dim: int, theta: float) -> np.ndarray:
    """``pos · theta^(−2k/dim)`` for ``k < dim/2``: (n, dim/2)."""
    return pos[:, None] * theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def interleaved(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)


def closed_form(ids: np.ndarray, axes: tuple[int, ...], theta: float) -> tuple[np.ndarray, ...]:
    angles = np.concatenate([axis_angles(ids[:, a], d, theta) for a, d in enumerate(axes)], axis=1)
    return interleaved(angles)


# --- hand-worked ids -----------------------------------------------------------------------


def test_flux_ids_text_first_then_rows_and_columns() -> None:
    got = rope(model="flux", height=2, width=3, text_len=2)["ids"]
    want = [[0, 0, 0]] * 2 + [[0, h, w] for h in range(2) for w in range(3)]
    np.testing.assert_array_equal(got, want)


def test_qwen_image_centres_rows_and_puts_text_after_the_largest_index() -> None:
    # H = 5: rows −3 … 1 (H − H//2 = 3 before the centre); W = 4: columns −2 … 1;
    # text starts at max(5 // 2, 4 // 2) = 2 on every axis, and comes first.
    got = rope(model="qwen-image", height=5, width=4, text_len=2)["ids"]
    text = [[2, 2, 2], [3, 3, 3]]
    video = [[0, h, w] for h in range(-3, 2) for w in range(-2, 2)]
    np.testing.assert_array_equal(got, text + video)


def test_hunyuan_video_text_follows_the_video() -> None:
    got = rope(model="hunyuan-video", frames=2, height=1, width=2, text_len=2)["ids"]
    want = [[t, 0, w] for t in range(2) for w in range(2)] + [[0, 0, 0]] * 2
    np.testing.assert_array_equal(got, want)


def test_wan_and_ltx_have_no_text_rows() -> None:
    for model in ("wan", "ltx-video"):
        out = rope(model=model, frames=2, height=2, width=2, text_len=50)
        assert out["ids"].shape[0] == 8


# --- closed forms of the tables ------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "axes", "theta", "text_len"),
    [
        ("flux", (16, 56, 56), 10000.0, 3),
        ("wan", (44, 42, 42), 10000.0, 0),
        ("hunyuan-video", (16, 56, 56), 256.0, 0),
        ("qwen-image", (16, 56, 56), 10000.0, 4),
        ("cogvideox", (16, 24, 24), 10000.0, 0),
    ],
)
def test_tables_are_the_closed_form_of_their_ids(
    model: str, axes: tuple[int, ...], theta: float, text_len: int
) -> None:
    frames = 1 if model in ("flux", "qwen-image") else 2
    out = rope(model=model, frames=frames, height=3, width=5, text_len=text_len)
    cos, sin = closed_form(out["ids"], axes, theta)
    np.testing.assert_allclose(out["cos"], cos, rtol=0, atol=1e-14)
    np.testing.assert_allclose(out["sin"], sin, rtol=0, atol=1e-14)


def test_wan_head_split() -> None:
    assert wan_axes(128) == (44, 42, 42)
    assert wan_axes(64) == (24, 20, 20)  # h = w = 2 · (64 // 6) = 20, t the other 24
    assert wan_axes(96) == (32, 32, 32)


def test_position_zero_is_the_identity_and_text_rows_that_are_not_rotated() -> None:
    flux = rope(model="flux", height=1, width=1, text_len=2)  # text ids 0 and video (0, 0, 0)
    np.testing.assert_array_equal(flux["cos"], 1.0)
    np.testing.assert_array_equal(flux["sin"], 0.0)
    cog = rope(model="cogvideox", frames=1, height=2, width=2, text_len=3)
    np.testing.assert_array_equal(cog["cos"][:3], 1.0)
    np.testing.assert_array_equal(cog["sin"][:3], 0.0)


def test_rotations_depend_only_on_the_offset_per_axis() -> None:
    """<rot(q, a), rot(k, b)> is the same for every pair of tokens at the same (Δt, Δh, Δw)."""
    out = rope(model="wan", frames=3, height=4, width=5)
    ids, cos, sin = out["ids"], out["cos"], out["sin"]
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal(128), rng.standard_normal(128)

    def rotate(x: np.ndarray, row: int) -> np.ndarray:
        pairs = x.reshape(-1, 2)
        c, s = cos[row, ::2], sin[row, ::2]
        return np.stack([pairs[:, 0] * c - pairs[:, 1] * s, pairs[:, 1] * c + pairs[:, 0] * s], 1)

    index = {tuple(map(int, r)): i for i, r in enumerate(ids)}
    base = rotate(q, index[(2, 3, 4)]).ravel() @ rotate(k, index[(1, 1, 2)]).ravel()
    shifted = rotate(q, index[(1, 2, 2)]).ravel() @ rotate(k, index[(0, 0, 0)]).ravel()
    assert base == pytest.approx(shifted, abs=1e-12)


# --- precision, blocks, sizes ----------------------------------------------------------------


def test_diffusers_precision_is_exact_where_diffusers_computes_in_float64() -> None:
    for model in ("flux", "wan"):
        exact = rope(model=model, height=6, width=7, dtype="float32")
        engine = rope(model=model, height=6, width=7, dtype="float32", precision="diffusers")
        for name in exact:
            np.testing.assert_array_equal(exact[name], engine[name])


def test_diffusers_precision_differs_where_it_computes_in_float32() -> None:
    exact = rope(model="ltx-video", frames=9, height=8, width=8, dtype="float32")
    engine = rope(
        model="ltx-video", frames=9, height=8, width=8, dtype="float32", precision="diffusers"
    )
    assert 1e-5 < np.abs(exact["cos"] - engine["cos"]).max() < 1e-2


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        (
            DIFFUSION_ROPE,
            {"model": "hunyuan-video", "frames": 3, "height": 5, "width": 7, "text_len": 9},
        ),
        (DIFFUSION_ROPE, {"model": "qwen-image", "height": 9, "width": 5, "text_len": 9}),
        (
            DIFFUSION_ROPE,
            {"model": "cogvideox", "frames": 2, "height": 9, "width": 11, "text_len": 4},
        ),
        (SINCOS_2D, {"model": "cogvideox", "frames": 3, "height": 5, "width": 7}),
    ],
)
def test_row_blocks_give_the_whole_tables_bytes(kind: Any, fields: dict[str, Any]) -> None:
    params = resolve_fields(kind, fields)
    whole = compute(kind, params)
    for name, blocks in kind.blocks(params, context(params)).items():
        small = blocks.whole(max_block_bytes=4096)  # many blocks of a few rows
        assert torch.equal(small, whole[name]), name


def test_a_4k_video_grid_is_sized_from_its_numbers_and_streams() -> None:
    # Wan at 3840 x 2160, 81 frames: latent 21 x 270 x 480 (VAE 4x8x8), patches 1x2x2.
    fields = {"model": "wan", "frames": 21, "height": 135, "width": 240}
    params = resolve_fields(DIFFUSION_ROPE, fields)
    shapes = DIFFUSION_ROPE.shapes(params)
    assert shapes == {"cos": (680400, 128), "sin": (680400, 128), "ids": (680400, 3)}
    assert list(shapes) == ["cos", "sin", "ids"]  # the kind's tensor order: cos is primary
    with pytest.raises(TooLarge):
        compute(DIFFUSION_ROPE, params, max_elements=10**8)  # 176 M elements, none allocated
    blocks = DIFFUSION_ROPE.blocks(params, context(params))["cos"]
    ranges = blocks.ranges()
    assert len(ranges) > 10
    last_start, last_stop = ranges[-1]
    tail = blocks.fill(last_start, last_stop)
    ids = DIFFUSION_ROPE.blocks(params, context(params))["ids"].fill(680399, 680400)
    np.testing.assert_array_equal(ids.numpy(), [[20, 134, 239]])
    cos, _ = closed_form(ids.numpy().astype(np.float64), (44, 42, 42), 10000.0)
    np.testing.assert_allclose(tail[-1].numpy(), cos[0], rtol=0, atol=1e-6)


def test_a_4k_image_grid_of_sd3_is_a_422_beyond_its_table() -> None:
    with pytest.raises(InvalidArgument, match="pos_embed_max_size 192") as info:
        sincos_grid(resolve_fields(SINCOS_2D, {"model": "sd3", "height": 270, "width": 480}))
    assert info.value.field == "height"


# --- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"height": 2, "width": 2}, "model", "give model"),
        ({"model": "flux", "frames": 2, "height": 2, "width": 2}, "frames", "image model"),
        (
            {"model": "wan", "frames": 1025, "height": 2, "width": 2},
            "frames",
            "rope_max_seq_len 1024",
        ),
        ({"model": "qwen-image", "height": 2, "width": 2, "text_len": 4096}, "text_len", "4096"),
        (
            {"model": "flux", "height": 2, "width": 2, "rope_interpolation_scale": [1, 1, 1]},
            "rope_interpolation_scale",
            "LTX",
        ),
        (
            {"config": {"_class_name": "MochiTransformer3DModel"}, "height": 2, "width": 2},
            "config._class_name",
            "MochiTransformer3DModel",
        ),
        (
            {"config": {"num_layers": 2}, "height": 2, "width": 2},
            "config._class_name",
            "no _class_name",
        ),
        (
            {"config": {"_class_name": "CogVideoXTransformer3DModel"}, "height": 2, "width": 2},
            "config.use_rotary_positional_embeddings",
            "sincos-2d",
        ),
        ({"model": "CogVideoX1.5-5B", "height": 151, "width": 2}, "height", "base grid"),
        (
            {
                "model": "flux",
                "config": {"_class_name": "WanTransformer3DModel"},
                "height": 2,
                "width": 2,
            },
            "model",
            "disagree",
        ),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words) as info:
        diffusion_rope_grid(resolve_fields(DIFFUSION_ROPE, fields))
    assert info.value.field == field


def test_sincos_of_a_rotary_cogvideox_is_a_422() -> None:
    config = {
        "_class_name": "CogVideoXTransformer3DModel",
        "use_rotary_positional_embeddings": True,
    }
    with pytest.raises(InvalidArgument, match="diffusion-rope"):
        sincos_grid(resolve_fields(SINCOS_2D, {"config": config, "height": 2, "width": 2}))


# --- configs ---------------------------------------------------------------------------------


def test_a_config_without_keys_takes_the_class_defaults_and_says_so() -> None:
    params = resolve_fields(
        DIFFUSION_ROPE,
        {"config": {"_class_name": "FluxTransformer2DModel"}, "height": 1, "width": 2},
    )
    meta = DIFFUSION_ROPE.make_meta(params)
    assert meta["defaulted"] == ["axes_dims_rope"]
    assert meta["axes"] == [16, 56, 56] and meta["source"] is None
    named = DIFFUSION_ROPE.make_meta(
        resolve_fields(DIFFUSION_ROPE, {"model": "wan", "height": 1, "width": 1})
    )
    assert named["source"]["checkpoint"] == "Wan2.1-T2V-14B"
    assert named["text"] == "cross_attention" and named["layout"] == "interleaved"


def test_describe_reads_a_transformer_config_and_a_model_index() -> None:
    said = describe({"_class_name": "QwenImageTransformer2DModel", "axes_dims_rope": [16, 56, 56]})
    assert (said["file"], said["kind"], said["model"]) == (
        "transformer_config",
        "diffusion_rope",
        "qwen-image",
    )
    assert said["endpoint"] == "/v1/encodings/diffusion-rope" and said["defaulted"] == [
        "use_layer3d_rope"
    ]
    index = {
        "_class_name": "StableDiffusion3Pipeline",
        "transformer": ["diffusers", "SD3Transformer2DModel"],
    }
    said = describe(index)
    assert (said["file"], said["kind"], said["model"]) == ("model_index", "sincos_2d", "sd3")
    assert said["warnings"] and said["class_name"] == "SD3Transformer2DModel"
    cog2b = describe({"_class_name": "CogVideoXTransformer3DModel"})
    assert cog2b["kind"] == "sincos_2d"
    mochi = describe({"_class_name": "MochiTransformer3DModel"})
    assert mochi["kind"] == "none" and "learned" in mochi["reason"]


def test_a_class_name_as_model_reads_the_class_defaults() -> None:
    params = resolve_fields(
        DIFFUSION_ROPE, {"model": "HunyuanVideoTransformer3DModel", "height": 1, "width": 2}
    )
    meta = DIFFUSION_ROPE.make_meta(params)
    assert (meta["model"], meta["source"]) == ("hunyuan-video", None)
    assert meta["defaulted"] == ["rope_axes_dim", "rope_theta"]
    assert meta["config_values"] == {"rope_axes_dim": [16, 56, 56], "rope_theta": 256.0}


def test_precision_engine_is_diffusers_own_arithmetic() -> None:
    """``precision: "engine"`` (the 1.3 vocabulary of every RoPE-family table) is diffusers'
    own arithmetic, the same table as ``"diffusers"``, and not the exact one (LTX-Video forms
    its angles in float32, far from the float64 table)."""
    from posenc.resolve import compute, resolve_fields

    def cos(precision: str) -> torch.Tensor:
        body = {"model": "ltx-video", "frames": 2, "height": 3, "width": 4, "precision": precision}
        return dict(compute(DIFFUSION_ROPE, resolve_fields(DIFFUSION_ROPE, body)))["cos"]

    assert torch.equal(cos("engine"), cos("diffusers"))
    assert not torch.equal(cos("engine"), cos("exact"))

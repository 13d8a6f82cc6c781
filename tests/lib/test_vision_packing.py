"""Several images' patch grids packed into one vision sequence, as the towers pack them.

The rotary tables and position ids of packed grids are those of each grid sent alone, and
``meta.cu_seqlens`` / ``meta.max_seqlen`` are the segments the tower attends within: transformers'
own ``vision_utils.get_vision_attention_seqlens`` (what Qwen-VL, GLM-4V and Kimi-K2.5's towers
call, Kimi-K2.5 with ``merge_temporal=True``) and Pixtral's packed image lengths
(``PixtralTransformer``'s flash-attn ``cu_seqlens``: each image's ``h·w``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.core import kinds
from posenc.vision.rope import (
    VISION_RULES,
    vision_cu_seqlens,
    vision_position_ids,
    vision_rope_cos_sin,
    vision_rope_spec,
)

transformers = pytest.importorskip("transformers")
vision_utils = pytest.importorskip("transformers.vision_utils")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

KIND = kinds.REGISTRY["vision_rope"]
VIDEO_GRIDS = [[1, 4, 6], [3, 2, 4], [1, 6, 2], [2, 4, 4]]
IMAGE_GRIDS = [[1, 4, 6], [1, 2, 4], [1, 6, 2], [1, 4, 4]]
MODEL_TYPES = [
    "qwen2_vl_vision",
    "qwen2_5_vl_vision",
    "qwen3_vl_vision",
    "glm4v_vision",
    "kimi_k25_vision",
    "paddleocr_vl_vision",
    "pixtral",
]


def _config(model_type: str) -> dict[str, Any]:
    return CONFIG_MAPPING[model_type]().to_dict()


def _grids(model_type: str) -> list[list[int]]:
    return IMAGE_GRIDS if VISION_RULES[model_type].images_only else VIDEO_GRIDS


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_packed_grids_equal_each_grid_alone(model_type: str) -> None:
    """cos, sin and (row, column) of grid g in the packed sequence are grid g's own."""
    config, grids = _config(model_type), _grids(model_type)
    packed = vision_rope_spec(config, grids)
    cos, sin = vision_rope_cos_sin(packed)
    ids = vision_position_ids(packed)
    cu_grids = [0]
    for n in packed.tokens_per_grid:
        cu_grids.append(cu_grids[-1] + n)
    for g, grid in enumerate(grids):
        alone = vision_rope_spec(config, [grid])
        a, b = cu_grids[g], cu_grids[g + 1]
        cos_a, sin_a = vision_rope_cos_sin(alone)
        assert torch.equal(cos[a:b], cos_a) and torch.equal(sin[a:b], sin_a)
        assert torch.equal(ids[a:b], vision_position_ids(alone))


@pytest.mark.parametrize("model_type", MODEL_TYPES[:-1])
def test_cu_seqlens_are_the_towers_own(model_type: str) -> None:
    """transformers' get_vision_attention_seqlens, with the flash-attn config that makes it
    give max_seqlen; Kimi-K2.5's tower passes merge_temporal=True."""
    config, grids = _config(model_type), _grids(model_type)
    spec = vision_rope_spec(config, grids)
    hf = CONFIG_MAPPING[model_type]()
    hf._attn_implementation = "flash_attention_2"
    merge_temporal = VISION_RULES[model_type].segments == "video"
    cu, longest = vision_utils.get_vision_attention_seqlens(
        torch.tensor(grids), hf, merge_temporal=merge_temporal
    )
    assert vision_cu_seqlens(spec) == cu.tolist()
    meta = KIND.meta(resolve.resolve_fields(KIND, {"config": config, "grid_thw": grids}))
    assert meta["cu_seqlens"] == cu.tolist() and meta["max_seqlen"] == longest


def test_pixtral_packs_each_image() -> None:
    """PixtralTransformer's flash-attn cu_seqlens: [0, cumsum of each image's h·w]."""
    spec = vision_rope_spec(_config("pixtral"), IMAGE_GRIDS)
    assert vision_cu_seqlens(spec) == [0, 24, 32, 44, 60]


def test_hand_worked_segments() -> None:
    """Frames apart (Qwen2-VL), frames together (Kimi-K2.5), Llama 4's class token with its
    image."""
    qwen = vision_rope_spec(_config("qwen2_vl_vision"), [[2, 2, 4], [1, 4, 4]])
    assert vision_cu_seqlens(qwen) == [0, 8, 16, 32]
    kimi = vision_rope_spec(_config("kimi_k25_vision"), [[2, 2, 4], [1, 4, 4]])
    assert vision_cu_seqlens(kimi) == [0, 16, 32]
    llama = vision_rope_spec(_config("llama4_vision_model"))
    side = llama.grids[0][1]
    assert vision_cu_seqlens(llama) == [0, side * side + 1]

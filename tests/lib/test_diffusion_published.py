"""Every quoted diffusers config names its repository and where its values were checked."""

from __future__ import annotations

import re

import pytest

from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D
from posenc.diffusion.configs import MODEL_NAMES, SINCOS_MODEL_NAMES
from posenc.diffusion.published import DEFAULT_CONFIG, PUBLISHED
from posenc.diffusion.sweep import SWEEP
from posenc.resolve import resolve_fields


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_entry_has_a_repository_a_served_class_and_a_source(name: str) -> None:
    repo, config, verified = PUBLISHED[name]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", repo), repo
    assert SWEEP[str(config["_class_name"])].served, name
    assert len(verified) > 20, name  # a sentence on where the values were checked
    assert name in MODEL_NAMES or name in SINCOS_MODEL_NAMES


def test_short_names_stand_for_quoted_checkpoints() -> None:
    assert set(DEFAULT_CONFIG.values()) <= set(PUBLISHED)
    assert {n for n in DEFAULT_CONFIG if not n.endswith("-sincos")} >= {
        "flux", "wan", "hunyuan-video", "qwen-image", "cogvideox", "ltx-video", "sd3", "pixart", "dit"
    }  # fmt: skip


def test_flux_dev_quotes_no_axes_key_and_gets_the_class_default() -> None:
    # black-forest-labs/FLUX.1-dev's transformer/config.json (diffusers 0.30.0.dev0) has no
    # axes_dims_rope key; FluxTransformer2DModel's default (16, 56, 56) applies.
    assert "axes_dims_rope" not in PUBLISHED["FLUX.1-dev"][1]
    meta = DIFFUSION_ROPE.make_meta(
        resolve_fields(DIFFUSION_ROPE, {"model": "flux", "height": 1, "width": 1})
    )
    assert meta["axes"] == [16, 56, 56] and meta["defaulted"] == ["axes_dims_rope"]
    assert meta["source"]["repository"] == "black-forest-labs/FLUX.1-dev"


def test_cogvideox_is_rotary_at_5b_and_sincos_at_2b() -> None:
    assert PUBLISHED["CogVideoX-5b"][1]["use_rotary_positional_embeddings"] is True
    assert PUBLISHED["CogVideoX-2b"][1]["use_rotary_positional_embeddings"] is False
    sincos = SINCOS_2D.make_meta(
        resolve_fields(SINCOS_2D, {"model": "cogvideox", "height": 1, "width": 1})
    )
    assert sincos["source"]["checkpoint"] == "CogVideoX-2b" and sincos["dim"] == 30 * 64

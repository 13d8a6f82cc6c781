"""``posenc.explain.describe.describe``: which reading a file gets, for each engine (the whole of
``POST /v1/configs/positions``; tests/service/test_service_config.py and its neighbours check
the answers through HTTP).

References: Llama 3.1 8B's published config (rope_scaling llama3, factor 8, 131,072 positions);
SigLIP's vision tower (a learned 14x14 table, no rotary); FLUX.1's transformer config
(``axes_dims_rope`` 16/56/56, diffusers' ``FluxPosEmbed``).
"""

from __future__ import annotations

import pytest

from posenc.core.errors import InvalidArgument
from posenc.engines import engine_names
from posenc.explain.describe import describe
from posenc.facts.model_configs import model_config

FLUX = {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 56]}


def test_a_text_config_is_read_by_the_engine_asked() -> None:
    config = model_config("llama-3.1-8b")
    by_transformers = describe(config)
    rope = by_transformers["rope"]["full_attention"]
    assert (by_transformers["kind"], rope["rope_type"], rope["factor"]) == ("rope", "llama3", 8.0)
    assert by_transformers["meta"] == {"engine": "transformers"}
    assert "vllm_rows" not in rope
    by_vllm = describe(config, "vllm", max_model_len=4096)
    assert by_vllm["meta"] == {"engine": "vllm", "max_model_len": 4096}
    assert by_vllm["rope"]["full_attention"]["vllm_rows"] == 131072
    for engine in ("transformers", "vllm", "llama.cpp"):  # mlx-lm runs no llama3 rope
        said = describe(config, engine)
        assert said["engine"] == engine and said["meta"]["engine"] == engine
        assert len(said["layers"]) == config["num_hidden_layers"]
        assert said["query_scale"] is None and said["vision"] is None


def test_a_vision_tower_alone_has_no_text_positions() -> None:
    said = describe({"model_type": "siglip_vision_model"}, "vllm", max_model_len=77)
    assert (said["kind"], said["rope"], said["layer_types"]) == ("none", {}, [])
    assert (said["vision"]["rotary"], said["vision"]["table_rows"]) == (False, 196)
    assert said["meta"] == {"engine": "vllm", "max_model_len": 77}
    assert said["warnings"][0].startswith("a vision tower's config alone")


def test_a_diffusers_config_is_read_by_diffusers_whatever_the_engine() -> None:
    for engine in engine_names():
        said = describe(FLUX, engine)
        assert (said["kind"], said["model_type"], said["layout"]) == (
            "diffusion_rope",
            "FluxTransformer2DModel",
            "interleaved",
        )
        assert said["diffusers"]["class_name"] == "FluxTransformer2DModel"
        assert said["meta"] == {"engine": engine, "reader": "diffusers"}


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="got 'tgi'") as exc:
        describe(model_config("llama-3.1-8b"), "tgi")
    assert exc.value.field == "engine"

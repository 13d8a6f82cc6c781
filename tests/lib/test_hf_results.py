"""What a config means for positions (:mod:`posenc.readers.hf.results`): the
``/v1/encodings/rope`` fields :func:`rope_request_fields` gives for published configs, checked
against the numbers in those configs (quoted in :mod:`posenc.facts.model_configs`): Llama 3.1's
``llama3`` scaling and ``rope_theta``, GPT-NeoX-20B's ``rotary_pct`` of ``6144 / 64``, Qwen2.5-VL's
``mrope_section``, Gemma 3's two layer types (``rope_theta`` and ``rope_local_base_freq``); and
the JSON-ready forms (:func:`plain`, ``RopeLayerType.to_dict``)."""

from __future__ import annotations

import pytest

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import plain, rope_request_fields

PLAIN = {"layout": "half", "exponent_dim": None, "rotation": "positive"}


def test_llama_3_1_fields_carry_its_scaling() -> None:
    fields = rope_request_fields(read_positions(model_config("llama-3.1-8b")))
    assert fields == {
        "head_dim": 128,  # 4096 / 32
        "rotary_dim": 128,
        "base": 500000.0,
        "scaling": {
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        **PLAIN,
    }


def test_gpt_neox_rotates_a_quarter_of_the_head() -> None:
    fields = rope_request_fields(read_positions(model_config("gpt-neox-20b")))
    assert (fields["head_dim"], fields["rotary_dim"]) == (6144 // 64, int(0.25 * 96))
    assert fields["base"] == 10000.0 and fields["scaling"] is None


def test_qwen2_5_vl_adds_its_mrope_sections() -> None:
    fields = rope_request_fields(read_positions(model_config("qwen2.5-vl-7b")))
    assert fields["mrope_section"] == [16, 24, 24] and fields["mrope_interleaved"] is False
    assert fields["scaling"] is None  # "mrope" is not a scaling of the frequencies
    assert sum(fields["mrope_section"]) == fields["rotary_dim"] // 2


def test_gemma_3_gives_each_layer_types_base() -> None:
    positions = read_positions(model_config("gemma-3-1b"))
    full = rope_request_fields(positions, "full_attention")
    local = rope_request_fields(positions, "sliding_attention")
    assert (full["base"], local["base"]) == (1000000.0, 10000.0)
    assert full["head_dim"] == local["head_dim"] == 256
    with pytest.raises(InvalidArgument, match="give layer_type, one of"):
        rope_request_fields(positions)


def test_json_ready_forms() -> None:
    assert plain({"a": (1, {"b": (2, 3)})}) == {"a": [1, {"b": [2, 3]}]}
    layer = read_positions(model_config("llama-3.1-8b")).rope_for(None)
    assert layer.to_dict() == {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "head_dim": 128,
        "rotary_dim": 128,
        "attention_scaling": 1.0,
    }

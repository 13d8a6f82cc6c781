"""A preset or a model's ``config.json`` merged into a kind's fields
(:mod:`posenc.readers.sources`): what the caller gives wins over the config or preset, which
wins over the field's default; config and preset together, a config or preset of another kind
of positions and ``layer_type`` without a config are refused, naming the field and where to
send it. Expected values are the published configs' numbers: Llama 2 7B and Llama 3
(``hidden_size`` 4096 over 32 heads: ``head_dim`` 128; ``rope_theta`` 10000 and 500000) and
BLOOM 7B1 (32 heads, ALiBi's ``max_bias`` 8)."""

from __future__ import annotations

import pytest

from posenc.core.errors import InvalidArgument, UnknownName
from posenc.core.kinds import REGISTRY
from posenc.readers.sources import endpoint_of, merge_sources, preset_params
from posenc.rope_kinds.kind import ROPE

LLAMA3 = {
    "model_type": "llama",
    "rope_theta": 500000.0,
    "hidden_size": 4096,
    "num_attention_heads": 32,
}


def test_a_preset_fills_what_the_caller_left_out() -> None:
    fields, info = merge_sources(ROPE, {"preset": "llama-2-7b", "seq_len": 4})
    assert (fields["head_dim"], fields["rotary_dim"], fields["base"]) == (128, 128, 10000.0)
    assert fields["seq_len"] == 4 and info == {}
    fields, _ = merge_sources(ROPE, {"preset": "llama-2-7b", "seq_len": 4, "base": 500.0})
    assert fields["base"] == 500.0  # the caller wins


def test_a_config_is_read_and_said_in_the_info() -> None:
    fields, info = merge_sources(ROPE, {"config": LLAMA3, "seq_len": 4})
    assert (fields["head_dim"], fields["base"], fields["layout"]) == (128, 500000.0, "half")
    assert "config" not in fields
    assert info == {"config_model_type": "llama", "rope_type": "default"}
    fields, _ = merge_sources(ROPE, {"config": LLAMA3, "seq_len": 4, "head_dim": 64})
    assert fields["head_dim"] == 64


def test_alibi_takes_its_section_of_the_preset() -> None:
    alibi = REGISTRY["alibi"]
    fields, _ = merge_sources(alibi, {"preset": "bloom-7b1", "seq_len": 3})
    assert (fields["num_heads"], fields["max_bias"], fields["seq_len"]) == (32, 8.0, 3)
    fields, _ = merge_sources(alibi, {"preset": "bloom-7b1", "seq_len": 3, "num_heads": 8})
    assert fields["num_heads"] == 8


def test_without_a_source_the_fields_are_the_callers() -> None:
    assert merge_sources(ROPE, {"seq_len": 4, "head_dim": 8}) == ({"seq_len": 4, "head_dim": 8}, {})


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({"config": LLAMA3, "preset": "llama-2-7b"}, "config", "give config or preset, not both"),
        ({"config": [1, 2]}, "config", "config must be a JSON object, got [1, 2]"),
        (
            {"config": {"model_type": "gpt2"}},
            "config",
            "uses learned positions, not rope; send it to /v1/encodings/learned",
        ),
        ({"layer_type": "full_attention"}, "layer_type", "give a config with per-layer-type"),
    ],
)
def test_refusals_name_the_field(given: dict, field: str, words: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        merge_sources(ROPE, {"seq_len": 4, **given})
    assert err.value.field == field and words in str(err.value)


def test_a_preset_of_another_kind_lists_the_right_ones() -> None:
    with pytest.raises(UnknownName) as err:
        preset_params("gpt2", "rope")
    message = str(err.value)
    assert message.startswith("preset 'gpt2' is of kind learned, not rope; the rope presets are ")
    assert "llama-2-7b" in message and "bloom-7b1" not in message
    assert err.value.field == "preset"


def test_endpoint_of_a_kind_of_positions() -> None:
    assert endpoint_of("rope") == "/v1/encodings/rope"
    assert endpoint_of("learned") == "/v1/encodings/learned"
    assert endpoint_of("sinusoidal") == "/v1/encodings/sinusoidal"  # no config, an endpoint
    assert endpoint_of("nothing") is None

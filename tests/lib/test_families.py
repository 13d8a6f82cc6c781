"""Which model types posenc reads without an unknown-``model_type`` warning: its own records,
and every type the locked transformers defines a config for (the list beside
``posenc/facts/families.py``, which must be that release's ``CONFIG_MAPPING_NAMES``)."""

from __future__ import annotations

from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from posenc.facts.families import (
    FAMILIES,
    TRANSFORMERS_MODEL_TYPES,
    is_known_model_type,
    unknown_model_type_warning,
)
from posenc.readers.hf.positions import read_positions


def test_the_list_is_the_installed_transformers_config_mapping() -> None:
    assert frozenset(CONFIG_MAPPING_NAMES) == TRANSFORMERS_MODEL_TYPES


def test_records_and_transformers_types_are_known_and_others_are_not() -> None:
    assert all(is_known_model_type(t) for t in FAMILIES)
    assert all(is_known_model_type(t) for t in ("llama", "qwen3_next", "olmoe", "gemma3_text"))
    assert not is_known_model_type("zorblax")
    assert not is_known_model_type("zorblax_text")


def test_an_unknown_type_is_read_by_the_generic_rules_with_a_warning() -> None:
    config = {
        "model_type": "zorblax",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_theta": 50000.0,
    }
    positions = read_positions(config)
    assert positions.kind == "rope"
    assert positions.rope_for(None).rope_theta == 50000.0
    assert unknown_model_type_warning("zorblax") in positions.warnings
    known = read_positions({**config, "model_type": "llama"})
    assert not any("posenc knows" in w for w in known.warnings)

"""Hints for config.json keys sent as body fields (:mod:`posenc.facts.config_keys`): the body
field a key stands for where the kind has it (inside the scaling object for a scaling key, the
rotated width described for ``partial_rotary_factor``), else "send it inside config" where the
kind takes a config, else nothing. The expected sentences are written out here."""

from __future__ import annotations

import pytest

from posenc.facts.config_keys import CONFIG_KEYS, config_key_hint

ROPE = ["seq_len", "head_dim", "rotary_dim", "base", "scaling", "config"]
ALIBI = ["seq_len", "num_heads", "max_bias"]


@pytest.mark.parametrize(
    ("key", "fields", "hint"),
    [
        ("rope_theta", ROPE, "'rope_theta' is a config.json key: its body field is base"),
        ("n_head", ALIBI, "'n_head' is a config.json key: its body field is num_heads"),
        ("alibi_bias_max", ALIBI, "'alibi_bias_max' is a config.json key: its body field is max_bias"),
        (
            "beta_fast",
            ROPE,
            "'beta_fast' is a config.json key: its body field is scaling.beta_fast "
            "(inside the scaling object)",
        ),
        (
            "rotary_pct",
            ROPE,
            "'rotary_pct' is a config.json key: its body field is rotary_dim (the number of "
            "rotated channels: the factor times head_dim)",
        ),
        (
            "rope_scaling",
            ROPE,
            "'rope_scaling' is a config.json key: its body field is scaling (an object with "
            '"type", as transformers\' rope_parameters has "rope_type")',
        ),
        (
            "hidden_size",
            ROPE,
            "'hidden_size' is a config.json key: send it inside config (the whole config.json, "
            'as {"config": {...}})',
        ),
        (
            "num_key_value_heads",
            ROPE,
            "'num_key_value_heads' is a config.json key: send it inside config (the whole "
            'config.json, as {"config": {...}})',
        ),
    ],
)  # fmt: skip
def test_the_hint_names_the_body_field_or_config(key: str, fields: list[str], hint: str) -> None:
    assert config_key_hint(key, fields) == hint


def test_no_hint_for_an_unknown_key_or_a_kind_without_the_field_or_config() -> None:
    assert config_key_hint("rope_thetta", ROPE) is None  # a misspelling: not a config key
    assert config_key_hint("rope_theta", ALIBI) is None  # no base and no config in ALiBi
    assert config_key_hint("hidden_size", ALIBI) is None


def test_every_target_is_a_body_field_or_a_scaling_key() -> None:
    """Each target is ``field`` or ``scaling.key``; the keys with none go inside ``config``."""
    for key, targets in CONFIG_KEYS.items():
        for target in targets:
            field, _, inner = target.partition(".")
            assert field and " " not in target, key
            assert not inner or field == "scaling", key
    assert CONFIG_KEYS["rope_theta"] == ("base",) and CONFIG_KEYS["model_type"] == ()

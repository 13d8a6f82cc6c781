"""Hints for people who think in ``config.json`` keys: ``rope_theta`` in a rope body is the body
field ``base``, ``num_attention_heads`` in an ALiBi body is ``num_heads``, and a key with no body
field of its own (``hidden_size`` in a rope body) belongs inside ``config``.

:func:`config_key_hint` turns an unknown body field into that sentence; the service's 422 and
:func:`posenc.core.kinds.resolve` say it in place of a spelling suggestion (``rope_theta`` is not a
misspelt ``mrope_section``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

_SCALING_KEYS = (
    "factor",
    "original_max_position_embeddings",
    "short_factor",
    "long_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "low_freq_factor",
    "high_freq_factor",
)

#: A config key -> the body fields it may stand for, best first (``scaling.X``: a key of the
#: ``scaling`` object). A key whose targets a kind lacks goes inside ``config`` there.
CONFIG_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "rope_theta": ("base",),
        "rotary_emb_base": ("base",),
        "rope_scaling": ("scaling",),
        "rope_parameters": ("scaling",),
        "rope_type": ("scaling.type",),
        **{key: (f"scaling.{key}",) for key in _SCALING_KEYS},
        "partial_rotary_factor": ("rotary_dim",),
        "rotary_pct": ("rotary_dim",),
        "rotary_emb_fraction": ("rotary_dim",),
        "max_position_embeddings": ("seq_len",),
        "n_positions": ("seq_len",),
        "max_seq_len": ("seq_len",),
        "hidden_size": ("d_model",),
        "n_embd": ("d_model",),
        "num_attention_heads": ("num_heads",),
        "n_head": ("num_heads",),
        "n_heads": ("num_heads",),
        "relative_attention_num_buckets": ("num_buckets",),
        "relative_attention_max_distance": ("max_distance",),
        "alibi_bias_max": ("max_bias",),
        **{
            key: ()
            for key in (
                "model_type",
                "architectures",
                "num_key_value_heads",
                "num_hidden_layers",
                "layer_types",
                "sliding_window",
                "rope_local_base_freq",
                "qk_rope_head_dim",
                "qk_nope_head_dim",
                "text_config",
                "vision_config",
                "attn_config",
                "alibi",
                "position_embedding_type",
                "torch_dtype",
            )
        },
    }
)

#: What the targets of :data:`CONFIG_KEYS` mean, where the body field is not simply that key.
_HOW: Mapping[str, str] = MappingProxyType(
    {
        "rotary_dim": "rotary_dim (the number of rotated channels: the factor times head_dim)",
        "scaling": 'scaling (an object with "type", as transformers\' rope_parameters has '
        '"rope_type")',
    }
)


def config_key_hint(key: str, fields: Collection[str]) -> str | None:
    """What to send instead of the config key ``key`` in a body whose fields are ``fields``, or
    None when ``key`` is no config key this module knows.

    >>> config_key_hint("rope_theta", ["seq_len", "head_dim", "base", "config"])
    "'rope_theta' is a config.json key: its body field is base"
    """
    targets = CONFIG_KEYS.get(key)
    if targets is None:
        return None
    for target in targets:
        field, _, inner = target.partition(".")
        if field in fields:
            where = f"{field}.{inner} (inside the scaling object)" if inner else field
            return f"{key!r} is a config.json key: its body field is {_HOW.get(target, where)}"
    if "config" in fields:
        return (
            f"{key!r} is a config.json key: send it inside config (the whole config.json, as "
            '{"config": {...}})'
        )
    return None


__all__ = ["CONFIG_KEYS", "config_key_hint"]

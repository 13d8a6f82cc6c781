"""A config's attention geometry: heads, head width, layers, multi-head latent attention, and
the softmax scale, as transformers 5's models read them (with each model type's record in
:mod:`posenc.facts.families`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from posenc.core.errors import InvalidArgument
from posenc.facts.config_parts import ConfigReader
from posenc.facts.families import family, types_where
from posenc.readers.hf.results import RopeLayerType

#: The types whose softmax scale is 1 (and every type whose name starts with one of them).
_UNIT_SCALE_TYPES = types_where(lambda f: f.softmax_rule == "unit")


def num_heads(r: ConfigReader) -> int | None:
    # Moonshine gives its decoder's (the language model's) heads under their own name
    for key in (
        "num_attention_heads",
        "n_head",
        "n_heads",
        "num_heads",
        "decoder_num_attention_heads",
    ):
        if r.has(key):
            return r.int(key)
    return None


def hidden_size(r: ConfigReader) -> int | None:
    for key in ("hidden_size", "n_embd", "d_model", "dim"):
        if r.has(key):
            return r.int(key)
    return None


#: Bounds on what a config may ask for (a real model is far below both).
MAX_HEAD_DIM = 2**16
MAX_LAYERS = 2**16


def head_dim_key(r: ConfigReader) -> str | None:
    """The key its record names for the heads' width, where the config gives it."""
    own = r.config.get("model_type")
    key = family(own if isinstance(own, str) else None).head_dim_key
    return key if key is not None and r.has(key) else None


def read_head_dim(r: ConfigReader) -> int | None:
    """``Dh``: ``head_dim``, the record's key (JetMoE's ``kv_channels``), else ``hidden_size //
    num_attention_heads``; None where the config gives neither."""
    own_key = head_dim_key(r)
    if r.has("head_dim"):
        head_dim = r.int("head_dim")
        key = "head_dim"
    elif own_key is not None:
        head_dim = r.int(own_key)  # JetMoE's attention heads are kv_channels wide
        key = own_key
    else:
        hidden, heads = hidden_size(r), num_heads(r)
        if hidden is None or heads is None:
            return None
        head_dim = hidden // heads
        key = "num_attention_heads"
        if head_dim < 1:
            raise InvalidArgument(
                f"hidden_size {hidden} / num_attention_heads {heads} gives a head dimension of "
                f"{hidden / heads:g}; it must be at least 1",
                field=r.field(key),
            )
    if head_dim is not None and head_dim > MAX_HEAD_DIM:
        raise InvalidArgument(
            f"the head dimension {head_dim} is over posenc's limit of {MAX_HEAD_DIM}",
            field=r.field(key),
        )
    return head_dim


def head_dim_cause(r: ConfigReader, head_dim: int) -> tuple[str, str]:
    """Where the config's head dimension ``head_dim`` comes from: ``(what it says, its key)``,
    so that an odd one is blamed on the keys the config gives (``hidden_size 64 /
    num_attention_heads 3``), not on a ``partial_rotary_factor`` it never set."""
    for key in ("qk_rope_head_dim", "global_head_dim", "head_dim"):
        if r.has(key) and r.config.get(key) == head_dim:
            return f"{r.field(key)} is {head_dim}", r.field(key)
    hidden, heads = hidden_size(r), num_heads(r)
    hidden_key = next((k for k in ("hidden_size", "n_embd", "d_model", "dim") if r.has(k)), None)
    heads_key = next(
        (k for k in ("num_attention_heads", "n_head", "n_heads", "num_heads") if r.has(k)), None
    )
    if hidden is None or not heads or hidden_key is None or heads_key is None:
        return f"the head dimension is {head_dim}", r.field("head_dim")
    whole = (
        "" if hidden % heads == 0 else f" (not a whole number: {hidden / heads:.4g}, rounded down)"
    )
    return (
        f"{r.field(hidden_key)} {hidden} / {heads_key} {heads} gives a head dimension of "
        f"{head_dim}{whole}; give head_dim, or a {hidden_key} that {heads_key} divides into an "
        "even size",
        r.field(heads_key),
    )


def layer_count(r: ConfigReader) -> int | None:
    for key in ("num_hidden_layers", "n_layer", "n_layers", "num_layers"):
        if r.has(key):
            n = r.int(key, minimum=0)
            if n is not None and n > MAX_LAYERS:
                raise InvalidArgument(
                    f"{r.field(key)} {n} is over posenc's limit of {MAX_LAYERS} layers",
                    field=r.field(key),
                )
            return n
    return None


def is_mla(base: str, r: ConfigReader) -> bool:
    """Multi-head latent attention (DeepSeek V2/V3 and the models built like them): RoPE on
    ``qk_rope_head_dim`` channels, scores over ``qk_nope_head_dim + qk_rope_head_dim``."""
    return family(base).mla or (r.has("qk_rope_head_dim") and r.has("qk_nope_head_dim"))


def read_softmax_scale(
    base: str, r: ConfigReader, head_dim: int | None, rope: RopeLayerType | None
) -> float | None:
    c = r.config
    fam = family(base)
    if base.startswith(tuple(sorted(_UNIT_SCALE_TYPES))):
        return 1.0  # their q/k norms stand in for the scale
    if fam.softmax_rule == "query_pre_attn_scalar" or r.has("query_pre_attn_scalar"):
        scalar = r.float("query_pre_attn_scalar", 256.0) or 256.0  # the default: never None
        inv_sqrt: float = scalar**-0.5
        return inv_sqrt
    if fam.scheme == "relative":
        return 1.0  # T5 folds the scale into its initialisation
    if r.has("attention_multiplier"):
        return r.float("attention_multiplier")
    if is_mla(base, r):
        qk = (r.int("qk_nope_head_dim", 128) or 0) + (r.int("qk_rope_head_dim", 64) or 0)
        scale: float = qk**-0.5
        if rope is not None and rope.rope_type != "default":
            mad = rope.parameters.get("mscale_all_dim") or 0
            factor = rope.parameters.get("factor")
            if mad and factor is not None and factor > 1:
                m = 0.1 * mad * math.log(factor) + 1.0
                scale = scale * m * m
        return scale
    if fam.alibi_flag == "attn_config":
        attn = c.get("attn_config") or {}
        if isinstance(attn, Mapping) and attn.get("softmax_scale") is not None:
            return float(attn["softmax_scale"])
    if fam.softmax_rule == "scale_attn_weights" and c.get("scale_attn_weights") is False:
        return 1.0
    return None if head_dim is None else head_dim**-0.5


__all__ = [
    "MAX_HEAD_DIM",
    "MAX_LAYERS",
    "head_dim_cause",
    "head_dim_key",
    "hidden_size",
    "is_mla",
    "layer_count",
    "num_heads",
    "read_head_dim",
    "read_softmax_scale",
]

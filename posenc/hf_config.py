"""What a Hugging Face ``config.json`` means for positions, read as transformers 5 reads it.

:func:`read_positions` takes a model's published ``config.json`` (a mapping, as ``json.load``
gives it; for a multimodal file the whole file, whose ``text_config`` holds the language model;
ColPali's ``vlm_config``, Qwen2.5-Omni's ``thinker_config`` and an encoder-decoder's
``decoder_config`` / ``decoder`` are followed to it) and returns :class:`ModelPositions`: the positional encoding the model applies (RoPE, ALiBi, T5
relative buckets, a learned table, sinusoidal or none), with the numbers posenc's tables need.

The reading follows transformers 5 (``modeling_rope_utils.RotaryEmbeddingConfigMixin`` and the
models' ``configuration_*.py`` / ``modeling_*.py``), without importing it:

- RoPE parameters: ``rope_parameters``, or the legacy ``rope_scaling`` (which wins when both are
  given, as ``convert_rope_params_to_dict``), with ``type`` read as ``rope_type`` and a top-level
  ``rope_theta`` (else the model's ``default_theta``; GPT-NeoX's ``rotary_emb_base``). Parameters
  nested by layer type (Gemma 3's ``sliding_attention`` / ``full_attention``) give one entry per
  type; Gemma 3's legacy ``rope_local_base_freq`` is the sliding layers' theta and its
  ``rope_scaling`` applies to the full layers only. ``original_max_position_embeddings`` is set
  for ``llama3``, ``yarn`` and ``longrope`` from a top-level key (Phi-3) or else
  ``max_position_embeddings``; ``yarn`` and ``longrope`` without ``factor`` use
  ``max_position_embeddings / original_max_position_embeddings``; ``dynamic`` rescales above
  ``max_position_embeddings``. Qwen2-VL's ``"mrope"`` type is ``default`` with an
  ``mrope_section``.
- vLLM-only RoPE (``RopeLayerType.vllm`` keeps what vLLM's ``get_rope`` reads, for
  ``engine: "vllm"``): Hunyuan's ``dynamic`` (HunyuanOCR: ``xdrope``) with ``alpha`` is, as
  transformers' Hunyuan rotary modules read it (``ntk_alpha``), ``default`` with the fixed base
  ``rope_theta·alpha^(Dh/(Dh−2))`` (on other model types transformers ignores ``alpha``); the
  types ``ntk`` (``factor``, ``mixed_b``) and a non-Hunyuan ``xdrope`` have no transformers rule
  (tables need ``engine: "vllm"``); a top-level ``dual_chunk_attention_config`` (Qwen2.5-1M) is
  read by vLLM alone: transformers applies plain RoPE.
- Dimensions: ``head_dim``, else ``hidden_size // num_attention_heads`` (with the models'
  aliases ``n_embd``, ``d_model``, ``n_head``, ``n_heads``, ``num_heads``); DeepSeek rotates
  ``qk_rope_head_dim`` channels; the rotary dimension is ``int(head_dim ·
  partial_rotary_factor)`` (``rotary_pct`` for GPT-NeoX, default 0.25; Phi, GLM and THUDM's
  remote-code ChatGLM default 0.5), or GPT-J's ``rotary_dim``; Gemma 4's full-attention layers
  use ``global_head_dim``, EmbeddingGemma 2's those of ``per_layer_config``; JetMoE's heads are
  ``kv_channels`` wide; Moonshine's heads are ``decoder_num_attention_heads``. ChatGLM's theta
  is ``10000 · rope_ratio``. A ``text_config`` with its own geometry or RoPE keys does not take
  the top level's (MusicFlamingo's top-level ones are its audio rotary's).
- Layout: ``interleaved`` for the models that rotate adjacent pairs (:data:`INTERLEAVED_MODEL_TYPES`:
  GPT-J, GLM, ChatGLM, Llama 4, DeepSeek, Cohere, ERNIE 4.5, Helium and the others whose apply
  function interleaves, a table that ``tests/lib/test_config_parity.py`` derives again from each
  model's own rotation), else ``half``; ``rope_interleave`` where the model reads it.
- What the attention does with the table: ``rotation`` ``negative`` where it rotates by ``−θ``
  (nanochat, :data:`NEGATIVE_ROTATION_MODEL_TYPES`: the tables carry ``−sin``);
  ``rotated_channels`` ``trailing`` where it rotates the last ``R`` channels of each head
  (DeepSeek-V4, :data:`TRAILING_ROTARY_MODEL_TYPES`). An odd ``int(head_dim ·
  partial_rotary_factor)`` (GLM-4-MoE's 21) is read as transformers builds it: ``rotary_dim``
  one more (22, the width rotated) with ``exponent_dim`` the odd width (``base^(−2i/21)``).
- Kind: Granite MoE Hybrid and Zamba 2 apply RoPE only with ``position_embedding_type: "rope"``
  / ``use_mem_rope: true``; else ``none``.
- Layer types: ``layer_types`` when given, else the model's own rule (Gemma 2 alternating,
  Gemma 3 every 6th full, Cohere 2 every 4th, Qwen2 sliding above ``max_window_layers``, Llama 4
  ``no_rope_layers``); a layer that applies no RoPE (Llama 4's every 4th, Cohere 2's full
  attention) is ``"no_rope"``.
- Softmax scale: ``head_dim^-0.5``; Gemma 2/3 ``query_pre_attn_scalar^-0.5``; Gemma 4 1.0;
  DeepSeek ``(qk_nope_head_dim + qk_rope_head_dim)^-0.5 · mscale²`` with YaRN's
  ``0.1·mscale_all_dim·ln(factor) + 1``; Granite ``attention_multiplier``; T5 1.0; MPT
  ``attn_config.softmax_scale``.
- ALiBi (BLOOM, MPT's ``attn_config.alibi`` / ``alibi_bias_max``, Falcon's ``alibi``), T5's
  ``relative_attention_num_buckets`` / ``relative_attention_max_distance``, and the learned
  table size (``max_position_embeddings``, GPT-2's ``n_positions``; ELECTRA's and ALBERT's
  width ``embedding_size``; RoBERTa's family reaches the rows from ``pad_token_id + 1``).

Every value the file does not support is an :class:`~posenc.errors.InvalidArgument` whose
``field`` is ``config.<key>`` and whose message says what is accepted. Keys read in a legacy
spelling, and keys ignored, are listed in ``warnings``.
"""

from __future__ import annotations

import builtins
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any, Literal, TypeGuard

from posenc._validate import is_number
from posenc.errors import InvalidArgument
from posenc.hf.families import FAMILIES, base_type, family, types_where
from posenc.relative_sinusoidal import parakeet_encoder
from posenc.rope import ROPE_PARAMETER_KEYS, RopeScaling, rope_inv_freq

logger = logging.getLogger(__name__)

PositionKind = Literal["rope", "alibi", "relative", "learned", "sinusoidal", "none"]

#: Views of the records in :mod:`posenc.hf.families` (the one home of model-type facts), kept
#: under the names other code imports.
#: transformers 5's ``default_theta`` of each model type (10000.0 for any other).
DEFAULT_THETA: Mapping[str, float] = MappingProxyType(
    {t: f.default_theta for t, f in FAMILIES.items() if f.default_theta is not None}
)
#: Model types whose attention rotates adjacent channel pairs.
INTERLEAVED_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.layout == "interleaved")
#: The M-RoPE sections a model's text rotary module uses when ``rope_parameters`` gives none.
DEFAULT_MROPE_SECTION: Mapping[str, tuple[int, int, int]] = MappingProxyType(
    {t: f.mrope_section for t, f in FAMILIES.items() if f.mrope_section is not None}
)
#: ``partial_rotary_factor`` of each model type when the config gives none.
DEFAULT_PARTIAL_ROTARY: Mapping[str, float] = MappingProxyType(
    {t: f.partial_rotary for t, f in FAMILIES.items() if f.partial_rotary is not None}
)
#: Model types whose attention rotates by ``−θ`` (their tables carry ``−sin θ``).
NEGATIVE_ROTATION_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.rotation == "negative")
#: Model types whose attention rotates the trailing ``R`` channels of each head.
TRAILING_ROTARY_MODEL_TYPES: frozenset[str] = types_where(
    lambda f: f.rotated_channels == "trailing"
)
#: The types whose softmax scale is 1 (and every type whose name starts with one of them).
_UNIT_SCALE_TYPES = types_where(lambda f: f.softmax_rule == "unit")

_MROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})

#: RoPE types only vLLM builds (``NTKScalingRotaryEmbedding``, ``XDRotaryEmbedding``):
#: transformers 5.24's ``ROPE_INIT_FUNCTIONS`` has no rule for them.
VLLM_ONLY_ROPE_TYPES: frozenset[str] = frozenset({"ntk", "xdrope"})

#: What vLLM's ``get_rope`` reads of a vLLM-only rope dict besides ``rope_type`` / ``rope_theta``.
_VLLM_KEYS = ("alpha", "factor", "mixed_b", "xdrope_section")


@dataclass(frozen=True)
class RopeLayerType:
    """The RoPE of one layer type, as the model's rotary embedding computes it.

    Attributes:
        rope_type: ``default`` or a scaling type of :data:`posenc.rope.ROPE_INIT_FUNCTIONS`.
        rope_theta: the base.
        head_dim: ``Dh`` of the layers of this type.
        rotary_dim: ``R``: the width of the cos/sin tables (``Dh`` for ``proportional``).
        parameters: the scaling parameters in effect (transformers' names), without
            ``rope_type`` and ``rope_theta``; empty for ``default``.
        attention_scaling: the factor transformers multiplies cos and sin by.
        partial_rotary_factor: the fraction of the head that rotates, as read.
        vllm: what vLLM's ``get_rope`` reads where transformers reads the config otherwise or
            not at all (:func:`posenc.rope.vllm.vllm_only_rope`): the rope dict with vLLM's
            names (``rope_type``, ``rope_theta`` as written, ``alpha``, ``factor``,
            ``mixed_b``, ``xdrope_section``) and the config's ``dual_chunk_attention_config``
            (``chunk_size``, ``local_size``); None where vLLM reads it as transformers does.
        exponent_dim: the odd denominator of the exponents, ``base^(−2i/exponent_dim)``, where
            ``int(head_dim · partial_rotary_factor)`` is odd (then ``rotary_dim`` is one more:
            the table the model applies); None where it is ``rotary_dim``.
    """

    rope_type: str
    rope_theta: float
    head_dim: int
    rotary_dim: int
    parameters: Mapping[str, Any]
    attention_scaling: float
    partial_rotary_factor: float = 1.0
    vllm: Mapping[str, Any] | None = None
    exponent_dim: int | None = None

    def scaling(self) -> RopeScaling | None:
        """The :class:`~posenc.rope.RopeScaling` for :func:`posenc.rope.rope_cos_sin` (or None:
        ``default``, or a vLLM-only type, which transformers cannot compute)."""
        if self.rope_type == "default" or self.rope_type in VLLM_ONLY_ROPE_TYPES:
            return None
        return RopeScaling.from_dict({"type": self.rope_type, **self.parameters})

    def to_dict(self) -> dict[str, Any]:
        """Flat, as transformers' ``rope_parameters`` (plus dims and attention scaling)."""
        out: dict[str, Any] = {"rope_type": self.rope_type, "rope_theta": self.rope_theta}
        if self.partial_rotary_factor != 1.0:
            out["partial_rotary_factor"] = self.partial_rotary_factor
        out.update(_plain(dict(self.parameters)))
        out.update(
            head_dim=self.head_dim,
            rotary_dim=self.rotary_dim,
            attention_scaling=self.attention_scaling,
        )
        if self.vllm is not None:
            out["vllm"] = _plain(dict(self.vllm))
        if self.exponent_dim is not None:
            out["exponent_dim"] = self.exponent_dim
        return out


@dataclass(frozen=True)
class ModelPositions:
    """What a config means for positions (see the module docstring for how each is read).

    Attributes:
        model_type: the file's ``model_type`` (the top level of a multimodal file).
        kind: ``rope``, ``alibi``, ``relative``, ``learned``, ``sinusoidal`` or ``none``.
        head_dim: ``Dh`` of the attention (of the rotary part for DeepSeek); None where unknown.
        rotary_dim: ``R`` of the default layer type (RoPE only).
        layout: ``half`` or ``interleaved`` (RoPE only).
        max_position_embeddings: the config's value (``n_positions`` for GPT-2).
        layer_types: one entry per layer; ``no_rope`` where the layer applies no RoPE.
        rope: RoPE per distinct layer type.
        per_layer_type: whether the config gives RoPE parameters per layer type (then a table
            request must name one, ``layer_type``).
        softmax_scale: the factor the attention multiplies its scores by.
        attention_temperature: Llama 4's no-RoPE layers' ``{"floor_scale", "attn_scale"}``.
        sliding_window: the window, or None.
        mrope_section: Qwen-VL's ``[t, h, w]`` frequency sections, or None.
        mrope_interleaved: Qwen3-VL's interleaved sections (else contiguous).
        rotation: ``positive``, or ``negative`` where the model rotates by ``−θ`` (nanochat:
            :data:`NEGATIVE_ROTATION_MODEL_TYPES`; its tables carry ``−sin θ``). RoPE only.
        rotated_channels: ``leading`` (``x[..., :R]``), or ``trailing`` where the model rotates
            the last ``R`` channels of each head (DeepSeek-V4). RoPE only.
        alibi: ``{"num_heads", "max_bias"}`` for ALiBi models.
        relative: ``{"num_buckets", "max_distance", "bidirectional", "num_heads"}`` for T5;
            ``{"scheme": "relative_sinusoidal", "endpoint", "d_model", "base", "num_heads",
            "subsampling_factor"}`` for Parakeet.
        learned: ``{"seq_len", "d_model", "vocab_size", "table_size"}`` for learned tables
            (and ``first_position`` / ``usable_positions`` where positions start past the
            padding index, as RoBERTa's do).
        warnings: keys read in a legacy spelling, keys ignored.
    """

    model_type: str
    kind: PositionKind
    head_dim: int | None = None
    rotary_dim: int | None = None
    layout: str | None = None
    max_position_embeddings: int | None = None
    layer_types: tuple[str, ...] = ()
    rope: Mapping[str, RopeLayerType] = field(default_factory=dict)
    per_layer_type: bool = False
    softmax_scale: float | None = None
    attention_temperature: Mapping[str, float] | None = None
    sliding_window: int | None = None
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool = False
    rotation: str | None = None
    rotated_channels: str | None = None
    alibi: Mapping[str, Any] | None = None
    relative: Mapping[str, Any] | None = None
    learned: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = ()

    def rope_fields(self, layer_type: str | None = None) -> dict[str, Any]:
        """The ``/v1/encodings/rope`` fields this config gives (:func:`rope_request_fields`)."""
        return rope_request_fields(self, layer_type)

    def rope_for(self, layer_type: str | None) -> RopeLayerType:
        """The RoPE of ``layer_type``: required when the config has per-layer-type parameters,
        refused otherwise (``field="layer_type"``)."""
        if self.kind != "rope" or not self.rope:
            raise InvalidArgument(
                f"config of model_type {self.model_type!r} uses {self.kind} positions, not RoPE",
                field="config",
            )
        types = sorted(self.rope)
        if self.per_layer_type:
            if layer_type is None:
                raise InvalidArgument(
                    f"config of model_type {self.model_type!r} has RoPE parameters per layer "
                    f"type; give layer_type, one of {types}",
                    field="layer_type",
                )
            if layer_type not in self.rope:
                raise InvalidArgument(
                    f"layer_type {layer_type!r} is not a RoPE layer type of this config; "
                    f"one of {types}",
                    field="layer_type",
                )
            return self.rope[layer_type]
        if layer_type is not None:
            raise InvalidArgument(
                f"layer_type {layer_type!r} given, but the config of model_type "
                f"{self.model_type!r} has one set of RoPE parameters for every layer; omit "
                "layer_type",
                field="layer_type",
            )
        return next(iter(self.rope.values()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``POST /v1/configs/positions`` answers."""
        return {
            "model_type": self.model_type,
            "kind": self.kind,
            "head_dim": self.head_dim,
            "rotary_dim": self.rotary_dim,
            "layout": self.layout,
            "max_position_embeddings": self.max_position_embeddings,
            "layer_types": list(self.layer_types),
            "rope": {k: v.to_dict() for k, v in self.rope.items()},
            "per_layer_type": self.per_layer_type,
            "softmax_scale": self.softmax_scale,
            "attention_temperature": _plain(self.attention_temperature),
            "sliding_window": self.sliding_window,
            "mrope_section": list(self.mrope_section) if self.mrope_section else None,
            "mrope_interleaved": self.mrope_interleaved,
            "rotation": self.rotation,
            "rotated_channels": self.rotated_channels,
            "alibi": _plain(self.alibi),
            "relative": _plain(self.relative),
            "learned": _plain(self.learned),
            "warnings": list(self.warnings),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Reading helpers
# ---------------------------------------------------------------------------------------------


class _Reader:
    """A config mapping with typed getters that name the key in their errors."""

    def __init__(self, config: Mapping[str, Any], prefix: str) -> None:
        self.config = config
        self.prefix = prefix
        self.warnings: list[str] = []

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def field(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def int(
        self, key: str, default: builtins.int | None = None, *, minimum: builtins.int = 1
    ) -> builtins.int | None:
        value = self.config.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)  # int() of inf or NaN raises
            or value != int(value)
        ):
            raise InvalidArgument(
                f"{self.field(key)} must be an integer >= {minimum}, got {value!r}",
                field=self.field(key),
            )
        if value < minimum:
            raise InvalidArgument(
                f"{self.field(key)} must be an integer >= {minimum}, got {value!r}",
                field=self.field(key),
            )
        return int(value)

    def float(
        self, key: str, default: builtins.float | None = None, *, positive: builtins.bool = True
    ) -> builtins.float | None:
        value = self.config.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidArgument(
                f"{self.field(key)} must be a finite number, got {value!r}", field=self.field(key)
            )
        if positive and value <= 0:
            raise InvalidArgument(
                f"{self.field(key)} must be > 0, got {value!r}", field=self.field(key)
            )
        return float(value)

    def bool(self, key: str, default: builtins.bool) -> builtins.bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidArgument(
                f"{self.field(key)} must be true or false, got {value!r}", field=self.field(key)
            )
        return value


#: Where a file that is not itself a language model keeps one, in the order looked at:
#: ColPali's and ColQwen2's ``vlm_config``, Qwen2.5-Omni's ``thinker_config``, and the decoder
#: of an encoder-decoder (Dia's ``decoder_config``, T5Gemma's ``decoder``).
_LANGUAGE_PARTS = ("vlm_config", "thinker_config", "decoder_config", "decoder")


def _language_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mapping that holds the language model (with its own ``text_config`` if any) and its
    path: the file itself, unless it has no ``text_config`` and one of :data:`_LANGUAGE_PARTS`."""
    prefix = "config."
    while config.get("text_config") is None:
        for key in _LANGUAGE_PARTS:
            sub = config.get(key)
            if isinstance(sub, Mapping):
                config, prefix = sub, f"{prefix}{key}."
                break
        else:
            break
    return config, prefix


def _text_config(config: Mapping[str, Any], root: str = "config.") -> tuple[dict[str, Any], str]:
    """The language model's settings: a multimodal file's ``text_config`` over its top level."""
    text = config.get("text_config")
    if text is None:
        return dict(config), root
    if not isinstance(text, Mapping):
        raise InvalidArgument(
            f"{root}text_config must be an object (the language model's config), got "
            f"{type(text).__name__}",
            field=f"{root}text_config",
        )
    skip = {"text_config", "vision_config", "audio_config", "model_type"}
    # a text config with its own geometry or RoPE keeps the top level's for another part of
    # the model (MusicFlamingo's top-level head_dim and rope_parameters are its audio-timestamp
    # rotary's)
    if any(text.get(k) is not None for k in ("hidden_size", "num_attention_heads")):
        skip |= {"head_dim"}
    if any(text.get(k) is not None for k in ("rope_parameters", "rope_scaling")):
        skip |= {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"}
    merged = {k: v for k, v in config.items() if k not in skip}
    merged.update(text)
    return merged, f"{root}text_config."


def _num_heads(r: _Reader) -> int | None:
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


def _hidden(r: _Reader) -> int | None:
    for key in ("hidden_size", "n_embd", "d_model", "dim"):
        if r.has(key):
            return r.int(key)
    return None


#: Bounds on what a config may ask for (a real model is far below both).
MAX_HEAD_DIM = 2**16
MAX_LAYERS = 2**16


def _head_dim_key(r: _Reader) -> str | None:
    """The key its record names for the heads' width, where the config gives it."""
    own = r.config.get("model_type")
    key = family(own if isinstance(own, str) else None).head_dim_key
    return key if key is not None and r.has(key) else None


def _head_dim(r: _Reader) -> int | None:
    if r.has("head_dim"):
        head_dim = r.int("head_dim")
        key = "head_dim"
    elif (key := _head_dim_key(r)) is not None:
        head_dim = r.int(key)  # JetMoE's attention heads are kv_channels wide
    else:
        hidden, heads = _hidden(r), _num_heads(r)
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


def _head_dim_cause(r: _Reader, head_dim: int) -> tuple[str, str]:
    """Where the config's head dimension ``head_dim`` comes from: ``(what it says, its key)``,
    so that an odd one is blamed on the keys the config gives (``hidden_size 64 /
    num_attention_heads 3``), not on a ``partial_rotary_factor`` it never set."""
    for key in ("qk_rope_head_dim", "global_head_dim", "head_dim"):
        if r.has(key) and r.config.get(key) == head_dim:
            return f"{r.field(key)} is {head_dim}", r.field(key)
    hidden, heads = _hidden(r), _num_heads(r)
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


def _layer_count(r: _Reader) -> int | None:
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


def _kind(model_type: str, c: Mapping[str, Any]) -> PositionKind:
    base = base_type(model_type)
    fam = family(base)
    if fam.rope_switch is not None:  # RoPE only when the key asks for it, else none
        key, on = fam.rope_switch
        return "rope" if c.get(key) == on else "none"
    if fam.alibi_flag == "alibi":
        return "alibi" if c.get("alibi") else "rope"
    if fam.alibi_flag == "attn_config":
        attn = c.get("attn_config") or {}
        return "alibi" if isinstance(attn, Mapping) and attn.get("alibi", True) else "learned"
    if fam.scheme == "alibi":
        return "alibi"
    if fam.scheme in ("relative", "swin"):
        return "relative"
    if fam.scheme == "deberta":  # DebertaV2Config: relative_attention False by default
        if c.get("relative_attention") is True:
            return "relative"
        return "learned" if c.get("position_biased_input", True) else "none"
    if "relative_attention_num_buckets" in c:
        return "relative"
    if fam.scheme == "sinusoidal":
        return "sinusoidal"
    if fam.scheme == "learned":
        return "learned"
    rope_keys = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base", "rotary_pct")
    if family(model_type).scheme == "rope" or fam.scheme == "rope":
        return "rope"
    if any(c.get(k) is not None for k in rope_keys) or "rotary_dim" in c:
        return "rope"
    if "n_positions" in c or (
        "max_position_embeddings" in c and c.get("position_embedding_type") == "absolute"
    ):
        return "learned"
    raise InvalidArgument(
        f"config.model_type {model_type!r}: posenc cannot tell its positional encoding (no "
        "rope_parameters, rope_scaling, rope_theta, alibi, relative_attention_num_buckets or "
        "n_positions); known model types include llama, mistral, qwen2, gemma3, phi3, gpt_neox, "
        "gptj, deepseek_v3, bloom, mpt, falcon, t5, gpt2, bert",
        field="config.model_type",
    )


# ---------------------------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------------------------


def _layer_types(base: str, r: _Reader, n_layers: int | None) -> list[str] | None:
    c = r.config
    fam = family(base)
    given = c.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise InvalidArgument(
                f"config.layer_types must be a list of strings (one per layer), got {given!r:.80}",
                field=r.field("layer_types"),
            )
        types = list(given)
    elif n_layers is None:
        return None
    elif fam.layer_rule == "alternating":
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    elif fam.layer_rule == "every_nth" and fam.sliding_pattern is not None:
        default = fam.sliding_pattern
        pattern = r.int("sliding_window_pattern", default) or default
        types = [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)
        ]
    elif (
        fam.layer_rule == "qwen_sliding" and c.get("use_sliding_window") and c.get("sliding_window")
    ):
        mwl = r.int("max_window_layers", 28, minimum=0)
        types = [
            "sliding_attention" if i >= mwl else "full_attention"  # type: ignore[operator]
            for i in range(n_layers)
        ]
    elif fam.layer_rule == "llama4":
        interval = r.int("no_rope_layer_interval", 4) or 4
        no_rope = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n_layers)]
        if not isinstance(no_rope, list):
            raise InvalidArgument(
                "config.no_rope_layers must be a list of flags (1: RoPE, 0: none)",
                field=r.field("no_rope_layers"),
            )
        types = ["chunked_attention" if use else "no_rope" for use in no_rope]
        return types
    else:
        types = ["full_attention"] * n_layers
    if fam.nope_interval:
        # SmolLM3: NoPE every no_rope_layer_interval-th layer (no_rope_layers[i] == 0)
        interval = r.int("no_rope_layer_interval", 4) or 4
        flags = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(len(types))]
        if not isinstance(flags, list) or len(flags) < len(types):
            raise InvalidArgument(
                f"config.no_rope_layers must be a list of {len(types)} flags (1: RoPE, 0: none)",
                field=r.field("no_rope_layers"),
            )
        types = [t if flags[i] else "no_rope" for i, t in enumerate(types)]
    if fam.last_layer_full and types and types[-1] != "full_attention":
        types[-1] = "full_attention"
        r.warnings.append("layer_types: the last layer is full_attention (Gemma 4 forces it)")
    if fam.full_is_no_rope:
        types = ["no_rope" if t == "full_attention" else t for t in types]
    return types


def _per_layer_head_dim(r: _Reader, layer_types: list[str] | None, name: str) -> int | None:
    """The head_dim that ``per_layer_config`` (EmbeddingGemma 2: ``{"05": {"head_dim": 512}}``,
    keyed by layer index) gives every layer of type ``name``; None when it gives none."""
    per_layer = r.config.get("per_layer_config")
    if not isinstance(per_layer, Mapping) or not layer_types:
        return None
    by_index: dict[int, Any] = {}
    for key, value in per_layer.items():
        try:
            by_index[int(key)] = value
        except (TypeError, ValueError):
            continue
    dims = set()
    for i, t in enumerate(layer_types):
        if t != name:
            continue
        entry = by_index.get(i)
        dim = entry.get("head_dim") if isinstance(entry, Mapping) else None
        dims.add(dim)
    if len(dims) != 1 or None in dims:
        return None
    dim = dims.pop()
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_HEAD_DIM:
        raise InvalidArgument(
            f"per_layer_config head_dim must be an integer in [1, {MAX_HEAD_DIM}], got {dim!r}",
            field=r.field("per_layer_config"),
        )
    return dim


def _rope_dicts(
    base: str, model_type: str, r: _Reader, layer_types: list[str] | None
) -> tuple[dict[str, dict[str, Any]], bool]:
    """The raw rope parameter dicts by layer type (``{"default": ...}`` when not nested), with
    ``rope_theta`` and ``rope_type`` filled in; and whether they are nested."""
    c = r.config
    fam = family(base)
    own_theta = family(model_type).default_theta
    theta_default = own_theta if own_theta is not None else fam.default_theta
    default_theta = theta_default if theta_default is not None else 10000.0
    if fam.theta_ratio_key is not None:  # modeling_chatglm.py: base = 10000 * rope_ratio
        default_theta *= r.float(fam.theta_ratio_key, 1.0) or 1.0
    params = c.get("rope_parameters")
    scaling = c.get("rope_scaling")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, Mapping):
            raise InvalidArgument(
                f"{r.field(key)} must be an object or null, got {type(value).__name__}",
                field=r.field(key),
            )
    if scaling is not None:
        r.warnings.append(
            "rope_scaling: legacy spelling of rope_parameters (read as transformers 5 reads it)"
        )
        if params is not None:
            r.warnings.append("rope_parameters: ignored, rope_scaling wins (as in transformers)")
    top_theta = r.float("rope_theta")
    if top_theta is not None and (scaling is not None or params is None):
        r.warnings.append("rope_theta: legacy top-level key, read as rope_parameters.rope_theta")
    if top_theta is None and r.has("rotary_emb_base"):
        top_theta = r.float("rotary_emb_base")
        r.warnings.append("rotary_emb_base: legacy spelling of rope_theta")

    if fam.rope_nesting == "gemma3":
        # configuration_gemma3.convert_rope_params_to_dict
        nested = (
            {k: dict(v) if isinstance(v, Mapping) else None for k, v in params.items()}
            if params is not None
            else {}
        )
        nested = {k: v for k, v in nested.items() if k in ("full_attention", "sliding_attention")}
        full = nested.get("full_attention") or {"rope_type": "default"}
        if scaling is not None:
            full.update(scaling)
        full.setdefault("rope_theta", top_theta if top_theta is not None else 1_000_000.0)
        sliding = nested.get("sliding_attention") or {"rope_type": "default"}
        local = r.float("rope_local_base_freq")
        if local is not None:
            r.warnings.append(
                "rope_local_base_freq: legacy spelling of "
                "rope_parameters.sliding_attention.rope_theta"
            )
        sliding.setdefault("rope_theta", local if local is not None else 10_000.0)
        dicts = {"sliding_attention": sliding, "full_attention": full}
        nested_flag = True
    else:
        raw = dict(scaling if scaling is not None else (params or {}))
        labels = set(layer_types or ()) | {"full_attention", "sliding_attention"}
        nested_keys = [k for k in raw if k in labels and isinstance(raw[k], Mapping | None)]
        if not nested_keys and raw and all(isinstance(v, Mapping) for v in raw.values()):
            # every value a dict: rope kinds of their own (DeepSeek-V4's main / compress, which
            # its rotary module builds from rope_parameters' keys, not from layer_types)
            nested_keys = list(raw)
        if fam.rope_nesting == "gemma4" and params is None and scaling is None:
            raw = {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 1_000_000.0,
                },
            }
            nested_keys = list(raw)
        if nested_keys:
            dicts = {k: dict(raw[k]) for k in nested_keys if raw[k] is not None}
            nested_flag = True
        else:
            dicts = {"default": raw}
            nested_flag = False
        for d in dicts.values():
            d.setdefault("rope_theta", top_theta if top_theta is not None else default_theta)
    for name, d in dicts.items():
        where = r.field("rope_scaling" if scaling is not None else "rope_parameters")
        if nested_flag:
            where = f"{where}.{name}"
        if "type" in d:
            if "rope_type" in d and d["rope_type"] != d["type"]:
                r.warnings.append(
                    f"{where}.type {d['type']!r}: ignored, rope_type {d['rope_type']!r} wins"
                )
            else:
                r.warnings.append(f"{where}.type: legacy spelling of rope_type")
            d.setdefault("rope_type", d["type"])
            del d["type"]
        d.setdefault("rope_type", "default")
        if d["rope_type"] == "mrope":  # Qwen2-VL: plain RoPE over three position sections
            d["rope_type"] = "default"
        d["_where"] = where
    return dicts, nested_flag


def _rope_layer(
    d: dict[str, Any],
    *,
    r: _Reader,
    base: str,
    head_dim: int,
    max_pos: int | None,
    nested: bool,
) -> tuple[RopeLayerType, dict[str, Any]]:
    """One layer type's RoPE; returns it and the mrope keys found in its dict."""
    c = r.config
    fam = family(base)
    where = d.pop("_where")
    rope_type = d.pop("rope_type")
    if not isinstance(rope_type, str) or (
        rope_type != "default"
        and rope_type not in ROPE_PARAMETER_KEYS
        and rope_type not in VLLM_ONLY_ROPE_TYPES
    ):
        raise InvalidArgument(
            f"{where}.rope_type {rope_type!r} is not supported; accepted: default, "
            f"{', '.join(ROPE_PARAMETER_KEYS)} (and mrope, read as default; "
            f"{', '.join(sorted(VLLM_ONLY_ROPE_TYPES))} for engine vllm)",
            field=f"{where}.rope_type",
        )
    theta_value = d.pop("rope_theta")
    if (
        isinstance(theta_value, bool)
        or not isinstance(theta_value, int | float)
        or not (theta_value > 1 and math.isfinite(theta_value))
    ):
        raise InvalidArgument(
            f"{where}.rope_theta must be a finite number > 1, got {theta_value!r}",
            field=f"{where}.rope_theta",
        )
    theta = float(theta_value)
    vllm, rope_type, theta = _vllm_only(d, r, base, where, rope_type, theta, head_dim)

    # the rotated fraction
    prf = d.pop("partial_rotary_factor", None)
    if prf is None:
        prf = c.get("partial_rotary_factor")
    if prf is None and c.get("rotary_pct") is not None:
        prf = c.get("rotary_pct")
        r.warnings.append("rotary_pct: legacy spelling of partial_rotary_factor")
    prf_default = prf is None
    if prf is None:
        prf = fam.partial_rotary if fam.partial_rotary is not None else 1.0
    if isinstance(prf, bool) or not isinstance(prf, int | float) or not 0 < prf <= 1:
        raise InvalidArgument(
            f"{where}.partial_rotary_factor must be a number in (0, 1], got {prf!r}",
            field=f"{where}.partial_rotary_factor",
        )
    if fam.given_rotary_dim and c.get("rotary_dim") is not None:
        rotary_dim = r.int("rotary_dim")
    elif rope_type == "proportional":
        rotary_dim = head_dim
    else:
        rotary_dim = int(head_dim * prf)
    if head_dim > MAX_HEAD_DIM or (rotary_dim is not None and rotary_dim > head_dim):
        raise InvalidArgument(
            f"the rotary dimension {rotary_dim} must be <= the head dimension {head_dim}, and "
            f"that <= {MAX_HEAD_DIM}",
            field=f"{where}.partial_rotary_factor"
            if not fam.given_rotary_dim
            else r.field("rotary_dim"),
        )
    exponent_dim = rotary_dim
    if (
        rotary_dim is not None
        and rotary_dim % 2
        and 3 <= rotary_dim < head_dim
        and not fam.given_rotary_dim  # their rotary_dim is given, not a fraction
    ):
        # an odd rotated width from partial_rotary_factor (GLM-4-MoE: int(42 x 0.5) = 21):
        # transformers builds arange(0, 21, 2) / 21, 11 frequencies, and rotates a 22-wide
        # table; the exponents keep the odd width as their denominator
        r.warnings.append(
            f"{where}.partial_rotary_factor: int(head_dim {head_dim} x {prf}) = {rotary_dim} "
            f"is odd; the model rotates {rotary_dim + 1} channels with exponents over "
            f"{rotary_dim} (exponent_dim)"
        )
        rotary_dim += 1
    if rotary_dim is None or rotary_dim < 2 or rotary_dim % 2:
        field = f"{where}.partial_rotary_factor"
        if rotary_dim == head_dim or (head_dim % 2 and prf_default):
            # the head dimension itself is odd (or too small): blame where it comes from
            cause, field = _head_dim_cause(r, head_dim)
            raise InvalidArgument(
                f"{cause}; RoPE rotates pairs of channels, so the rotary dimension "
                f"({rotary_dim}) must be even and >= 2",
                field=field,
            )
        raise InvalidArgument(
            f"the rotary dimension int(head_dim {head_dim} x partial_rotary_factor {prf}) = "
            f"{rotary_dim} must be even and >= 2",
            field=field,
        )

    mrope = {k: d.pop(k) for k in list(d) if k in _MROPE_KEYS}
    layer = partial(
        RopeLayerType,
        rope_type=rope_type,
        rope_theta=theta,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        partial_rotary_factor=float(prf),
        vllm=vllm,
    )
    if rope_type in VLLM_ONLY_ROPE_TYPES:  # transformers has no rule: nothing more to check
        for key in d:
            if key not in _VLLM_KEYS and d[key] is not None:
                r.warnings.append(f"{where}.{key}: ignored by rope_type {rope_type!r} (vLLM)")
        kept = {k: d[k] for k in ("factor", "mixed_b", "alpha") if d.get(k) is not None}
        return layer(parameters=MappingProxyType(kept), attention_scaling=1.0), mrope
    required, optional = ((), ()) if rope_type == "default" else ROPE_PARAMETER_KEYS[rope_type]
    known = set(required) | set(optional) | {"original_max_position_embeddings"}
    params: dict[str, Any] = {}
    for key, value in d.items():
        if key in known and value is not None:
            params[key] = value
        elif value is not None:
            r.warnings.append(f"{where}.{key}: ignored by rope_type {rope_type!r}")
    if rope_type == "proportional":
        params["partial_rotary_factor"] = float(prf)
    if rope_type in ("llama3", "yarn", "longrope"):
        if not nested and c.get("original_max_position_embeddings") is not None:
            params["original_max_position_embeddings"] = r.int("original_max_position_embeddings")
        elif not nested and fam.original_max_default is not None:
            params["original_max_position_embeddings"] = fam.original_max_default  # Phi3Config
        elif "original_max_position_embeddings" not in params:
            if max_pos is None:
                raise InvalidArgument(
                    f"{where}.original_max_position_embeddings is required for {rope_type} "
                    "(or config.max_position_embeddings)",
                    field=f"{where}.original_max_position_embeddings",
                )
            params["original_max_position_embeddings"] = max_pos
    if rope_type in ("yarn", "longrope") and params.get("factor") is None and max_pos is not None:
        params["factor"] = max_pos / params["original_max_position_embeddings"]
    if rope_type == "dynamic":
        if max_pos is None:
            raise InvalidArgument(
                "dynamic RoPE needs config.max_position_embeddings (the length above which it "
                "rescales the base)",
                field=r.field("max_position_embeddings"),
            )
        if "original_max_position_embeddings" in params:
            r.warnings.append(
                f"{where}.original_max_position_embeddings: ignored by dynamic, which uses "
                "max_position_embeddings"
            )
        params["original_max_position_embeddings"] = max_pos
    if (
        rope_type not in ("llama3", "yarn", "longrope", "dynamic")
        and params.pop("original_max_position_embeddings", None) is not None
    ):
        r.warnings.append(
            f"{where}.original_max_position_embeddings: ignored by rope_type {rope_type!r}"
        )
    for key in required:
        if params.get(key) is None:
            raise InvalidArgument(
                f"{where}.{key} is required for rope_type {rope_type!r} (required: "
                f"{list(required)}, optional: {list(optional)})",
                field=f"{where}.{key}",
            )
    try:
        scaling = (
            RopeScaling.from_dict({"type": rope_type, **params})
            if params or (rope_type != "default")
            else None
        )
        _, attention_scaling = rope_inv_freq(rotary_dim, theta, scaling, exponent_dim=exponent_dim)
    except InvalidArgument as exc:
        sub = (exc.field or "").removeprefix("scaling.")
        raise InvalidArgument(
            f"{where}: {exc.message}", field=f"{where}.{sub}" if sub else where
        ) from None
    frozen = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return (
        layer(
            parameters=MappingProxyType(frozen),
            attention_scaling=float(attention_scaling),
            exponent_dim=exponent_dim if exponent_dim != rotary_dim else None,
        ),
        mrope,
    )


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _positive_number(value: Any) -> TypeGuard[int | float]:
    return is_number(value) and value > 0


def _vllm_only(
    d: dict[str, Any],
    r: _Reader,
    base: str,
    where: str,
    rope_type: str,
    theta: float,
    head_dim: int,
) -> tuple[MappingProxyType[str, Any] | None, str, float]:
    """What vLLM reads of this rope dict (and the config's ``dual_chunk_attention_config``)
    where transformers reads it otherwise, and transformers' reading: ``(vllm, rope_type,
    theta)``. Hunyuan's NTK-alpha becomes ``default`` with ``theta·alpha^(Dh/(Dh−2))``
    (``compute_ntk_alpha_rope_parameters``); the keys only vLLM reads leave ``d``."""
    c = r.config
    dca = c.get("dual_chunk_attention_config")
    alpha = d.get("alpha")
    vllm_reads_alpha = rope_type in ("dynamic", "xdrope") and alpha is not None
    if dca is None and not vllm_reads_alpha and rope_type not in VLLM_ONLY_ROPE_TYPES:
        return None, rope_type, theta
    vllm: dict[str, Any] = {"rope_type": rope_type, "rope_theta": theta}
    vllm.update({k: _plain(d[k]) for k in _VLLM_KEYS if d.get(k) is not None})
    if dca is not None:
        field = r.field("dual_chunk_attention_config")
        if not isinstance(dca, Mapping) or not all(
            _positive_int(dca.get(k)) for k in ("chunk_size", "local_size")
        ):
            raise InvalidArgument(
                f"{field} must be an object with integers chunk_size and local_size >= 1, got "
                f"{dca!r}",
                field=field,
            )
        if dca["local_size"] >= dca["chunk_size"]:
            raise InvalidArgument(
                f"{field}.local_size ({dca['local_size']}) must be below chunk_size "
                f"({dca['chunk_size']})",
                field=f"{field}.local_size",
            )
        vllm["dual_chunk_attention_config"] = {
            "chunk_size": dca["chunk_size"],
            "local_size": dca["local_size"],
        }
        r.warnings.append(
            f"{field}: read by vLLM only (DualChunkRotaryEmbedding, before any rope type: plain "
            "angles at remapped positions in five caches; engine vllm, dual_chunk_cache); "
            "transformers applies plain RoPE at every position"
        )
    if vllm_reads_alpha:
        if not _positive_number(alpha):
            raise InvalidArgument(
                f"{where}.alpha must be a number > 0, got {alpha!r}", field=f"{where}.alpha"
            )
        if rope_type == "xdrope":
            section = d.get("xdrope_section")
            if not isinstance(section, list) or not all(_positive_int(x) for x in section):
                raise InvalidArgument(
                    f"{where}.xdrope_section must be a list of ints >= 1 (one per position "
                    f"row), got {section!r}",
                    field=f"{where}.xdrope_section",
                )
        if family(base).ntk_alpha:
            # transformers' Hunyuan rotary modules: a fixed base (dim = config.head_dim)
            new_theta = theta * float(alpha) ** (head_dim / (head_dim - 2))
            r.warnings.append(
                f"{where}.alpha {alpha:g}: Hunyuan's NTK-alpha (transformers' ntk_alpha, vLLM's "
                f"DynamicNTKAlphaRotaryEmbedding): the fixed base rope_theta·alpha^(Dh/(Dh−2)) "
                f"= {new_theta:.10g}, read as rope_type default"
            )
            if rope_type == "xdrope":
                r.warnings.append(
                    f"{where}.xdrope_section {d['xdrope_section']}: one frequency block per "
                    "position row (P/W/H/T, vLLM's XDRotaryEmbedding; transformers' HunYuanVL "
                    "reads it as a four-row mrope_section); one row of positions (text) is the "
                    "same on every row"
                )
            for key in ("alpha", "xdrope_section"):
                d.pop(key, None)
            return MappingProxyType(vllm), "default", new_theta
        if rope_type == "dynamic":
            r.warnings.append(
                f"{where}.alpha: read by vLLM only (DynamicNTKAlphaRotaryEmbedding: the fixed "
                f"base rope_theta·alpha^(R/(R−2))); transformers' {base or 'generic'} rotary "
                "module applies dynamic NTK with factor"
            )
            d.pop("alpha")
    need = {"ntk": "factor", "xdrope": "alpha"}.get(rope_type)
    if need is not None:
        value = d.get(need)
        if not _positive_number(value):
            raise InvalidArgument(
                f"{where}.{need} is required for rope_type {rope_type!r} (vLLM's "
                f"get_rope reads it): a number > 0, got {value!r}",
                field=f"{where}.{need}",
            )
        mixed = d.get("mixed_b")
        if rope_type == "ntk" and mixed is not None and not _positive_number(mixed):
            raise InvalidArgument(
                f"{where}.mixed_b must be a number > 0, got {mixed!r}", field=f"{where}.mixed_b"
            )
    if rope_type in VLLM_ONLY_ROPE_TYPES:
        r.warnings.append(
            f"{where}.rope_type {rope_type!r}: vLLM only ("
            + ("NTKScalingRotaryEmbedding" if rope_type == "ntk" else "XDRotaryEmbedding")
            + "); transformers 5.24 has no rule for it, so its tables need engine vllm"
        )
    return MappingProxyType(vllm), rope_type, theta


def _is_mla(base: str, r: _Reader) -> bool:
    """Multi-head latent attention (DeepSeek V2/V3 and the models built like them): RoPE on
    ``qk_rope_head_dim`` channels, scores over ``qk_nope_head_dim + qk_rope_head_dim``."""
    return family(base).mla or (r.has("qk_rope_head_dim") and r.has("qk_nope_head_dim"))


def _softmax_scale(
    base: str, r: _Reader, head_dim: int | None, rope: RopeLayerType | None
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
    if _is_mla(base, r):
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


# ---------------------------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------------------------


def read_positions(config: Mapping[str, Any]) -> ModelPositions:
    """Read what ``config`` (a model's ``config.json``) means for positions.

    Args:
        config: the parsed ``config.json``: a mapping with at least ``model_type`` (or keys
            from which the encoding is clear, e.g. ``rope_theta``).

    Returns:
        :class:`ModelPositions`.

    Raises:
        InvalidArgument: ``field`` names the offending key (``config.<key>``, or
            ``config.text_config.<key>``) and the message says what is accepted.
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a model's config.json), got {type(config).__name__}",
            field="config",
        )
    top_type = config.get("model_type")
    if isinstance(top_type, str) and family(top_type).scheme == "relative_sinusoidal":
        return _parakeet(top_type, config)
    part, root = _language_part(config)
    c, prefix = _text_config(part, root)
    text = part.get("text_config")
    inner_type = text.get("model_type") if isinstance(text, Mapping) else None
    if inner_type is None and part is not config:
        inner_type = part.get("model_type")
    model_type = inner_type or top_type
    if model_type is not None and not isinstance(model_type, str):
        raise InvalidArgument(
            f"config.model_type must be a string, got {model_type!r}", field="config.model_type"
        )
    model_type = model_type or ""
    base = base_type(model_type)
    fam = family(base)
    if fam.text_model_type is not None:
        model_type = fam.text_model_type
    for key, value in (fam.head_defaults or {}).items():
        c.setdefault(key, value)
    r = _Reader(c, prefix)
    kind = _kind(model_type, c)
    shown_type = top_type if isinstance(top_type, str) else model_type
    if fam.scheme == "swin":  # num_heads is a list per stage
        return _swin(shown_type, base, r)
    heads = _num_heads(r)
    max_pos = r.int("max_position_embeddings") or r.int("n_positions")
    n_layers = _layer_count(r)
    if kind == "alibi":
        return _alibi(shown_type, base, r, heads, max_pos, n_layers)
    if kind == "relative" and fam.scheme == "deberta":
        return _deberta(shown_type, r, heads, max_pos, n_layers)
    if kind == "relative":
        return _relative(shown_type, r, heads, n_layers)
    if kind == "none":
        return ModelPositions(
            model_type=shown_type,
            kind="none",
            head_dim=_head_dim(r),
            max_position_embeddings=max_pos,
            layer_types=tuple(["full_attention"] * (n_layers or 0)),
            softmax_scale=_softmax_scale(base, r, _head_dim(r), None),
            warnings=tuple(r.warnings),
        )
    if kind in ("learned", "sinusoidal"):
        d_model = _hidden(r)
        learned = None
        if kind == "learned":
            learned = _learned(base, r, max_pos, d_model)
        return ModelPositions(
            model_type=shown_type,
            kind=kind,
            head_dim=_head_dim(r),
            max_position_embeddings=max_pos,
            layer_types=tuple(["full_attention"] * (n_layers or 0)),
            softmax_scale=_softmax_scale(base, r, _head_dim(r), None),
            learned=learned,
            warnings=tuple(r.warnings),
        )
    return _rope(shown_type, model_type, base, r, max_pos, n_layers)


def _rope(
    shown_type: str,
    model_type: str,
    base: str,
    r: _Reader,
    max_pos: int | None,
    n_layers: int | None,
) -> ModelPositions:
    c = r.config
    fam = family(base)
    if r.has("qk_rope_head_dim") and (fam.mla or (_is_mla(base, r) and not r.has("head_dim"))):
        head_dim = r.int("qk_rope_head_dim")
    else:
        head_dim = _head_dim(r)
    if head_dim is None:
        raise InvalidArgument(
            f"{r.field('head_dim')} is missing: give head_dim, or hidden_size and "
            "num_attention_heads",
            field=r.field("head_dim"),
        )
    layer_types = _layer_types(base, r, n_layers)
    dicts, nested = _rope_dicts(base, model_type, r, layer_types)
    rope: dict[str, RopeLayerType] = {}
    mrope: dict[str, Any] = {}
    for name, d in dicts.items():
        hd = head_dim
        if name == "full_attention" and (
            fam.global_head_dim is not None or r.has("global_head_dim")
        ):
            hd = r.int("global_head_dim", fam.global_head_dim) or head_dim
        hd = _per_layer_head_dim(r, layer_types, name) or hd
        layer, found = _rope_layer(d, r=r, base=base, head_dim=hd, max_pos=max_pos, nested=nested)
        rope[name] = layer
        mrope.update(found)
    if not nested:
        # one set for every layer: name it by the layer types that use it
        single = rope.pop("default")
        names = [t for t in dict.fromkeys(layer_types or ["full_attention"]) if t != "no_rope"]
        for t in names or ["full_attention"]:
            rope[t] = single
    layout = "interleaved" if "interleaved" in (fam.layout, family(model_type).layout) else "half"
    if fam.always_interleaved:
        if c.get("rope_interleave") is False:
            r.warnings.append(
                f"rope_interleave: ignored, {base} always rotates adjacent pairs "
                "(apply_rotary_pos_emb_interleave)"
            )
    elif c.get("rope_interleave") is False:
        layout = "half"
    elif c.get("rope_interleave") is True:
        layout = "interleaved"

    section = mrope.get("mrope_section")
    if section is None and fam.mrope_section is not None:
        section = list(fam.mrope_section)
        r.warnings.append(
            f"rope_parameters.mrope_section: not given; {base}'s rotary module uses {section}"
        )
    if section is not None and (
        not isinstance(section, list)
        or len(section) != 3
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in section)
    ):
        raise InvalidArgument(
            f"mrope_section must be three ints >= 0 (temporal, height, width), got {section!r}",
            field=r.field("rope_parameters.mrope_section"),
        )
    interleaved = mrope.get("mrope_interleaved")
    if interleaved is None:
        # the models whose rotary module interleaves the sections with no flag in the config
        interleaved = fam.mrope_interleaved
    first = next(iter(rope.values()))
    temperature = None
    if fam.temperature_tuning and _temperature_tuning(r):
        temperature = MappingProxyType(
            {
                "floor_scale": float(r.float("floor_scale", 8192.0)),  # type: ignore[arg-type]
                "attn_scale": float(r.float("attn_scale", 0.1)),  # type: ignore[arg-type]
            }
        )
    sliding = r.int("sliding_window", minimum=0) or None
    if fam.layer_rule == "qwen_sliding" and not c.get("use_sliding_window"):
        sliding = None
    attn_head_dim = head_dim if _is_mla(base, r) else _head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="rope",
        head_dim=head_dim,
        rotary_dim=first.rotary_dim,
        layout=layout,
        max_position_embeddings=max_pos,
        layer_types=tuple(layer_types or ()),
        rope=MappingProxyType(rope),
        per_layer_type=nested,
        softmax_scale=_softmax_scale(base, r, attn_head_dim, first),
        attention_temperature=temperature,
        sliding_window=sliding,
        mrope_section=tuple(section) if section is not None else None,
        mrope_interleaved=bool(interleaved) if section is not None else False,
        rotation="negative" if {base, model_type} & NEGATIVE_ROTATION_MODEL_TYPES else "positive",
        rotated_channels=(
            "trailing" if {base, model_type} & TRAILING_ROTARY_MODEL_TYPES else "leading"
        ),
        warnings=tuple(r.warnings),
    )


def _alibi(
    shown_type: str,
    base: str,
    r: _Reader,
    heads: int | None,
    max_pos: int | None,
    n_layers: int | None,
) -> ModelPositions:
    max_bias = 8.0
    if family(base).alibi_flag == "attn_config":
        attn = r.config.get("attn_config") or {}
        if not isinstance(attn, Mapping):
            raise InvalidArgument(
                f"config.attn_config must be an object, got {type(attn).__name__}",
                field=r.field("attn_config"),
            )
        sub = _Reader(attn, r.field("attn_config."))
        max_bias = sub.float("alibi_bias_max", 8.0) or 8.0
    if heads is None:
        raise InvalidArgument(
            f"{r.field('num_attention_heads')} is missing: an ALiBi config must give the number "
            "of heads (n_head, n_heads or num_attention_heads)",
            field=r.field("num_attention_heads"),
        )
    head_dim = _head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="alibi",
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=_softmax_scale(base, r, head_dim, None),
        alibi=MappingProxyType({"num_heads": heads, "max_bias": float(max_bias)}),
        warnings=tuple(r.warnings),
    )


def _learned(base: str, r: _Reader, max_pos: int | None, d_model: int | None) -> dict[str, Any]:
    """The learned table: ``seq_len`` and ``table_size`` are its rows, ``d_model`` its width
    (ELECTRA's and ALBERT's ``embedding_size``, as their ``position_embeddings``); RoBERTa's
    family counts positions from ``padding_idx + 1`` (``create_position_ids_from_input_ids``),
    so ``usable_positions`` of the rows are reachable."""
    fam = family(base)
    if fam.learned_width_key is not None and r.has(fam.learned_width_key):
        d_model = r.int(fam.learned_width_key)
    if fam.learned_rows_key is not None:  # Whisper: the decoder's (text) positions
        max_pos = r.int(fam.learned_rows_key, max_pos)
    offset = fam.learned_offset if fam.learned_offset and max_pos is not None else 0
    size = max_pos + offset if max_pos is not None else None
    out: dict[str, Any] = {
        "seq_len": size,
        "d_model": d_model,
        "vocab_size": r.int("vocab_size"),
        "table_size": size,
    }
    if offset:  # BART's LearnedPositionalEmbedding: position p is row p + 2
        out["first_position"] = offset
        out["usable_positions"] = max_pos
    if fam.padding_offset:
        pad = r.int("pad_token_id", 1, minimum=0)
        if max_pos is not None and pad is not None:
            out["first_position"] = pad + 1
            out["usable_positions"] = max(max_pos - pad - 1, 0)
    return out


def _relative(
    shown_type: str, r: _Reader, heads: int | None, n_layers: int | None
) -> ModelPositions:
    buckets = r.int("relative_attention_num_buckets", 32, minimum=2)
    distance = r.int("relative_attention_max_distance", 128)
    head_dim = r.int("d_kv") or _head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=1.0,
        relative=MappingProxyType(
            {
                "num_buckets": buckets,
                "max_distance": distance,
                "bidirectional": True,
                "num_heads": heads,
            }
        ),
        warnings=tuple(r.warnings),
    )


def _temperature_tuning(r: _Reader) -> bool:
    """Llama 4's ``attn_temperature_tuning`` (default on). The published Scout file has 4, an
    int; transformers 5 types the field bool, so any nonzero number turns it on."""
    value = r.config.get("attn_temperature_tuning")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value != 0
    return r.bool("attn_temperature_tuning", True)


def _deberta(
    shown_type: str, r: _Reader, heads: int | None, max_pos: int | None, n_layers: int | None
) -> ModelPositions:
    """DeBERTa-v2/v3 with ``relative_attention``, as ``DebertaV2Encoder`` and
    ``DisentangledSelfAttention`` read it: ``max_relative_positions`` < 1 (the published v3
    files' -1) falls back to ``max_position_embeddings``; ``position_buckets`` <= 0 (or absent)
    is plain ``i - j``. The softmax scale is ``(head_dim · (1 + |{c2p, p2c} ∩ pos_att_type|))
    ^-0.5``."""
    c = r.config
    max_relative = c.get("max_relative_positions", -1)
    if max_relative is None or (isinstance(max_relative, int | float) and max_relative < 1):
        max_position = max_pos
        if max_position is None:
            raise InvalidArgument(
                f"{r.field('max_relative_positions')} is {max_relative!r} (< 1), so DeBERTa "
                "uses max_position_embeddings, which the config lacks",
                field=r.field("max_position_embeddings"),
            )
    else:
        max_position = r.int("max_relative_positions")
    buckets = c.get("position_buckets", -1)
    if buckets is not None and not (isinstance(buckets, int) and buckets <= 0):
        buckets = r.int("position_buckets")
    if buckets is None or buckets <= 0:
        buckets = None
    head_dim = r.int("attention_head_size") or _head_dim(r)
    att_type = c.get("pos_att_type") or []
    if isinstance(att_type, str):
        att_type = [x.strip() for x in att_type.lower().split("|")]
    factor = 1 + sum(1 for t in ("c2p", "p2c") if t in att_type)
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=None if head_dim is None else (head_dim * factor) ** -0.5,
        relative=MappingProxyType(
            {"bucketing": "deberta", "position_buckets": buckets, "max_position": max_position}
        ),
        warnings=tuple(r.warnings),
    )


def _swin(shown_type: str, base: str, r: _Reader) -> ModelPositions:
    """Swin / Swin v2: every window attends with the ``relative_position_index`` of a
    ``window_size`` window (transformers' default 7). Swin v2's attention is cosine with a
    learned logit scale, so it has no fixed softmax scale."""
    window = r.int("window_size", 7)
    embed_dim = r.int("embed_dim", 96)
    stage_heads = r.config.get("num_heads", [3, 6, 12, 24])
    head_dim = None
    first = stage_heads[0] if isinstance(stage_heads, list) and stage_heads else None
    if isinstance(first, int) and not isinstance(first, bool) and first > 0 and embed_dim:
        head_dim = embed_dim // first
    scale = None if family(base).cosine_attention or head_dim is None else head_dim**-0.5
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        softmax_scale=scale,
        relative=MappingProxyType({"bucketing": "swin", "window_size": window}),
        warnings=tuple(r.warnings),
    )


def _parakeet(model_type: str, config: Mapping[str, Any]) -> ModelPositions:
    """NVIDIA Parakeet (FastConformer): Transformer-XL relative sinusoidal positions, read by
    :func:`posenc.relative_sinusoidal.parakeet_encoder` (a whole file's ``encoder_config``, or
    the encoder config alone); ``relative`` names the endpoint whose table it is."""
    enc = parakeet_encoder(config)
    return ModelPositions(
        model_type=model_type,
        kind="relative",
        head_dim=enc["head_dim"],
        max_position_embeddings=enc["max_position_embeddings"],
        layer_types=tuple(["full_attention"] * enc["num_layers"]),
        softmax_scale=enc["softmax_scale"],
        relative=MappingProxyType(
            {
                "scheme": "relative_sinusoidal",
                "endpoint": "/v1/encodings/relative-sinusoidal",
                **{k: enc[k] for k in ("d_model", "base", "num_heads", "subsampling_factor")},
            }
        ),
    )


def rope_request_fields(positions: ModelPositions, layer_type: str | None = None) -> dict[str, Any]:
    """The ``/v1/encodings/rope`` fields a config gives: ``head_dim``, ``rotary_dim``,
    ``base``, ``layout``, ``scaling`` (a dict with ``type``, or None), ``exponent_dim`` (the
    odd denominator of an odd rotated width, else None), ``rotation``, and the mrope fields."""
    layer = positions.rope_for(layer_type)
    scaling = None
    if layer.rope_type != "default" and layer.rope_type not in VLLM_ONLY_ROPE_TYPES:
        scaling = {"type": layer.rope_type, **_plain(dict(layer.parameters))}
    out: dict[str, Any] = {
        "head_dim": layer.head_dim,
        "rotary_dim": layer.rotary_dim,
        "base": layer.rope_theta,
        "layout": positions.layout,
        "scaling": scaling,
        "exponent_dim": layer.exponent_dim,
        "rotation": positions.rotation,
    }
    if positions.mrope_section is not None:
        out["mrope_section"] = list(positions.mrope_section)
        out["mrope_interleaved"] = positions.mrope_interleaved
    return out


__all__ = [
    "DEFAULT_THETA",
    "INTERLEAVED_MODEL_TYPES",
    "NEGATIVE_ROTATION_MODEL_TYPES",
    "TRAILING_ROTARY_MODEL_TYPES",
    "VLLM_ONLY_ROPE_TYPES",
    "ModelPositions",
    "PositionKind",
    "RopeLayerType",
    "read_positions",
    "rope_request_fields",
]

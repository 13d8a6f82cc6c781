"""What a config means for positions: :class:`ModelPositions` and its :class:`RopeLayerType`
per layer type, as :func:`posenc.readers.hf.positions.read_positions` returns them, and the
``/v1/encodings/rope`` fields they give (:func:`rope_request_fields`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from posenc.core.errors import InvalidArgument
from posenc.rope import RopeScaling
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES

PositionKind = Literal["rope", "alibi", "relative", "learned", "sinusoidal", "none"]


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
        out.update(plain(dict(self.parameters)))
        out.update(
            head_dim=self.head_dim,
            rotary_dim=self.rotary_dim,
            attention_scaling=self.attention_scaling,
        )
        if self.vllm is not None:
            out["vllm"] = plain(dict(self.vllm))
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
            "attention_temperature": plain(self.attention_temperature),
            "sliding_window": self.sliding_window,
            "mrope_section": list(self.mrope_section) if self.mrope_section else None,
            "mrope_interleaved": self.mrope_interleaved,
            "rotation": self.rotation,
            "rotated_channels": self.rotated_channels,
            "alibi": plain(self.alibi),
            "relative": plain(self.relative),
            "learned": plain(self.learned),
            "warnings": list(self.warnings),
        }


def plain(value: Any) -> Any:
    """``value`` with its mappings as dicts and its tuples as lists (JSON-ready)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def rope_request_fields(positions: ModelPositions, layer_type: str | None = None) -> dict[str, Any]:
    """The ``/v1/encodings/rope`` fields a config gives: ``head_dim``, ``rotary_dim``,
    ``base``, ``layout``, ``scaling`` (a dict with ``type``, or None), ``exponent_dim`` (the
    odd denominator of an odd rotated width, else None), ``rotation``, and the mrope fields."""
    layer = positions.rope_for(layer_type)
    scaling = None
    if layer.rope_type != "default" and layer.rope_type not in VLLM_ONLY_ROPE_TYPES:
        scaling = {"type": layer.rope_type, **plain(dict(layer.parameters))}
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


__all__ = ["ModelPositions", "PositionKind", "RopeLayerType", "plain", "rope_request_fields"]

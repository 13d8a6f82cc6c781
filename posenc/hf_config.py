"""What a Hugging Face ``config.json`` means for positions: the names other code imports, kept
here while the reader lives in :mod:`posenc.hf` (:mod:`posenc.hf.positions` reads a config,
:mod:`posenc.hf.results` holds what it returns, :mod:`posenc.hf.families` one record per model
type; the rules are listed in :mod:`posenc.hf.positions`' docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from posenc.hf.families import (
    FAMILIES,
    is_known_model_type,
    types_where,
    unknown_model_type_warning,
)
from posenc.hf.heads import MAX_HEAD_DIM, MAX_LAYERS
from posenc.hf.positions import read_positions
from posenc.hf.results import ModelPositions, PositionKind, RopeLayerType, rope_request_fields
from posenc.hf.rope import NEGATIVE_ROTATION_MODEL_TYPES, TRAILING_ROTARY_MODEL_TYPES
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES

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


__all__ = [
    "DEFAULT_MROPE_SECTION",
    "DEFAULT_PARTIAL_ROTARY",
    "DEFAULT_THETA",
    "INTERLEAVED_MODEL_TYPES",
    "MAX_HEAD_DIM",
    "MAX_LAYERS",
    "NEGATIVE_ROTATION_MODEL_TYPES",
    "TRAILING_ROTARY_MODEL_TYPES",
    "VLLM_ONLY_ROPE_TYPES",
    "ModelPositions",
    "PositionKind",
    "RopeLayerType",
    "is_known_model_type",
    "read_positions",
    "rope_request_fields",
    "unknown_model_type_warning",
]

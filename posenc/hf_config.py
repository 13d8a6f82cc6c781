"""What a Hugging Face ``config.json`` means for positions: the names other code imports, kept
here while the reader lives in :mod:`posenc.hf` (:mod:`posenc.hf.positions` reads a config,
:mod:`posenc.hf.results` holds what it returns, :mod:`posenc.hf.families` one record per model
type; the rules are listed in :mod:`posenc.hf.positions`' docstring)."""

from __future__ import annotations

from posenc.hf.families import (
    DEFAULT_MROPE_SECTION,
    DEFAULT_PARTIAL_ROTARY,
    DEFAULT_THETA,
    INTERLEAVED_MODEL_TYPES,
    is_known_model_type,
    unknown_model_type_warning,
)
from posenc.hf.heads import MAX_HEAD_DIM, MAX_LAYERS
from posenc.hf.positions import read_positions
from posenc.hf.results import ModelPositions, PositionKind, RopeLayerType, rope_request_fields
from posenc.hf.rope import NEGATIVE_ROTATION_MODEL_TYPES, TRAILING_ROTARY_MODEL_TYPES
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES

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

"""What a model file means for positions, as one engine reads it: :func:`describe`.

This is ``POST /v1/configs/positions``' answer, whole: the route only parses the body and
calls :func:`describe`. Which reading applies is chosen here, once:

- a diffusers ``transformer/config.json`` or ``model_index.json`` (a ``_class_name``, no
  ``model_type``): read by :mod:`posenc.diffusion` (``diffusers`` says which file and rule);
- a vision tower's config sent alone: the tower in ``vision``, no text positions;
- any other config: :func:`posenc.readers.hf.positions.read_positions` as ``engine`` applies it
  (:func:`posenc.explain.vllm_compare.positions_for_engine`: each layer type's entry from the engine's
  module, :mod:`posenc.engines`), with the vision tower, the position-dependent query scale and
  every layer's mixer and mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.attention.layers import layers_summary
from posenc.attention.query_scale import describe_query_scale
from posenc.context_parallel import context_parallel_schemes
from posenc.core.errors import InvalidArgument
from posenc.diffusion import describe as describe_diffusers
from posenc.diffusion.configs import is_diffusers_config
from posenc.engines import engine_named, engine_names
from posenc.explain.vllm_compare import positions_for_engine
from posenc.readers.hf.results import ModelPositions
from posenc.vision.learned.describe import is_vision_tower_alone, vision_positions


def describe(
    config: Mapping[str, Any],
    engine: str = "transformers",
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """What ``config`` means for positions as ``engine`` reads it (JSON-ready).

    Args:
        config: a model's ``config.json`` object as published (a multimodal file whole), a
            vision tower's config alone, or a diffusers transformer config / model index.
        engine: a text-RoPE engine of the registry (:func:`posenc.engines.engine_names`:
            ``transformers``, ``vllm``, ``llama.cpp``, ``mlx``).
        max_model_len: for ``vllm``: the server's ``--max-model-len`` (default the config's
            ``max_position_embeddings``).

    Returns:
        ``POST /v1/configs/positions``' answer: :meth:`ModelPositions.to_dict`'s keys with
        ``vision``, ``query_scale``, ``layers`` (or ``diffusers``), ``engine`` and ``meta``.

    Raises:
        InvalidArgument: an unknown engine, or a key of the config that cannot be read.
    """
    reader = engine_named(engine)  # refuses an unknown one, listing engine_names()
    if is_diffusers_config(config):
        return _diffusers(config, engine)
    if is_vision_tower_alone(config):
        return _vision_alone(config, engine, max_model_len)
    return {
        **positions_for_engine(config, reader.name, max_model_len),
        "vision": vision_positions(config),
        "query_scale": describe_query_scale(config),
        "layers": layers_summary(config),
        "context_parallel": context_parallel_schemes(),
    }


def _vision_alone(
    config: Mapping[str, Any], engine: str, max_model_len: int | None
) -> dict[str, Any]:
    """A vision tower's config sent alone: the tower in ``vision`` and no text positions (the
    whole model's file says those); kind ``vision_rope`` for a rotary tower, whose table
    ``vision.endpoint`` serves, else ``none`` (``vision.uses`` says what it has instead)."""
    vision = vision_positions(config)
    if vision is None:  # is_vision_tower_alone: a tower posenc knows
        raise InvalidArgument("the vision tower's config cannot be read", field="config")
    rotary = bool(vision["rotary"])
    meta: dict[str, Any] = {"engine": engine}
    if engine_named(engine).describes_layers:  # as positions_for_engine says it
        meta["max_model_len"] = max_model_len
    said = (
        f"its 2-D rotary is served by {vision['endpoint']}"
        if rotary
        else f"it has {vision['uses']}, no rotary table"
        + (f" (served by {vision['endpoint']})" if vision.get("learned") else "")
    )
    none = ModelPositions(  # no text positions: every other key empty, as read_positions' are
        model_type=vision["model_type"],
        kind="none",
        head_dim=vision["head_dim"] if rotary else None,
        layout=vision["layout"] if rotary else None,
        warnings=(
            f"a vision tower's config alone: {said}; the text positions are in the whole "
            "model's config",
        ),
    )
    return {
        **none.to_dict(),
        "kind": "vision_rope" if rotary else "none",
        "vision": vision,
        "query_scale": None,
        "engine": engine,
        "meta": meta,
    }


def _diffusers(config: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """A diffusers transformer/config.json or model_index.json: read by posenc.diffusion
    (``diffusers`` says which file and which rule); no text positions."""
    said = describe_diffusers(config)
    rotary = said["kind"] == "diffusion_rope"
    none = ModelPositions(
        model_type=said["class_name"],
        kind="none",
        layout="interleaved" if rotary else None,
        warnings=tuple(said.get("warnings", ())),
    )
    return {
        **none.to_dict(),
        "kind": said["kind"],
        "vision": None,
        "query_scale": None,
        "diffusers": said,
        "engine": engine,
        "meta": {"engine": engine, "reader": "diffusers"},
    }


__all__ = ["describe", "engine_names"]

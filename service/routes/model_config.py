"""Merging a preset or a model's ``config.json`` into a table request, then the documented
defaults.

Order of precedence, for every field: what the client sent > the config (or the preset) > the
documented default. Fields a preset or config can supply have no schema default (a generated
client would send the default explicitly and override the preset); their defaults are applied
here, after the merge (:data:`DEFAULTS`).

A preset of kind ``rope`` stores the fraction of the head that rotates, as configs do: a request
that overrides ``head_dim`` without ``rotary_dim`` gets ``int(head_dim · fraction)``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from posenc.errors import InvalidArgument, UnknownName
from posenc.hf_config import ModelPositions, read_positions, rope_request_fields
from service.query import Source, revalidate

M = TypeVar("M", bound=BaseModel)

#: The documented default of each field a preset or config may supply, by endpoint kind.
DEFAULTS: dict[str, dict[str, Any]] = {
    "rope": {"base": 10000.0, "layout": "half"},
    "alibi": {"max_bias": 8.0},
    "relative": {"num_buckets": 32, "max_distance": 128, "bidirectional": True},
    "learned": {},
}

#: Where a config of each kind of positions belongs.
ENDPOINTS: dict[str, str] = {
    "rope": "/v1/encodings/rope",
    "alibi": "/v1/biases/alibi",
    "relative": "/v1/biases/relative",
    "learned": "/v1/encodings/learned",
    "sinusoidal": "/v1/encodings/sinusoidal",
}


def _config_fields(kind: str, mp: ModelPositions, layer_type: str | None) -> dict[str, Any]:
    """The request fields of endpoint ``kind`` that the config gives."""
    if mp.kind != kind:
        where = ENDPOINTS.get(mp.kind)
        hint = f"; send it to {where}" if where else " (it has no positional encoding table)"
        raise InvalidArgument(
            f"config of model_type {mp.model_type!r} uses {mp.kind} positions, not {kind}{hint}",
            field="config",
        )
    if kind == "rope":
        return rope_request_fields(mp, layer_type)
    if kind == "alibi":
        return dict(mp.alibi or {})
    if kind == "relative":
        return {k: v for k, v in (mp.relative or {}).items() if v is not None}
    learned = mp.learned or {}
    return {k: learned[k] for k in ("seq_len", "d_model") if learned.get(k) is not None}


def merge_sources(req: M, kind: str, source: Source) -> tuple[M, dict[str, Any]]:
    """Apply ``req.config`` or ``req.preset`` (not both), then the documented defaults.

    Returns the merged request (validated again, ``config`` cleared) and what meta should say
    about the source: ``{"config_model_type": ...}`` or ``{}``.

    Raises:
        InvalidArgument: config together with preset; a config of another kind of positions
            (the message names the endpoint it belongs to); ``layer_type`` without a config
            that has per-layer-type RoPE; any key of the config posenc cannot read.
        UnknownName: an unknown preset, or one of another kind.
    """
    config = getattr(req, "config", None)
    preset = getattr(req, "preset", None)
    layer_type = getattr(req, "layer_type", None)
    if config is not None and preset is not None:
        raise InvalidArgument(
            f"give config or preset, not both (got preset {preset!r} and a config)",
            field="config",
        )
    info: dict[str, Any] = {}
    sent = req.model_dump(include=req.model_fields_set)
    if config is not None:
        mp = read_positions(config)
        defaults = _config_fields(kind, mp, layer_type)
        info = {"config_model_type": mp.model_type}
        if kind == "rope":
            layer = mp.rope_for(layer_type)
            info["rope_type"] = layer.rope_type
    else:
        if layer_type is not None:
            raise InvalidArgument(
                "layer_type picks one layer type's RoPE parameters of a config; give a config "
                "with per-layer-type rope parameters, or omit layer_type",
                field="layer_type",
            )
        if preset is None:
            return _with_defaults(req, kind), info
        defaults = dict(_preset_params(preset, kind))
    fields = type(req).model_fields
    defaults = {k: v for k, v in defaults.items() if k in fields}
    if (
        kind == "rope"
        and "head_dim" in sent
        and sent.get("rotary_dim") is None
        and defaults.get("head_dim")
        and defaults.get("rotary_dim")
        and sent["head_dim"] is not None
    ):
        # the preset's / config's fraction that rotates follows the new head_dim
        fraction = defaults["rotary_dim"] / defaults["head_dim"]
        defaults["rotary_dim"] = int(sent["head_dim"] * fraction)
    data = {**defaults, **sent}
    data.pop("config", None)
    merged = revalidate(type(req), data, source)
    return _with_defaults(merged, kind), info


def _preset_params(name: str, kind: str) -> dict[str, Any]:
    """The params of preset ``name``; UnknownName (422) for an unknown one or another kind."""
    from posenc.presets import PRESETS, get_preset

    preset = get_preset(name)
    if preset.kind != kind:
        same_kind = sorted(n for n, p in PRESETS.items() if p.kind == kind)
        raise UnknownName(
            f"preset {name!r} is a {preset.kind} preset; this endpoint takes {kind} presets: "
            f"{', '.join(same_kind)}",
            field="preset",
        )
    return dict(preset.params)


def _with_defaults(req: M, kind: str) -> M:
    update = {k: v for k, v in DEFAULTS[kind].items() if getattr(req, k, None) is None}
    return req.model_copy(update=update) if update else req


__all__ = ["DEFAULTS", "ENDPOINTS", "merge_sources"]

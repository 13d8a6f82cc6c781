"""A preset or a model's ``config.json`` merged into a kind's fields.

For every field, the order of precedence is: what the caller gave > the config (or the preset)
> the field's default (:class:`posenc.core.kinds.FieldSpec`). The fields a preset or config can give
are ``sourced``: they have no default in the request schema (a generated client would send the
default explicitly and override the preset), and :func:`posenc.resolve.resolve_fields` applies
their defaults after this merge.

A config is read as transformers 5 reads it (:func:`posenc.readers.hf.positions.read_positions`); a config
of another kind of positions is an error that names the endpoint it belongs to. A preset is one
of :data:`posenc.readers.presets.PRESETS`, of the kind's kind of positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posenc.core.errors import InvalidArgument, UnknownName
from posenc.core.kinds import REGISTRY
from posenc.facts.families import has_relative_attention_flag
from posenc.readers.hf.positions import read_positions
from posenc.readers.presets import PRESETS, get_preset

if TYPE_CHECKING:
    from posenc.core.kinds import Kind


def endpoint_of(positions: str) -> str | None:
    """Where a config of ``positions`` belongs: the registered kind that takes configs of it,
    else the kind of that name (sinusoidal tables take no config but have an endpoint)."""
    for kind in REGISTRY.values():
        if kind.sources is not None and kind.sources.positions == positions:
            return kind.path
    named = REGISTRY.get(positions)
    return named.path if named is not None else None


def merge_sources(kind: Kind, given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``given`` over the fields of its ``config`` or ``preset`` (not both).

    Args:
        kind: a kind with :attr:`~posenc.core.kinds.Kind.sources`.
        given: the caller's fields; a ``None`` overrides the preset's or config's value.

    Returns:
        ``(fields, info)``: the merged fields (``config`` left out: it has been read) and what
        ``meta`` should say of the source, e.g. ``{"config_model_type": "llama"}``.

    Raises:
        InvalidArgument: config together with preset; a config of another kind of positions;
            ``layer_type`` without a config that has per-layer-type RoPE; a config key posenc
            cannot read.
        UnknownName: an unknown preset, or one of another kind.
    """
    sources = kind.sources
    if sources is None:
        return dict(given), {}
    config, preset = given.get("config"), given.get("preset")
    if config is not None and preset is not None:
        raise InvalidArgument(
            f"give config or preset, not both (got preset {preset!r} and a config)",
            field="config",
        )
    sent = {k: v for k, v in given.items() if k != "config"}
    info: dict[str, Any] = {}
    if config is not None:
        if not isinstance(config, Mapping):
            raise InvalidArgument(f"config must be a JSON object, got {config!r}", field="config")
        positions = read_positions(config)
        # a relative scheme served by an endpoint of its own (Parakeet's relative sinusoidal)
        relative = positions.relative or {}
        elsewhere = relative.get("endpoint")
        if elsewhere is not None and elsewhere != kind.path:
            raise InvalidArgument(
                f"config of model_type {positions.model_type!r} uses "
                f"{relative.get('scheme')} positions (Transformer-XL style relative "
                f"attention, no buckets, bias or rotary table); send it to {elsewhere}",
                field="config",
            )
        if positions.kind != sources.positions:
            where = endpoint_of(positions.kind)
            hint = f"; send it to {where}" if where else " (it has no positional encoding table)"
            message = (
                f"config of model_type {positions.model_type!r} uses {positions.kind} positions, "
                f"not {sources.positions}{hint}"
            )
            if sources.positions == "relative" and has_relative_attention_flag(
                positions.model_type
            ):
                message = (  # DebertaV2Config's relative_attention is False by default
                    f"config of model_type {positions.model_type!r} has relative_attention "
                    f"false: the model uses no relative positions ({positions.kind} positions"
                    f"{hint})"
                )
            raise InvalidArgument(
                message,
                field="config",
            )
        if sources.from_config is not None:
            defaults, extra = sources.from_config(positions, sent)
        else:  # the fields are the reader's section of that name (alibi, relative, learned)
            defaults, extra = dict(getattr(positions, sources.positions) or {}), {}
        info = {"config_model_type": positions.model_type, **extra}
    else:
        if sent.get("layer_type") is not None:
            raise InvalidArgument(
                "layer_type picks one layer type's RoPE parameters of a config; give a config "
                "with per-layer-type rope parameters, or omit layer_type",
                field="layer_type",
            )
        if preset is None:
            return sent, info
        defaults = preset_params(str(preset), sources.positions)
    defaults = {k: v for k, v in defaults.items() if k in kind.field_names and v is not None}
    if sources.follow is not None:
        defaults = sources.follow(sent, defaults)
    return {**defaults, **sent}, info


def preset_params(name: str, positions: str) -> dict[str, Any]:
    """The params of preset ``name``, which must be of kind ``positions``.

    Raises:
        UnknownName: an unknown preset (with the closest name), or one of another kind (listing
            the presets of the right kind).
    """
    preset = get_preset(name)
    if preset.kind != positions:
        same_kind = sorted(n for n, p in PRESETS.items() if p.kind == positions)
        raise UnknownName(
            f"preset {name!r} is of kind {preset.kind}, not {positions}; the {positions} presets "
            f"are {', '.join(same_kind)}",
            field="preset",
        )
    params: dict[str, Any] = preset.to_dict()["params"]
    return params


__all__ = ["endpoint_of", "merge_sources", "preset_params"]

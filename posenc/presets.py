"""Positional-encoding settings of well-known model families, each from its published config.

A :class:`Preset` holds the request fields of one endpoint kind, so that a request can name a
preset and override any of its values:

- ``rope``: ``head_dim``, ``rotary_dim``, ``base``, ``layout``, ``scaling`` (``None`` or a mapping
  with ``type`` and transformers' ``rope_parameters`` names); see :mod:`posenc.rope`.
- ``alibi``: ``num_heads``, ``max_bias``; see :mod:`posenc.alibi`.
- ``relative``: ``num_buckets``, ``max_distance``, ``bidirectional``, ``num_heads``; see
  :mod:`posenc.relative`.
- ``learned``: ``d_model``, ``seq_len`` (the table size ``P``), ``vocab_size``; see
  :mod:`posenc.learned`.

Every preset IS a published config (:mod:`posenc.model_configs`) read by
:func:`posenc.hf_config.read_positions`, as transformers 5 reads it; ``source`` names the Hugging
Face Hub repository and quotes the keys. RoPE presets use the layout the transformers model
applies (``half`` for Llama: the Hub checkpoints are stored for ``rotate_half``, though Meta's
original code rotates interleaved pairs; ``interleaved`` for GPT-J, GLM, DeepSeek, Llama 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from posenc.errors import InvalidArgument, UnknownName

PresetKind = Literal["rope", "alibi", "relative", "learned"]

#: The request fields a preset of each kind may set.
PRESET_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "rope": frozenset({"head_dim", "rotary_dim", "base", "layout", "scaling"}),
        "alibi": frozenset({"num_heads", "max_bias"}),
        "relative": frozenset({"num_buckets", "max_distance", "bidirectional", "num_heads"}),
        "learned": frozenset({"d_model", "seq_len", "vocab_size"}),
    }
)


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Preset:
    """One model family's settings for one endpoint kind.

    Attributes:
        name: the preset's name, e.g. ``llama-3.1-8b``.
        kind: ``rope``, ``alibi``, ``relative`` or ``learned``: the endpoint it fills in.
        params: read-only mapping of that endpoint's request fields only (see the module
            docstring); nested mappings are read-only too. :meth:`to_dict` gives plain,
            JSON-ready copies.
        source: the published config the values come from (repository, file, keys).
    """

    name: str
    kind: PresetKind
    params: Mapping[str, Any]
    source: str

    def __post_init__(self) -> None:
        allowed = PRESET_FIELDS.get(self.kind)
        if allowed is None:
            raise InvalidArgument(f"preset {self.name!r}: unknown kind {self.kind!r}", field="kind")
        extra = sorted(set(self.params) - allowed)
        if extra:
            raise InvalidArgument(
                f"preset {self.name!r}: {extra} are not {self.kind} request fields "
                f"(allowed: {sorted(allowed)})",
                field="params",
            )
        object.__setattr__(self, "params", _frozen(self.params))

    def to_dict(self) -> dict[str, Any]:
        """``{"name", "kind", "params", "source"}`` with plain dicts and lists (a fresh copy),
        as ``GET /v1/presets`` lists it."""
        return {
            "name": self.name,
            "kind": self.kind,
            "params": _plain(self.params),
            "source": self.source,
        }


def _source(name: str, repo: str, config: Mapping[str, Any], extra: str = "") -> str:
    """``REPO config.json: {quoted keys}``, with what the file leaves out (``NOTES``)."""
    import json

    from posenc.model_configs import NOTES

    text = f"{repo} config.json: {json.dumps(dict(config), separators=(', ', ': '))}"
    note = NOTES.get(name)
    if note:
        text += f"; {note}"
    if extra:
        text += f"; {extra}"
    return text


def _from_config(name: str) -> list[Preset]:
    """The preset(s) of a quoted config, read by :func:`posenc.hf_config.read_positions`: one
    per RoPE layer type where the config has per-layer-type parameters (``NAME`` for
    ``full_attention``, ``NAME-local`` for ``sliding_attention``)."""
    from posenc.hf_config import read_positions, rope_request_fields
    from posenc.model_configs import MODEL_CONFIGS

    repo, config = MODEL_CONFIGS[name]
    mp = read_positions(config)
    if mp.kind == "rope":
        out = []
        types = sorted(mp.rope) if mp.per_layer_type else [None]
        for layer_type in types:
            fields = rope_request_fields(mp, layer_type)
            params = {k: fields[k] for k in ("head_dim", "rotary_dim", "base", "layout", "scaling")}
            preset_name = name if layer_type in (None, "full_attention") else f"{name}-local"
            extra = f"layer type {layer_type}" if layer_type else ""
            out.append(Preset(preset_name, "rope", params, _source(name, repo, config, extra)))
        return out
    if mp.kind == "alibi":
        params = dict(mp.alibi or {})
    elif mp.kind == "relative":
        params = dict(mp.relative or {})
    elif mp.kind == "learned":
        learned = mp.learned or {}
        params = {k: learned[k] for k in ("seq_len", "d_model", "vocab_size") if k in learned}
    else:  # pragma: no cover - every quoted config has one of the four kinds
        raise InvalidArgument(f"preset {name!r}: no table for {mp.kind} positions", field="kind")
    return [Preset(name, mp.kind, params, _source(name, repo, config))]


def _all_presets() -> tuple[Preset, ...]:
    from posenc.model_configs import MODEL_CONFIGS

    return tuple(p for name in MODEL_CONFIGS for p in _from_config(name))


_PRESET_LIST: tuple[Preset, ...] = _all_presets()

#: Every preset by name, in the order ``GET /v1/presets`` lists them.
PRESETS: dict[str, Preset] = {p.name: p for p in _PRESET_LIST}


def get_preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        UnknownName: no such preset; the message lists the known names (``field="preset"``).
    """
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise UnknownName(
            f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}",
            field="preset",
            name=name,
            known=PRESETS,
        ) from None


__all__ = ["PRESETS", "PRESET_FIELDS", "Preset", "PresetKind", "get_preset"]

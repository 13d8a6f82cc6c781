"""Positional-encoding settings of well-known model families, each from its published config.

A :class:`Preset` holds the request fields of one endpoint kind, so that a request can name a
preset and override any of its values:

- ``rope``: ``head_dim``, ``rotary_dim``, ``base``, ``layout``, ``scaling`` (``None`` or a mapping
  with ``type`` and transformers' ``rope_parameters`` names); see :mod:`posenc.rope`.
- ``alibi``: ``num_heads``, ``max_bias``; see :mod:`posenc.relative_schemes.alibi`.
- ``relative``: ``num_buckets``, ``max_distance``, ``bidirectional``, ``num_heads`` (T5);
  ``bucketing``, ``position_buckets``, ``max_position`` (DeBERTa); ``bucketing``,
  ``window_size`` (Swin); see :mod:`posenc.relative_schemes.relative`.
- ``learned``: ``d_model``, ``seq_len`` (the table size ``P``), ``vocab_size``; see
  :mod:`posenc.absolute.learned`.

Every preset IS a published config (:mod:`posenc.facts.model_configs`) read by
:func:`posenc.readers.hf.positions.read_positions`, as transformers 5 reads it; ``source`` names the Hugging
Face Hub repository and quotes the keys. RoPE presets use the layout the transformers model
applies (``half`` for Llama: the Hub checkpoints are stored for ``rotate_half``, though Meta's
original code rotates interleaved pairs; ``interleaved`` for GPT-J, GLM, DeepSeek, Llama 4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from posenc.core.errors import InvalidArgument, UnknownName
from posenc.facts.model_configs import MODEL_CONFIGS, NOTES
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import rope_request_fields

PresetKind = Literal["rope", "alibi", "relative", "learned"]

#: The request fields a preset of each kind may set.
PRESET_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "rope": frozenset({"head_dim", "rotary_dim", "base", "layout", "scaling"}),
        "alibi": frozenset({"num_heads", "max_bias"}),
        "relative": frozenset(
            {"num_buckets", "max_distance", "bidirectional", "num_heads"}  # T5
            | {"bucketing", "position_buckets", "max_position"}  # DeBERTa-v2/v3
            | {"window_size"}  # Swin (with bucketing)
        ),
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

    text = f"{repo} config.json: {json.dumps(dict(config), separators=(', ', ': '))}"
    note = NOTES.get(name)
    if note:
        text += f"; {note}"
    if extra:
        text += f"; {extra}"
    return text


def _from_config(name: str) -> list[Preset]:
    """The preset(s) of a quoted config, read by :func:`posenc.readers.hf.positions.read_positions`: one
    per RoPE layer type where the config has per-layer-type parameters (``NAME`` for
    ``full_attention``, ``NAME-local`` for ``sliding_attention``)."""
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
    return tuple(p for name in MODEL_CONFIGS for p in _from_config(name))


_PRESET_LIST: tuple[Preset, ...] = _all_presets()

#: Every preset by name, in the order ``GET /v1/presets`` lists them.
PRESETS: dict[str, Preset] = {p.name: p for p in _PRESET_LIST}


#: Other Hub repositories whose config.json gives the same tables as a preset's own
#: (instruct and chat tunings of the same base, renamed repositories): ``repo -> preset``.
#: Only models whose position keys are known to equal the preset's are listed: a name that is
#: not here gets no preset rather than a wrong one.
_SAME_TABLES: Mapping[str, str] = MappingProxyType(
    {
        "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
        "meta-llama/Llama-2-7b": "llama-2-7b",
        "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
        "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
        "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
        "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
        "meta-llama/Llama-3.2-3B-Instruct": "llama-3.2-3b",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout",
        "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
        "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b-v0.3",
        "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
        "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
        "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
        "google/gemma-2-9b-it": "gemma-2-9b",
        "google/gemma-3-1b-it": "gemma-3-1b",
        "google/gemma-3-4b-it": "gemma-3-4b",
        "deepseek-ai/DeepSeek-R1": "deepseek-v3",
        "tiiuae/falcon-7b-instruct": "falcon-7b",
    }
)


def _aliases() -> dict[str, str]:
    """Lower-case alias -> preset name: each preset's Hub repository id (``meta-llama/
    Llama-3.1-8B``) and the repository's own name (``Llama-3.1-8B``), and the same for the
    repositories of :data:`_SAME_TABLES`."""
    repos = {repo: name for name, (repo, _) in MODEL_CONFIGS.items()}
    repos.update(_SAME_TABLES)
    out: dict[str, str] = {}
    for repo, name in repos.items():
        for alias in (repo, repo.rsplit("/", 1)[-1]):
            if out.setdefault(alias.lower(), name) != name:  # pragma: no cover - a data error
                raise InvalidArgument(f"preset alias {alias!r} names two presets", field="preset")
    return out


#: Every other name a preset answers to (lower-case), by alias: see :func:`get_preset`.
PRESET_ALIASES: Mapping[str, str] = MappingProxyType(_aliases())


#: Longest name :func:`_typo_of` looks at (longer ones are no preset's typo): the "did you
#: mean" of a request runs in bounded time whatever name it sends.
MAX_TYPO_NAME = 256


def _numbers(name: str) -> list[str]:
    return re.findall(r"\d+", name)


def _edits(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
    two neighbours, each 1."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def _typo_of(name: str) -> str | None:
    """The preset ``name`` is a typo of, or None.

    Model names differ by a number (size, version) or by a word (``mini`` / ``moe``) between
    models whose tables differ, so a name counts as a typo only when it has the same numbers
    and is at most two edits from a preset's name or alias: ``lama-3.1-8b`` and
    ``llama-3.1-8`` are ``llama-3.1-8b``, while ``Phi-3.5-MoE-instruct`` is not
    ``phi-3.5-mini`` and ``Llama-3.1-70B`` is not ``llama-3.1-8b``.
    """
    best: tuple[int, str] | None = None
    if len(name) > MAX_TYPO_NAME:  # no preset name or alias is this long: not a typo
        return None
    for asked in {name.lower(), name.lower().rsplit("/", 1)[-1]}:
        for known, preset in [*((n, n) for n in PRESETS), *PRESET_ALIASES.items()]:
            # two edits change the length by at most two: only names of similar length are
            # compared, so the cost is bounded by the known names' lengths, not the input's
            if abs(len(asked) - len(known)) > 2 or _numbers(asked) != _numbers(known):
                continue
            distance = _edits(asked, known)
            if distance <= 2 and (best is None or distance < best[0]):
                best = (distance, preset)
    return best[1] if best else None


def get_preset(name: str) -> Preset:
    """The preset called ``name``, or of which ``name`` is an alias: a Hugging Face Hub
    repository id whose config gives the preset's tables, in any case
    (``meta-llama/Llama-3.1-8B``, ``Qwen/Qwen2.5-7B-Instruct``, ``Llama-3.1-8B``; see
    :data:`PRESET_ALIASES`).

    Raises:
        UnknownName: no such preset; the message lists the known names (``field="preset"``)
            and, where ``name`` is a typo of one (same numbers, at most two edits), suggests it.
    """
    if isinstance(name, str):
        preset = PRESETS.get(name) or PRESETS.get(PRESET_ALIASES.get(name.lower(), ""))
        if preset is not None:
            return preset
    typo = _typo_of(name) if isinstance(name, str) else None
    shown = (
        f"{name[:MAX_TYPO_NAME]!r}... ({len(name)} characters)"
        if isinstance(name, str) and len(name) > MAX_TYPO_NAME
        else repr(name)
    )
    raise UnknownName(
        f"unknown preset {shown}; known presets: {', '.join(PRESETS)} (or the Hugging Face "
        "repository id of one)",
        field="preset",
        name=name,
        known=[typo] if typo else [],
    )


__all__ = ["PRESETS", "PRESET_ALIASES", "PRESET_FIELDS", "Preset", "PresetKind", "get_preset"]

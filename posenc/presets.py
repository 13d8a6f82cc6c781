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

``source`` names the Hugging Face Hub repository and file the values come from. RoPE presets use
the ``half`` layout because the transformers checkpoints are stored for ``rotate_half`` (Meta's
original Llama code rotates interleaved pairs; the Hub conversion permutes the weights).
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


def _rope(
    name: str,
    *,
    head_dim: int,
    base: float,
    source: str,
    rotary_dim: int | None = None,
    layout: str = "half",
    scaling: Mapping[str, Any] | None = None,
) -> Preset:
    params = {
        "head_dim": head_dim,
        "rotary_dim": head_dim if rotary_dim is None else rotary_dim,
        "base": base,
        "layout": layout,
        "scaling": scaling,
    }
    return Preset(name, "rope", params, source)


_PRESET_LIST: tuple[Preset, ...] = (
    # --- RoPE -------------------------------------------------------------------------------
    _rope(
        "llama-2-7b",
        head_dim=4096 // 32,
        base=10000.0,
        source=(
            "meta-llama/Llama-2-7b-hf config.json: hidden_size=4096, num_attention_heads=32 "
            "(head_dim 128), rope_theta=10000.0, rope_scaling=null"
        ),
    ),
    _rope(
        "llama-3.1-8b",
        head_dim=4096 // 32,
        base=500000.0,
        scaling={
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        source=(
            "meta-llama/Llama-3.1-8B config.json: hidden_size=4096, num_attention_heads=32 "
            "(head_dim 128), rope_theta=500000.0, rope_scaling {rope_type: llama3, factor: 8.0, "
            "low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192}"
        ),
    ),
    _rope(
        "mistral-7b",
        head_dim=4096 // 32,
        base=10000.0,
        source=(
            "mistralai/Mistral-7B-v0.1 config.json: hidden_size=4096, num_attention_heads=32 "
            "(head_dim 128), rope_theta=10000.0 (v0.2 and later use 1000000.0)"
        ),
    ),
    _rope(
        "qwen2.5-7b",
        head_dim=3584 // 28,
        base=1000000.0,
        source=(
            "Qwen/Qwen2.5-7B config.json: hidden_size=3584, num_attention_heads=28 "
            "(head_dim 128), rope_theta=1000000.0, rope_scaling=null (the model card's optional "
            "YaRN factor 4 for long inputs is not in the config)"
        ),
    ),
    _rope(
        "gpt-neox-20b",
        head_dim=6144 // 64,
        rotary_dim=int(6144 // 64 * 0.25),
        base=10000.0,
        source=(
            "EleutherAI/gpt-neox-20b config.json: hidden_size=6144, num_attention_heads=64 "
            "(head_dim 96), rotary_pct=0.25 (rotary_dim 24), rotary_emb_base=10000; "
            "GPT-NeoX rotate_half layout"
        ),
    ),
    _rope(
        "gpt-j-6b",
        head_dim=4096 // 16,
        rotary_dim=64,
        base=10000.0,
        layout="interleaved",
        source=(
            "EleutherAI/gpt-j-6b config.json: n_embd=4096, n_head=16 (head_dim 256), "
            "rotary_dim=64; base 10000 as in modeling_gptj.create_sinusoidal_positions; "
            "rotate_every_two (interleaved) layout"
        ),
    ),
    # --- ALiBi ------------------------------------------------------------------------------
    Preset(
        "bloom-7b1",
        "alibi",
        {"num_heads": 32, "max_bias": 8.0},
        "bigscience/bloom-7b1 config.json: n_head=32 (hidden_size=4096); slopes as "
        "transformers' BLOOM build_alibi_tensor, 2^(-8(h+1)/n) (max_bias 8 fixed)",
    ),
    Preset(
        "mpt-7b",
        "alibi",
        {"num_heads": 32, "max_bias": 8.0},
        "mosaicml/mpt-7b config.json: n_heads=32 (d_model=4096), attn_config.alibi=true, "
        "attn_config.alibi_bias_max=8",
    ),
    # --- T5 relative ------------------------------------------------------------------------
    Preset(
        "t5-base",
        "relative",
        {"num_buckets": 32, "max_distance": 128, "bidirectional": True, "num_heads": 12},
        "google-t5/t5-base config.json: num_heads=12, relative_attention_num_buckets=32, "
        "relative_attention_max_distance=128 (T5Config default); bidirectional as in the "
        "encoder (decoder self-attention uses bidirectional=false)",
    ),
    # --- learned absolute -------------------------------------------------------------------
    Preset(
        "gpt2",
        "learned",
        {"d_model": 768, "seq_len": 1024, "vocab_size": 50257},
        "openai-community/gpt2 config.json: n_embd=768, n_positions=1024, vocab_size=50257 "
        "(wpe.weight is 1024 x 768)",
    ),
    Preset(
        "bert-base",
        "learned",
        {"d_model": 768, "seq_len": 512, "vocab_size": 30522},
        "google-bert/bert-base-uncased config.json: hidden_size=768, "
        "max_position_embeddings=512, vocab_size=30522",
    ),
)

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

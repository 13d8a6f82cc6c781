"""What each layer of a model mixes its tokens with, and so which attention mask it applies.

A model's ``config.json`` is read as transformers 5 reads it for its masks
(``masking_utils.create_masks_for_generate``): the text config's ``layer_types`` (legacy
``mamba`` and ``attention`` spelled ``linear_attention`` and ``full_attention``, as
``configuration_utils.remap_legacy_layer_types`` does; ``layers_block_type`` where a file has
that instead), else the model's own pattern (:func:`posenc.readers.hf.positions.read_positions`: Gemma 2
and 3, Cohere 2, Qwen2's ``max_window_layers``, Llama 4's chunked and NoPE layers, gpt-oss'
alternation), else every layer sliding when the config has ``sliding_window``, chunked when it has
``attention_chunk_size``, and causal otherwise. T5's family (``t5``, ``mt5``, ``umt5``…) lists
its encoder's layers, which attend both ways (its decoder's config has ``is_decoder: true``).
``is_causal: false`` makes the attention layers
bidirectional (transformers' "power feature" for decoders used as encoders), and so does Gemma
3's ``use_bidirectional_attention`` (EmbeddingGemma), whose sliding layers see ``W // 2`` keys
each way.

Each layer is labelled by what it is: attention with RoPE, attention without it (NoPE), sliding
or chunked with its size, linear attention, a Mamba (state-space) mixer, a short convolution, a
feed-forward block alone, or cross-attention; its mask kind is the one ``POST /v1/masks``
serves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from posenc.core.errors import InvalidArgument
from posenc.facts.families import family
from posenc.readers.hf.heads import MAX_LAYERS
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import ModelPositions

__all__ = [
    "MASK_ENDPOINT",
    "AttentionLayer",
    "attention_layers",
    "layer_rule",
    "layers_summary",
]

MASK_ENDPOINT = "/v1/masks"

# transformers' legacy layer-type names and what they are now
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}

# transformers' layer types served by the plain causal mask (LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING)
_CAUSAL_TYPES = {"full_attention", "indexed_attention", "minimax_m3_sparse", "no_rope"}
_SLIDING_TYPES = {
    "sliding_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
}


def _every(c: Mapping[str, Any], key: str, default: int, n: int, other: str) -> list[str]:
    """Every ``c[key]``-th layer full attention, the others ``other`` (Qwen3-Next)."""
    period = _int_key(c, key) or default
    return ["full_attention" if (i + 1) % period == 0 else other for i in range(n)]


def _jamba(c: Mapping[str, Any], n: int) -> list[str]:
    """Jamba: attention where ``i % attn_layer_period == attn_layer_offset``, else Mamba."""
    period = _int_key(c, "attn_layer_period") or 8
    offset = c.get("attn_layer_offset", 4)
    return ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]


#: the layer types a config class builds when its file lists none, by the record's
#: ``layer_pattern`` (:class:`posenc.facts.families.Family`)
_DEFAULT_PATTERNS: dict[str, Callable[[Mapping[str, Any], int], list[str]]] = {
    # gpt-oss alternates, sliding first
    "sliding_then_full": lambda c, n: [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)
    ],
    "full_every_interval": lambda c, n: _every(
        c, "full_attention_interval", 4, n, "linear_attention"
    ),
    # MiniMax alternates, full attention first
    "full_then_linear": lambda c, n: [
        "full_attention" if (i + 1) % 2 else "linear_attention" for i in range(n)
    ],
    "attention_period": _jamba,
}


@dataclass(frozen=True)
class AttentionLayer:
    """One layer: its token mixer and the mask it applies.

    Attributes:
        index: the layer's index.
        layer_type: transformers' name (``full_attention``, ``sliding_attention``,
            ``chunked_attention``, ``linear_attention``, ``hybrid``, ``conv``, ``mlp``…), or
            ``cross_attention``; a NoPE layer is ``full_attention`` with ``positions`` none.
        mixer: ``attention``, ``linear_attention``, ``mamba``, ``attention+mamba`` (Falcon-H1's
            parallel heads), ``convolution``, ``mlp``, ``cross_attention``, or ``unknown`` (a
            layer type posenc does not know).
        mask: the kind of ``POST /v1/masks`` (``causal``, ``sliding``, ``chunked``,
            ``bidirectional``, ``sliding_bidirectional``), or None for a layer without one.
        window: ``W`` of a sliding mask.
        chunk_size: ``C`` of a chunked mask.
        positions: ``rope``, ``none`` (NoPE), or the model's kind (``alibi``, ``relative``,
            ``learned``…) for attention layers; None where there is no attention or posenc
            cannot tell.
        what: one phrase that says what the layer is.
    """

    index: int
    layer_type: str
    mixer: str
    mask: str | None
    window: int | None
    chunk_size: int | None
    positions: str | None
    what: str

    @property
    def rule(self) -> tuple[str, int | None, int | None] | None:
        """``(mask, window, chunk_size)``, or None without an attention mask."""
        if self.mask is None:
            return None
        return (self.mask, self.window, self.chunk_size)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``/v1/configs/positions`` lists it under ``layers``."""
        return {
            "index": self.index,
            "layer_type": self.layer_type,
            "mixer": self.mixer,
            "mask": self.mask,
            "window": self.window,
            "chunk_size": self.chunk_size,
            "positions": self.positions,
            "what": self.what,
            "endpoint": MASK_ENDPOINT if self.mask is not None else None,
        }


def _text_part(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's keys: a multimodal file's ``text_config`` over its top level."""
    text = config.get("text_config")
    if text is None:
        return dict(config)
    if not isinstance(text, Mapping):
        raise InvalidArgument(
            "config.text_config must be an object (the language model's config)",
            field="config.text_config",
        )
    return {**{k: v for k, v in config.items() if k != "text_config"}, **text}


def _int_key(c: Mapping[str, Any], key: str) -> int | None:
    value = c.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(
            f"config.{key} must be an integer >= 1, got {value!r}", field=f"config.{key}"
        )
    return value


def _given_types(c: Mapping[str, Any]) -> list[str] | None:
    for key in ("layer_types", "layers_block_type"):
        given = c.get(key)
        if given is None:
            continue
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise InvalidArgument(
                f"config.{key} must be a list of strings (one per layer), got {given!r:.80}",
                field=f"config.{key}",
            )
        return [_LEGACY.get(t) or t for t in given]
    return None


def _positions(config: Mapping[str, Any]) -> ModelPositions | None:
    """posenc's reading of the config's positions, or None where it cannot tell.

    A mask does not depend on the heads' size, so a config without one is read with a stand-in
    ``head_dim`` (the reader needs it for the tables, not for the layer pattern).
    """
    try:
        return read_positions(config)
    except InvalidArgument:
        pass
    patched = dict(config)
    if isinstance(config.get("text_config"), Mapping):
        patched["text_config"] = {"head_dim": 64, **config["text_config"]}
    else:
        patched.setdefault("head_dim", 64)
    try:
        return read_positions(patched)
    except InvalidArgument:
        return None


def _layer_types(
    c: Mapping[str, Any], model_type: str, mp: ModelPositions | None
) -> tuple[list[str], int | None]:
    """Each layer's transformers type (``no_rope`` kept for NoPE layers), and the window."""
    n = _int_key(c, "num_hidden_layers") or _int_key(c, "num_layers") or _int_key(c, "n_layer")
    if n is not None and n > MAX_LAYERS:
        raise InvalidArgument(
            f"config.num_hidden_layers {n} is over posenc's limit of {MAX_LAYERS} layers",
            field="config.num_hidden_layers",
        )
    window = mp.sliding_window if mp is not None else _int_key(c, "sliding_window")
    if mp is None and c.get("use_sliding_window") is False:
        window = None  # Qwen2's family reads sliding_window only with use_sliding_window
    given = _given_types(c)
    if given is not None:
        return given, window if window is not None else _int_key(c, "sliding_window")
    if family(model_type).attention_free:
        return ["linear_attention"] * (n or 0), None
    pattern = list(mp.layer_types) if mp is not None else []
    if any(t not in ("full_attention", "no_rope") for t in pattern) or "no_rope" in pattern:
        return pattern, window
    if pattern and family(model_type).layer_rule == "qwen_sliding":
        # Qwen2's config class: sliding only where i >= max_window_layers, so none when
        # max_window_layers >= num_hidden_layers, whatever sliding_window says
        return pattern, window
    n = n if n is not None else len(pattern)
    rule = family(model_type).layer_pattern
    if rule is not None:  # what these config classes build without layer_types
        return _DEFAULT_PATTERNS[rule](c, n), window
    if window is not None:
        return ["sliding_attention"] * n, window
    if _int_key(c, "attention_chunk_size") is not None:
        return ["chunked_attention"] * n, None
    return ["full_attention"] * n, None


def _model_type(config: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    text = config.get("text_config")
    inner = text.get("model_type") if isinstance(text, Mapping) else None
    value = inner or c.get("model_type") or ""
    return str(value).removesuffix("_text") if isinstance(value, str) else ""


def _recurrent_layer(index: int, layer_type: str, model_type: str) -> AttentionLayer:
    """A layer without attention: Mamba, linear attention, a convolution or an MLP alone."""
    if layer_type == "conv":
        return AttentionLayer(
            index, layer_type, "convolution", None, None, None, None,
            "short gated convolution (no attention, no positions)",
        )  # fmt: skip
    if layer_type in ("mlp", "moe"):
        return AttentionLayer(
            index, layer_type, "mlp", None, None, None, None,
            "feed-forward block alone (no token mixing)",
        )  # fmt: skip
    fam = family(model_type)
    if fam.mixer == "state_space":
        return AttentionLayer(
            index, layer_type, "mamba", None, None, None, None,
            f"{fam.mixer_name} state-space mixer (no attention, no positions)",
        )  # fmt: skip
    name = fam.mixer_name or "linear attention or state-space (recurrent) mixer"
    return AttentionLayer(
        index, layer_type, "linear_attention", None, None, None, None,
        f"{name} (no softmax attention mask, no positions)",
    )  # fmt: skip


def _attention_layer(
    index: int,
    layer_type: str,
    *,
    window: int | None,
    chunk: int | None,
    causal: bool,
    positions: str | None,
    model_type: str,
) -> AttentionLayer:
    mixer = "attention+mamba" if layer_type == "hybrid" else "attention"
    if layer_type in _SLIDING_TYPES:
        if window is None:
            raise InvalidArgument(
                f"layer {index} is {layer_type} but the config gives no sliding_window",
                field="config.sliding_window",
            )
        mask, size = ("sliding" if causal else "sliding_bidirectional"), f" (window {window})"
    elif layer_type == "chunked_attention":
        if chunk is None:
            raise InvalidArgument(
                f"layer {index} is chunked_attention but the config gives no attention_chunk_size",
                field="config.attention_chunk_size",
            )
        mask, size, window = "chunked", f" (chunk {chunk})", None
    elif layer_type in _CAUSAL_TYPES or layer_type == "hybrid":
        mask, size, window, chunk = ("causal" if causal else "bidirectional"), "", None, None
    else:
        return AttentionLayer(
            index, layer_type, "unknown", None, None, None, None,
            f"layer of type {layer_type!r}, which posenc does not know",
        )  # fmt: skip
    if mask != "chunked":
        chunk = None
    if layer_type == "no_rope":  # posenc's mark of a NoPE layer; transformers' full_attention
        layer_type = "full_attention"
        positions = "none" if positions == "rope" else positions
    pos = {"rope": "with RoPE", "none": "without positions (NoPE)"}.get(
        positions or "", f"with {positions} positions" if positions else ""
    )
    name = {"causal": "causal", "bidirectional": "bidirectional"}.get(mask, mask)
    what = f"{name} attention{size} {pos}".strip().replace("  ", " ")
    if layer_type == "hybrid":
        what += ", beside a Mamba-2 mixer in the same layer"
    return AttentionLayer(index, layer_type, mixer, mask, window, chunk, positions, what)


def attention_layers(config: Mapping[str, Any]) -> tuple[AttentionLayer, ...]:
    """Every layer of a model's ``config.json``, labelled (see the module docstring).

    Raises:
        InvalidArgument: a config that is not an object, ``layer_types`` that is not a list of
            strings, an unknown layer type, or a sliding (chunked) layer without its size.
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a model's config.json), got {type(config).__name__}",
            field="config",
        )
    c = _text_part(config)
    model_type = _model_type(config, c)
    mp = _positions(config)
    types, window = _layer_types(c, model_type, mp)
    chunk = _int_key(c, "attention_chunk_size")
    causal = c.get("is_causal", True) is not False
    if family(model_type).position_bias_form in ("t5_table", "t5_decoder_only"):
        # T5's family: num_layers are its encoder's (bidirectional); a decoder's own config
        # (is_decoder, as T5Stack's copy) attends causally
        causal = c.get("is_decoder") is True
    bidirectional = c.get("use_bidirectional_attention") is True
    if family(model_type).bidirectional_halves_window and bidirectional and window:
        # EmbeddingGemma: its config class turns W into W // 2 + 1 and its model opens the
        # window both ways with |q − k| < that, i.e. |q − k| <= W // 2; full layers see all
        causal, window = False, window // 2
    cross = c.get("cross_attention_layers") or []
    positions: str | None = None
    if mp is not None:
        positions = "none" if mp.kind == "none" else mp.kind
    if str(c.get("position_embedding_type", "")).lower() == "nope":
        positions = "none"
    layers = []
    for i, t in enumerate(types):
        if isinstance(cross, list) and i in cross:  # Mllama: these layers attend the image
            layers.append(
                AttentionLayer(
                    i,
                    "cross_attention",
                    "cross_attention",
                    None,
                    None,
                    None,
                    None,
                    "cross-attention to the image tokens (its mask is the model's "
                    "cross_attention_mask, no positions)",
                )
            )
        elif t in ("linear_attention", "conv", "mlp", "moe"):
            layers.append(_recurrent_layer(i, t, model_type))
        else:
            layers.append(
                _attention_layer(
                    i,
                    t,
                    window=window,
                    chunk=chunk,
                    causal=causal,
                    positions=positions,
                    model_type=model_type,
                )
            )
    return tuple(layers)


def layer_rule(
    config: Mapping[str, Any], *, layer_type: str | None = None, layer: int | None = None
) -> AttentionLayer:
    """The layer of ``config`` that ``layer`` (an index) or ``layer_type`` names.

    Without either, the config must have one mask for all its attention layers.

    Raises:
        InvalidArgument: both given, an index out of range, a type the config does not have,
            an ambiguous config, or a layer without attention (the message says what it is).
    """
    layers = attention_layers(config)
    if not layers:
        raise InvalidArgument(
            "the config gives no layers (num_hidden_layers or layer_types)", field="config"
        )
    if layer is not None and layer_type is not None:
        raise InvalidArgument("give layer or layer_type, not both", field="layer")
    if layer is not None:
        if not 0 <= layer < len(layers):
            raise InvalidArgument(
                f"layer must be in [0, {len(layers) - 1}] (the config has {len(layers)} "
                f"layers), got {layer}",
                field="layer",
            )
        chosen = layers[layer]
        field = "layer"
    else:
        known = sorted({x.layer_type for x in layers})
        if layer_type is not None:
            matching = [
                x
                for x in layers
                if x.layer_type == layer_type
                or (layer_type == "no_rope" and x.mask is not None and x.positions == "none")
            ]
            if not matching:
                raise InvalidArgument(
                    f"layer_type {layer_type!r} is not a layer type of this config; one of {known}",
                    field="layer_type",
                )
        else:
            matching = [x for x in layers if x.mask is not None]
            rules = {x.rule for x in matching}
            if len(rules) > 1:
                raise InvalidArgument(
                    f"the config's layers apply different masks; give layer_type (one of "
                    f"{known}) or layer",
                    field="layer_type",
                )
            if not matching:
                matching = list(layers)
        chosen, field = matching[0], "layer_type"
    if chosen.mask is None:
        raise InvalidArgument(
            f"layer {chosen.index} ({chosen.layer_type}) is a {chosen.what}: it has no "
            "attention mask",
            field=field,
        )
    return chosen


def layers_summary(config: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """:func:`attention_layers` as JSON, for ``/v1/configs/positions``' ``layers``; None
    where the layers cannot be read (a sliding layer without its window: the masks endpoint
    says why)."""
    try:
        return [x.to_dict() for x in attention_layers(config)]
    except InvalidArgument:
        return None

"""The positions that are not RoPE, read from a config: ALiBi, T5's relative buckets,
DeBERTa's and Swin's relative positions, Parakeet's relative sinusoidal, and learned tables."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from posenc.core.errors import InvalidArgument
from posenc.facts.config_parts import ConfigReader
from posenc.facts.families import family
from posenc.readers.hf.heads import read_head_dim, read_softmax_scale
from posenc.readers.hf.results import ModelPositions
from posenc.relative_schemes.relative_sinusoidal import parakeet_encoder


def alibi_positions(
    shown_type: str,
    base: str,
    r: ConfigReader,
    heads: int | None,
    max_pos: int | None,
    n_layers: int | None,
) -> ModelPositions:
    max_bias = 8.0
    if family(base).alibi_flag == "attn_config":
        attn = r.config.get("attn_config") or {}
        if not isinstance(attn, Mapping):
            raise InvalidArgument(
                f"config.attn_config must be an object, got {type(attn).__name__}",
                field=r.field("attn_config"),
            )
        sub = ConfigReader(attn, r.field("attn_config."))
        max_bias = sub.float("alibi_bias_max", 8.0) or 8.0
    if heads is None:
        raise InvalidArgument(
            f"{r.field('num_attention_heads')} is missing: an ALiBi config must give the number "
            "of heads (n_head, n_heads or num_attention_heads)",
            field=r.field("num_attention_heads"),
        )
    head_dim = read_head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="alibi",
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=read_softmax_scale(base, r, head_dim, None),
        alibi=MappingProxyType({"num_heads": heads, "max_bias": float(max_bias)}),
        warnings=tuple(r.warnings),
    )


def learned_table(
    base: str, r: ConfigReader, max_pos: int | None, d_model: int | None
) -> dict[str, Any]:
    """The learned table: ``seq_len`` and ``table_size`` are its rows, ``d_model`` its width
    (ELECTRA's and ALBERT's ``embedding_size``, as their ``position_embeddings``); RoBERTa's
    family counts positions from ``padding_idx + 1`` (``create_position_ids_from_input_ids``),
    so ``usable_positions`` of the rows are reachable."""
    fam = family(base)
    if fam.learned_width_key is not None and r.has(fam.learned_width_key):
        d_model = r.int(fam.learned_width_key)
    if fam.learned_rows_key is not None:  # Whisper: the decoder's (text) positions
        max_pos = r.int(fam.learned_rows_key, max_pos)
    offset = fam.learned_offset if fam.learned_offset and max_pos is not None else 0
    size = max_pos + offset if max_pos is not None else None
    out: dict[str, Any] = {
        "seq_len": size,
        "d_model": d_model,
        "vocab_size": r.int("vocab_size"),
        "table_size": size,
    }
    if offset:  # BART's LearnedPositionalEmbedding: position p is row p + 2
        out["first_position"] = offset
        out["usable_positions"] = max_pos
    if fam.padding_offset:
        pad = r.int("pad_token_id", 1, minimum=0)
        if max_pos is not None and pad is not None:
            out["first_position"] = pad + 1
            out["usable_positions"] = max(max_pos - pad - 1, 0)
    return out


def relative_positions(
    shown_type: str, r: ConfigReader, heads: int | None, n_layers: int | None
) -> ModelPositions:
    buckets = r.int("relative_attention_num_buckets", 32, minimum=2)
    distance = r.int("relative_attention_max_distance", 128)
    head_dim = r.int("d_kv") or read_head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=1.0,
        relative=MappingProxyType(
            {
                "num_buckets": buckets,
                "max_distance": distance,
                "bidirectional": True,
                "num_heads": heads,
            }
        ),
        warnings=tuple(r.warnings),
    )


def deberta_positions(
    shown_type: str, r: ConfigReader, heads: int | None, max_pos: int | None, n_layers: int | None
) -> ModelPositions:
    """DeBERTa-v2/v3 with ``relative_attention``, as ``DebertaV2Encoder`` and
    ``DisentangledSelfAttention`` read it: ``max_relative_positions`` < 1 (the published v3
    files' -1) falls back to ``max_position_embeddings``; ``position_buckets`` <= 0 (or absent)
    is plain ``i - j``. The softmax scale is ``(head_dim · (1 + |{c2p, p2c} ∩ pos_att_type|))
    ^-0.5``."""
    c = r.config
    max_relative = c.get("max_relative_positions", -1)
    if max_relative is None or (isinstance(max_relative, int | float) and max_relative < 1):
        max_position = max_pos
        if max_position is None:
            raise InvalidArgument(
                f"{r.field('max_relative_positions')} is {max_relative!r} (< 1), so DeBERTa "
                "uses max_position_embeddings, which the config lacks",
                field=r.field("max_position_embeddings"),
            )
    else:
        max_position = r.int("max_relative_positions")
    buckets = c.get("position_buckets", -1)
    if buckets is not None and not (isinstance(buckets, int) and buckets <= 0):
        buckets = r.int("position_buckets")
    if buckets is None or buckets <= 0:
        buckets = None
    head_dim = r.int("attention_head_size") or read_head_dim(r)
    att_type = c.get("pos_att_type") or []
    if isinstance(att_type, str):
        att_type = [x.strip() for x in att_type.lower().split("|")]
    factor = 1 + sum(1 for t in ("c2p", "p2c") if t in att_type)
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        layer_types=tuple(["full_attention"] * (n_layers or 0)),
        softmax_scale=None if head_dim is None else (head_dim * factor) ** -0.5,
        relative=MappingProxyType(
            {"bucketing": "deberta", "position_buckets": buckets, "max_position": max_position}
        ),
        warnings=tuple(r.warnings),
    )


def swin_positions(shown_type: str, base: str, r: ConfigReader) -> ModelPositions:
    """Swin / Swin v2: every window attends with the ``relative_position_index`` of a
    ``window_size`` window (transformers' default 7). Swin v2's attention is cosine with a
    learned logit scale, so it has no fixed softmax scale."""
    window = r.int("window_size", 7)
    embed_dim = r.int("embed_dim", 96)
    stage_heads = r.config.get("num_heads", [3, 6, 12, 24])
    head_dim = None
    first = stage_heads[0] if isinstance(stage_heads, list) and stage_heads else None
    if isinstance(first, int) and not isinstance(first, bool) and first > 0 and embed_dim:
        head_dim = embed_dim // first
    scale = None if family(base).cosine_attention or head_dim is None else head_dim**-0.5
    return ModelPositions(
        model_type=shown_type,
        kind="relative",
        head_dim=head_dim,
        softmax_scale=scale,
        relative=MappingProxyType({"bucketing": "swin", "window_size": window}),
        warnings=tuple(r.warnings),
    )


def parakeet_positions(model_type: str, config: Mapping[str, Any]) -> ModelPositions:
    """NVIDIA Parakeet (FastConformer): Transformer-XL relative sinusoidal positions, read by
    :func:`posenc.relative_schemes.relative_sinusoidal.parakeet_encoder` (a whole file's ``encoder_config``, or
    the encoder config alone); ``relative`` names the endpoint whose table it is."""
    enc = parakeet_encoder(config)
    return ModelPositions(
        model_type=model_type,
        kind="relative",
        head_dim=enc["head_dim"],
        max_position_embeddings=enc["max_position_embeddings"],
        layer_types=tuple(["full_attention"] * enc["num_layers"]),
        softmax_scale=enc["softmax_scale"],
        relative=MappingProxyType(
            {
                "scheme": "relative_sinusoidal",
                "endpoint": "/v1/encodings/relative-sinusoidal",
                **{k: enc[k] for k in ("d_model", "base", "num_heads", "subsampling_factor")},
            }
        ),
    )


__all__ = [
    "alibi_positions",
    "deberta_positions",
    "learned_table",
    "parakeet_positions",
    "relative_positions",
    "swin_positions",
]

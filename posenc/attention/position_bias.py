"""The position bias a layer adds to its attention scores beside its mask, row by row.

``POST /v1/masks`` with ``as: "combined"`` answers the one tensor a model adds to ``q·kᵀ``: its
mask (−inf, or ``finfo.min`` where transformers' eager attention adds that) and, where the mask
allows, this bias (:func:`posenc.attention.masks.combined_blocks`). The bias is written here as rows of
the ``(B, H, T, S)`` tensor, each from its head and its query's and keys' positions, so the whole
tensor and any block of its rows are the same values.

ALiBi comes in the three forms models add (all with :func:`posenc.relative_schemes.alibi.alibi_slopes`, which
BLOOM's ``_get_alibi_slopes`` and MPT's ``build_mpt_alibi_tensor`` give too):

- ``paper``: ``−m_h·|q − k|`` (Press et al. 2022; posenc's ``/v1/biases/alibi``);
- ``key_index`` (BLOOM): ``m_h·k'`` with ``k'`` the key's index among the row's real tokens
  and 0 at padding (transformers' ``modeling_bloom.build_alibi_tensor``:
  ``(cumsum(mask) − 1)·mask``), one row broadcast over the queries;
- ``from_last`` (MPT): ``m_h·(k − S + 1)`` (transformers' ``modeling_mpt.build_mpt_alibi_tensor``
  over ``max_seq_len`` keys, sliced to the last ``S`` in ``MptAttention.forward``).

They differ by a constant per query, so the softmax over the allowed keys is the same; the values
are not. ``relative`` is T5's bias, ``table[bucket(k − q), h]`` (``T5Attention.compute_bias``),
with bidirectional buckets on a bidirectional layer (T5's encoder) and one-way buckets on a
causal one (its decoder), and the table seeded as :func:`posenc.relative_schemes.relative.relative_bias_table`
makes it.

:func:`config_position_bias` reads these settings from a model's ``config.json`` (BLOOM, MPT,
T5's family), the form from the model type's record (``position_bias_form`` in
:mod:`posenc.facts.families`).

Notation used for tensor shapes:
    N: rows of a block.
    S: keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import check_choice, check_int, is_number
from posenc.facts.families import base_type, family
from posenc.readers.hf.positions import read_positions
from posenc.relative_schemes.alibi import alibi_slopes
from posenc.relative_schemes.relative import relative_bias_table, relative_position_bucket

__all__ = [
    "ALIBI_FORMS",
    "MAX_TABLE_ELEMENTS",
    "POSITION_BIASES",
    "AlibiForm",
    "PositionBias",
    "PositionBiasKind",
    "bias_parameters",
    "bias_rows",
    "check_position_bias",
    "config_position_bias",
    "position_bias",
]

PositionBiasKind = Literal["alibi", "relative"]
POSITION_BIASES: tuple[str, ...] = get_args(PositionBiasKind)
AlibiForm = Literal["paper", "key_index", "from_last"]
ALIBI_FORMS: tuple[str, ...] = get_args(AlibiForm)


@dataclass(frozen=True)
class PositionBias:
    """A checked position bias (:func:`position_bias`).

    Attributes:
        kind: ``alibi`` or ``relative`` (T5's bucketed table).
        num_heads: ``H``.
        max_bias: ALiBi's slope exponent scale (MPT's ``alibi_bias_max``).
        alibi_form: ``paper``, ``key_index`` (BLOOM) or ``from_last`` (MPT) (module docstring).
        num_buckets: T5's ``relative_attention_num_buckets``.
        max_distance: T5's ``relative_attention_max_distance``.
        seed: T5's table, ``torch.manual_seed(seed); nn.Embedding(num_buckets, H).weight``.
    """

    kind: PositionBiasKind
    num_heads: int
    max_bias: float = 8.0
    alibi_form: AlibiForm = "paper"
    num_buckets: int = 32
    max_distance: int = 128
    seed: int = 0


def position_bias(
    kind: str,
    *,
    num_heads: int | None,
    max_bias: float = 8.0,
    alibi_form: str = "paper",
    num_buckets: int = 32,
    max_distance: int = 128,
    seed: int = 0,
) -> PositionBias:
    """A checked :class:`PositionBias`.

    Raises:
        InvalidArgument: an unknown kind or form, no ``num_heads``, or a size out of range
            (``field`` names it).
    """
    check_choice("position_bias", kind, POSITION_BIASES)
    if num_heads is None:
        raise InvalidArgument(f"position_bias {kind} needs num_heads", field="num_heads")
    check_int("num_heads", num_heads, 1)
    check_choice("alibi_form", alibi_form, ALIBI_FORMS)
    if not is_number(max_bias) or not math.isfinite(max_bias) or max_bias <= 0:
        raise InvalidArgument(
            f"max_bias must be a finite number > 0, got {max_bias!r}", field="max_bias"
        )
    check_int("num_buckets", num_buckets, 1)
    check_int("max_distance", max_distance, 1)
    check_int("seed", seed, 0)
    return PositionBias(
        kind,  # type: ignore[arg-type]
        num_heads,
        float(max_bias),
        alibi_form,  # type: ignore[arg-type]
        num_buckets,
        max_distance,
        seed,
    )


#: what each field of :func:`position_bias` is when neither the request nor a config gives it
BIAS_DEFAULTS: dict[str, Any] = {
    "max_bias": 8.0,
    "alibi_form": "paper",
    "num_buckets": 32,
    "max_distance": 128,
}
_ALIBI_FIELDS = ("max_bias", "alibi_form")
_T5_FIELDS = ("num_buckets", "max_distance")

#: why a record's ``position_bias_form`` has no combined tensor (:class:`posenc.facts.families.Family`)
_REFUSED = {
    "scaled_alibi": (
        "{model} with alibi scales its scores plus ALiBi by 1/sqrt(head_dim) before it adds "
        "the mask (FalconAttention: (q·kᵀ + alibi) · inv_norm_factor), so no bias added "
        "beside the mask is what it passes to softmax; /v1/biases/alibi serves its ALiBi alone"
    ),
    "t5_decoder_only": (
        "{model}'s encoder adds more than T5's table (LongT5: local blocks of local_radius "
        "keys; UDOP: a 2-D layout bias from the boxes), so only its decoder's self-attention "
        "is served: give kind: causal (or a config with is_decoder: true)"
    ),
}


def config_position_bias(
    config: Mapping[str, Any], given: Mapping[str, Any], *, bidirectional: bool
) -> dict[str, Any]:
    """The position bias a model's ``config.json`` adds beside its mask, as the fields of
    :func:`position_bias`, with the request's own (``given``: None where not given) over them.

    Read as transformers builds the model: BLOOM's ALiBi (``key_index``, ``n_head``), MPT's
    (``from_last``, ``n_heads``, ``attn_config.alibi_bias_max``), T5's family's table
    (``num_heads``, ``relative_attention_num_buckets``, ``relative_attention_max_distance``);
    the form comes from the model type's record (``position_bias_form``).

    Raises:
        InvalidArgument: a model with no position bias (RoPE, a learned table) or one whose bias
            is not a bias beside the mask (Falcon's scaled ALiBi, LongT5's and UDOP's
            encoders); a ``position_bias`` other than the model's, or a field of the other
            bias (``num_buckets`` on BLOOM, ``alibi_form`` on T5): ``field`` names it.
    """
    mp = read_positions(config)
    form = family(base_type(mp.model_type)).position_bias_form
    model = mp.model_type or "the config's model"
    relative = mp.relative or {}
    kind = None
    if mp.kind == "alibi" or (mp.kind == "relative" and "num_buckets" in relative):
        kind = mp.kind
    if kind == "alibi" and form == "scaled_alibi":
        raise InvalidArgument(_REFUSED[form].format(model=model), field="config.alibi")
    if kind == "relative" and form == "t5_decoder_only" and bidirectional:
        raise InvalidArgument(_REFUSED[form].format(model=model), field="config")
    asked = given.get("position_bias")
    if kind is None:
        what = f"{mp.kind} positions" if mp.kind != "none" else "no positional encoding"
        raise InvalidArgument(
            f"{model} applies {what}, not a position bias added to its scores (ALiBi or T5's "
            "table), so as: combined has nothing to add from its config",
            field="position_bias" if asked is not None else "config",
        )
    adds = "ALiBi (alibi)" if kind == "alibi" else "T5's bucketed table (relative)"
    if asked is not None and asked != kind:
        raise InvalidArgument(
            f"position_bias {asked} conflicts with the config: {model} adds {adds}",
            field="position_bias",
        )
    for name in _T5_FIELDS if kind == "alibi" else _ALIBI_FIELDS:
        if given.get(name) is not None:
            raise InvalidArgument(
                f"{name} belongs to the other position bias: {model} adds {adds}", field=name
            )
    params = (mp.alibi or {}) if kind == "alibi" else relative
    from_config: dict[str, Any] = {"position_bias": kind, "num_heads": params["num_heads"]}
    if kind == "alibi":
        from_config["max_bias"] = params["max_bias"]
        if form in ("key_index", "from_last"):
            from_config["alibi_form"] = form
    else:
        from_config.update(
            num_buckets=relative["num_buckets"], max_distance=relative["max_distance"]
        )
    return {**from_config, **{k: v for k, v in given.items() if v is not None}}


def check_position_bias(bias: PositionBias, *, bidirectional: bool) -> None:
    """T5's buckets on this layer (both ways or one way) checked before any work.

    Raises:
        InvalidArgument: ``max_distance`` within the exact buckets, or too few buckets.
        TooLarge: a table of more than :data:`MAX_TABLE_ELEMENTS` values.
    """
    if bias.kind == "relative":
        check_elements(
            bias.num_buckets * bias.num_heads,
            what=f"T5's bias table (NB={bias.num_buckets}, H={bias.num_heads})",
            max_elements=MAX_TABLE_ELEMENTS,
            field="num_buckets",
        )
        relative_position_bucket(
            torch.zeros(1, dtype=torch.int64),
            bidirectional=bidirectional,
            num_buckets=bias.num_buckets,
            max_distance=bias.max_distance,
        )


def _alibi_rows(
    bias: PositionBias, slope: Tensor, q: Tensor, k: Tensor, key_len: int, real: Tensor | None
) -> Tensor:
    """ALiBi's value in one of its forms, float64 ``(N, S)``."""
    if bias.alibi_form == "paper":
        distance = -(q - k).abs()  # negated in integers: the diagonal is +0.0
        return slope * distance.to(torch.float64)
    if bias.alibi_form == "from_last":
        return slope * (k - (key_len - 1)).to(torch.float64)
    if real is None:  # BLOOM without padding: slopes · arange(S)
        return slope * k.to(torch.float64)
    counted = (torch.cumsum(real.to(torch.int64), dim=1) - 1) * real  # (N, S)
    return slope * counted.to(torch.float64)


# T5's table is made whole (its rows come from one random stream): at most this many values
MAX_TABLE_ELEMENTS = 2**24


def bias_parameters(bias: PositionBias, *, device: torch.device) -> Tensor:
    """What every row reads, made once: ALiBi's slopes ``(H,)`` float64, or T5's seeded table
    ``(NB, H)`` float32."""
    if bias.kind == "alibi":
        return alibi_slopes(bias.num_heads, bias.max_bias, device=device, dtype=torch.float64)
    return relative_bias_table(bias.num_buckets, bias.num_heads, seed=bias.seed).to(device)


def bias_rows(
    bias: PositionBias,
    parameters: Tensor,
    head: Tensor,
    q: Tensor,
    k: Tensor,
    *,
    key_len: int,
    real_keys: Tensor | None,
    bidirectional: bool,
) -> Tensor:
    """The bias of rows whose heads are ``head`` ``(N,)``, float64 ``(N, S)``.

    Args:
        bias: the position bias.
        parameters: :func:`bias_parameters` of ``bias``.
        head: each row's head.
        q: ``(N, 1)`` int64, each row's query position among the keys.
        k: ``(1, S)`` or ``(N, S)`` int64, the keys' positions.
        key_len: ``S``.
        real_keys: ``(N, S)`` bool, false at padding (BLOOM counts the real keys); None
            without padding.
        bidirectional: T5's buckets both ways (its encoder) or one way (its decoder).
    """
    if bias.kind == "alibi":
        return _alibi_rows(bias, parameters[head][:, None], q, k, key_len, real_keys)
    buckets = relative_position_bucket(
        k - q,
        bidirectional=bidirectional,
        num_buckets=bias.num_buckets,
        max_distance=bias.max_distance,
    )  # (N, S)
    return parameters[buckets, head[:, None]].to(torch.float64)

"""Relative sinusoidal positions of Transformer-XL style encoders (NVIDIA Parakeet / FastConformer).

Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context" (ACL 2019)
encode the relative distances ``L - 1, L - 2, ..., -(L - 1)`` between a query and the ``L`` keys
with the sinusoidal table; NeMo's ``RelPositionalEncoding`` and transformers'
``models/parakeet/modeling_parakeet.py::ParakeetEncoderRelPositionalEncoding`` (the reference
here) interleave the pairs: channel ``2i`` is ``sin(r · ω_i)`` and ``2i + 1`` is ``cos(r · ω_i)``,
``ω_i = base^(-2i / D)``, ``base`` 10000.

Angles are formed in float64 and the table cast once at the end (transformers forms them in
float32, which drifts by about 1e-4 at distance 5000).

Notation used for tensor shapes:
    L: sequence length.
    P: relative positions, ``2L - 1``.
    D: model dimension (even).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from posenc.core import kinds
from posenc.core.blocks import TableBlocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import check_int, check_int_at_least, device_or_cpu
from posenc.facts.config_parts import encoder_part
from posenc.facts.families import family, types_where

#: The model types whose encoder uses these positions (``encoder_config`` for the whole models).
PARAKEET_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.scheme == "relative_sinusoidal")


def relative_sinusoidal_positions(
    seq_len: int, *, device: str | torch.device | None = None
) -> torch.Tensor:
    """The relative positions ``L - 1, L - 2, ..., -(L - 1)``: (P,) int64, ``P = 2L - 1``."""
    seq_len = check_int("seq_len", seq_len, 1)
    return torch.arange(seq_len - 1, -seq_len, -1, dtype=torch.int64, device=device_or_cpu(device))


def relative_sinusoidal_table(
    seq_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Parakeet's ``ParakeetEncoderRelPositionalEncoding`` output for one sequence.

    Args:
        seq_len: ``L`` (>= 1).
        d_model: ``D`` (even, >= 2), the encoder's ``hidden_size``.
        base: the frequencies' base (10000 in Parakeet).
        dtype: dtype of the result (computed in float64).
        device: where the result lives (None: CPU).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`); None means ``posenc.core.limits.MAX_ELEMENTS``.

    Returns:
        (P, D), row ``k`` for relative position ``L - 1 - k``: ``[sin(r ω_0), cos(r ω_0),
        sin(r ω_1), ...]``.
    """
    seq_len = check_int("seq_len", seq_len, 1)
    d_model = _check_d_model_base(d_model, base)
    rows = 2 * seq_len - 1
    check_elements(
        rows * d_model, what=f"the (P={rows}, D={d_model}) table", max_elements=max_elements
    )
    blocks = relative_sinusoidal_blocks(seq_len, d_model, base=base, dtype=dtype, device=device)
    return blocks.whole()  # (P, D): one block of all the rows


def relative_sinusoidal_blocks(
    seq_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
) -> TableBlocks:
    """:func:`relative_sinusoidal_table` ``(P, D)`` in row blocks: :func:`write_rows` on each
    block's rows, the same bytes. Arguments and errors as the whole table's."""
    seq_len = check_int("seq_len", seq_len, 1)
    d_model = _check_d_model_base(d_model, base)
    dev = device_or_cpu(device)
    inv_freq = _inv_freq(d_model, base, dev)  # (D/2,) float64

    def fill(start: int, stop: int, out: torch.Tensor) -> None:
        write_rows(out, start, stop, seq_len=seq_len, inv_freq=inv_freq)

    return TableBlocks("encoding", (2 * seq_len - 1, d_model), resolve_dtype(dtype), fill, dev)


def _check_d_model_base(d_model: int, base: float) -> int:
    d_model = check_int("d_model", d_model, 2)
    if d_model % 2:
        raise InvalidArgument(f"d_model must be even, got {d_model}", field="d_model")
    if not base > 0 or base == float("inf"):
        raise InvalidArgument(f"base must be a finite number > 0, got {base!r}", field="base")
    return d_model


def _inv_freq(d_model: int, base: float, device: torch.device) -> torch.Tensor:
    """``ω_i = base^(-2i/D)``: (D/2,) float64, as Parakeet's ``inv_freq`` (in float64)."""
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    return 1.0 / (base ** (exponents / d_model))


def write_rows(
    out: torch.Tensor, start: int, stop: int, *, seq_len: int, inv_freq: torch.Tensor
) -> None:
    """Rows ``start … stop − 1`` of the table into ``out`` ``(stop − start, D)``: the one
    formula of both the whole table and its row blocks (float64 angles, one cast into ``out``)."""
    r = (seq_len - 1 - torch.arange(start, stop, dtype=torch.int64, device=out.device)).to(
        torch.float64
    )  # (N,) relative positions
    angles = r[:, None] * inv_freq.to(out.device)[None, :]  # (N, D/2)
    out[:, 0::2] = angles.sin()
    out[:, 1::2] = angles.cos()


def _encoder_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The encoder config of a Parakeet ``config`` and the field prefix of its keys.

    Raises:
        InvalidArgument: another model type, or an ``encoder_config`` that is not an object.
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a model's config.json), got {type(config).__name__}",
            field="config",
        )
    model_type = config.get("model_type")
    if model_type not in PARAKEET_MODEL_TYPES:
        raise InvalidArgument(
            f"config of model_type {model_type!r} has no Transformer-XL relative sinusoidal "
            f"positions; model types: {sorted(PARAKEET_MODEL_TYPES)}",
            field="config.model_type",
        )
    if not family(model_type).encoder_config:  # the encoder's own file
        return config, "config."
    return encoder_part(config)


def _positive_int(encoder: Mapping[str, Any], prefix: str, key: str, default: int) -> int:
    value = encoder.get(key, default)
    return check_int_at_least(
        f"{prefix}{key}", default if value is None else value, 1, noun="an integer"
    )


def parakeet_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"d_model"}`` of a Parakeet config (its ``encoder_config`` when a whole model's).

    Raises:
        InvalidArgument: another model type, or a hidden size that is not an even int.
    """
    encoder, prefix = _encoder_part(config)
    hidden = encoder.get("hidden_size", 1024)  # ParakeetEncoderConfig's default
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 2 or hidden % 2:
        raise InvalidArgument(
            f"{prefix}hidden_size must be an even integer >= 2, got {hidden!r}",
            field=f"{prefix}hidden_size",
        )
    return {"d_model": hidden}


def parakeet_encoder(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a Parakeet config (a whole ``parakeet_ctc`` / ``_tdt`` / ``_rnnt`` file, or its
    ``parakeet_encoder`` config alone) means for positions, as transformers'
    ``ParakeetEncoder`` reads it (``ParakeetEncoderConfig``'s defaults where a key is absent).

    Returns:
        ``{"d_model", "base", "num_heads", "head_dim", "num_layers", "max_position_embeddings",
        "subsampling_factor", "softmax_scale"}``: the table of
        :func:`relative_sinusoidal_table` is ``(2L - 1, d_model)`` for ``L`` encoder frames
        (the input frames divided by ``subsampling_factor``); every attention layer scales its
        scores by ``head_dim^-0.5`` (``ParakeetEncoderAttention.scaling``), ``head_dim`` being
        the config's, else ``hidden_size // num_attention_heads``.

    Raises:
        InvalidArgument: another model type, or a size that is not a positive int.
    """
    d_model = parakeet_fields(config)["d_model"]
    encoder, prefix = _encoder_part(config)
    heads = _positive_int(encoder, prefix, "num_attention_heads", 8)
    head_dim = encoder.get("head_dim")
    if head_dim is None:
        head_dim = d_model // heads
    else:
        head_dim = _positive_int(encoder, prefix, "head_dim", 1)
    if head_dim < 1:
        raise InvalidArgument(
            f"{prefix}num_attention_heads must be <= hidden_size {d_model}, got {heads}",
            field=f"{prefix}num_attention_heads",
        )
    return {
        "d_model": d_model,
        "base": 10000.0,  # fixed in ParakeetEncoderRelPositionalEncoding
        "num_heads": heads,
        "head_dim": head_dim,
        "num_layers": _positive_int(encoder, prefix, "num_hidden_layers", 24),
        "max_position_embeddings": _positive_int(encoder, prefix, "max_position_embeddings", 5000),
        "subsampling_factor": _positive_int(encoder, prefix, "subsampling_factor", 8),
        "softmax_scale": head_dim**-0.5,
    }


__all__ = [
    "PARAKEET_MODEL_TYPES",
    "RELATIVE_SINUSOIDAL",
    "parakeet_encoder",
    "parakeet_fields",
    "relative_sinusoidal_blocks",
    "relative_sinusoidal_positions",
    "relative_sinusoidal_table",
    "write_rows",
]


# ---------------------------------------------------------------------------------------------
# The relative-sinusoidal endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------


def _resolved(p: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(p)
    if p.get("config") is not None:
        for name, value in parakeet_fields(p["config"]).items():
            if out.get(name) is None:
                out[name] = value
    if out.get("d_model") is None:
        raise InvalidArgument(
            "d_model is required: give d_model or a Parakeet config", field="d_model"
        )
    return out


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, torch.Tensor]:
    r = _resolved(p)
    return {
        "encoding": relative_sinusoidal_table(
            r["seq_len"], r["d_model"], base=r["base"], dtype=ctx.dtype, device=ctx.device
        )
    }


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    r = _resolved(p)
    blocks = relative_sinusoidal_blocks(
        r["seq_len"], r["d_model"], base=r["base"], dtype=ctx.dtype, device=ctx.device
    )
    return {"encoding": blocks}


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    r = _resolved(p)
    rows = 2 * r["seq_len"] - 1
    return {"encoding": (rows, r["d_model"])}


RELATIVE_SINUSOIDAL: kinds.Kind = kinds.Kind(
    name="relative_sinusoidal",
    path="/v1/encodings/relative-sinusoidal",
    tag="encodings",
    summary="Transformer-XL relative sinusoidal positions (Parakeet)",
    description="The sinusoidal table of the relative positions L−1 … −(L−1) (rows in that "
    "order), pairs interleaved [sin, cos] with ω_i = base^(−2i/D), as transformers' "
    "`ParakeetEncoderRelPositionalEncoding` (NVIDIA Parakeet / FastConformer, Transformer-XL "
    "style attention). float64 angles, cast once; row k is distance L − 1 − k.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "L, the sequence length", minimum=1, example=4),
        kinds.FieldSpec(
            "d_model",
            "int",
            "D, even (the encoder's hidden_size; required without a config)",
            None,
            minimum=2,
            multiple_of=2,
            example=8,
        ),
        kinds.FieldSpec(
            "base",
            "float",
            "the frequencies' base (Parakeet: 10000)",
            10000.0,
            exclusive_minimum=0,
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "a Parakeet config.json (parakeet_ctc, parakeet_tdt, parakeet_rnnt: its "
            "encoder_config; or parakeet_encoder): gives d_model (hidden_size)",
            None,
        ),
    ),
    tensors=(kinds.TensorSpec("encoding", ("P", "D")),),
    shapes=_shapes,
    compute=_compute,
    meta=lambda p: {
        "kind": "relative_sinusoidal",
        "seq_len": p["seq_len"],
        "d_model": _resolved(p)["d_model"],
        "base": p["base"],
        "rows": 2 * p["seq_len"] - 1,
        "config_model_type": (p.get("config") or {}).get("model_type"),
        "dtype": p["dtype"],
    },
    blocks=_blocks,
    row_elements=lambda p: int(_resolved(p)["d_model"]),
)
"""The relative-sinusoidal endpoint kind (see :mod:`posenc.core.kinds`)."""

"""YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of LLMs"): a ramp between
interpolation and extrapolation, and an attention factor (mscale), as transformers'
``_compute_yarn_parameters``.

One scaling type: its parameters (:class:`YarnParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc.errors import InvalidArgument
from posenc.rope.parameters import parameter

# transformers' defaults for YaRN's ramp boundaries (`beta_fast or 32`, `beta_slow or 1`).
BETA_FAST = 32.0
BETA_SLOW = 1.0


NAME = "yarn"
#: Its ramp / factor lists are ``E // 2`` long: an odd exponent width cannot be built.
NEEDS_EVEN_WIDTH = True
#: How transformers fills ``original_max_position_embeddings`` from a model config for this
#: type: ``original`` (the config's own key, else ``max_position_embeddings``) or
#: ``max_position`` (always ``max_position_embeddings``).
ORIGINAL_MAX_FROM_CONFIG = "original"
#: Without ``factor``, transformers takes ``max_position_embeddings / original``.
FACTOR_FROM_LENGTHS = True
LABEL = "YaRN"


@dataclass(frozen=True)
class YarnParams:
    """YaRN (Peng et al., 2023): ramp between interpolation and extrapolation, mscale."""

    factor: float = parameter("context extension factor", required=True, exclusive_minimum=0)
    original_max_position_embeddings: int = parameter(
        "the pretraining context length", type="int", required=True, minimum=1
    )
    beta_fast: float | None = parameter("rotations where extrapolation ends", exclusive_minimum=0)
    beta_slow: float | None = parameter("rotations where interpolation begins", exclusive_minimum=0)
    mscale: float | None = parameter("numerator mscale (DeepSeek)")
    mscale_all_dim: float | None = parameter("denominator mscale (DeepSeek)")
    attention_factor: float | None = parameter("attention scaling", exclusive_minimum=0)
    truncate: bool | None = parameter("round the correction range (default true)", type="bool")


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = YarnParams


def validate(p: YarnParams) -> None:
    """The ramp's ends in order: ``beta_fast >= beta_slow`` (their defaults 32 and 1)."""
    fast = p.beta_fast if p.beta_fast is not None else BETA_FAST
    slow = p.beta_slow if p.beta_slow is not None else BETA_SLOW
    if fast < slow:
        raise InvalidArgument(
            f"scaling.beta_fast must be >= scaling.beta_slow, got beta_fast={fast} and "
            f"beta_slow={slow}",
            field="scaling.beta_fast",
        )


def _yarn(
    base_inv_freq: Tensor, rotary_dim: int, base: float, s: YarnParams
) -> tuple[Tensor, float]:
    """YaRN (Peng et al., 2023) as transformers' ``_compute_yarn_parameters``, in float64."""
    factor = float(s.factor)
    omax = s.original_max_position_embeddings

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if s.attention_factor is not None:
        attention_factor = float(s.attention_factor)
    elif s.mscale and s.mscale_all_dim:  # truthiness as in transformers: 0 means "not given"
        attention_factor = get_mscale(factor, s.mscale) / get_mscale(factor, s.mscale_all_dim)
    else:
        attention_factor = get_mscale(factor)

    beta_fast = s.beta_fast if s.beta_fast is not None else BETA_FAST
    beta_slow = s.beta_slow if s.beta_slow is not None else BETA_SLOW

    def correction_dim(num_rotations: float) -> float:
        # the dimension whose wavelength fits num_rotations times into the original context
        return (rotary_dim * math.log(omax / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.truncate is None or s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # as transformers: prevent a zero-width ramp

    ramp = torch.arange(rotary_dim // 2, dtype=torch.float64)
    ramp = ((ramp - low) / (high - low)).clamp(0, 1)  # (R/2,)
    extrapolation = 1 - ramp  # 1 keeps ω_i (high frequencies), 0 uses ω_i / factor
    inv_freq = (base_inv_freq / factor) * (1 - extrapolation) + base_inv_freq * extrapolation
    return inv_freq, attention_factor


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: YarnParams, seq_len: int | None
) -> tuple[Tensor, float]:
    return _yarn(inv_freq, rotary_dim, base, s)

"""Rotary position embeddings (RoPE) with the scaling schemes of Hugging Face transformers.

RoPE rotates each pair of query/key channels by an angle ``θ = p · ω_i`` proportional to the
token position ``p`` (Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary Position
Embedding"), so that ``<rope(q, m), rope(k, n)>`` depends only on ``m − n``. Two layouts pair the
channels differently:

- ``half`` (GPT-NeoX, Llama): channel ``i`` pairs with ``i + R/2``;
  ``cos = cat(cos θ, cos θ)`` and the rotation is ``rotate_half``.
- ``interleaved`` (GPT-J, RoFormer): channel ``2i`` pairs with ``2i + 1``; each angle is
  repeated twice in place and the rotation is ``rotate_every_two``.

Partial rotary (GPT-NeoX ``rotary_pct``): only the first ``R = rotary_dim`` channels of a head of
``Dh`` channels are rotated; the rest pass through unchanged.

The inverse frequencies and attention scaling of every scaling type match transformers'
``ROPE_INIT_FUNCTIONS`` (``transformers/modeling_rope_utils.py``):

- ``linear``: position interpolation (kaiokendev; Chen et al., 2023): ``ω_i / factor``.
- ``dynamic``: dynamic NTK (bloc97, emozilla): the base grows with the sequence length.
- ``yarn``: YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of LLMs").
- ``longrope``: LongRoPE (Ding et al., 2024; microsoft/LongRoPE, Phi-3).
- ``llama3``: the frequency-band rescaling of Llama 3.1 (meta-llama/llama-models).
- ``proportional``: Gemma 4's global layers: the first ``partial_rotary_factor`` of the
  ``Dh/2`` frequencies are ``base^(−2i/Dh)`` (exponents over the whole head), the rest are 0
  (those channels are not rotated), all divided by ``factor``; the table spans the whole head.

The types are a table, as transformers' ``ROPE_INIT_FUNCTIONS``: :data:`ROPE_INIT_FUNCTIONS`
maps each type to one function and :data:`ROPE_PARAMETER_KEYS` to its required and optional
parameters, so a new type is one entry in each.

Where transformers reads a value from the model config rather than from ``rope_parameters``,
posenc takes it from :class:`RopeScaling` instead (the library has no model config):

- ``dynamic``: ``original_max_position_embeddings`` stands for transformers'
  ``config.max_position_embeddings`` (the length above which the base is rescaled).
- ``longrope`` and ``yarn``: ``factor`` must be given; transformers falls back to
  ``config.max_position_embeddings / original_max_position_embeddings`` when it is missing, so
  pass that ratio. (``longrope`` may omit ``factor`` when ``attention_factor`` is given, since
  the factor is used only to derive the attention factor there.)

Angles are computed in float64 (inverse frequencies, ``positions × inv_freq``, cos and sin, times
the attention scaling) and cast once at the end, so float32 tables stay within 1e-6 of the
float64 formula at every position below 2**20, where transformers' float32 angle arithmetic is off
by about 1e-2.

Notation used for tensor shapes: ``B`` batch, ``H`` heads, ``T`` sequence length, ``Dh`` head
dimension, ``R`` rotary dimension (``R ≤ Dh``, even).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from posenc import kinds
from posenc._validate import (
    check_choice,
    check_finite,
    check_int,
    check_int_at_least,
    check_seq_len_or_positions,
    device_or_cpu,
    first_true,
)
from posenc.blocks import Scratch, TableBlocks, tensor_blocks, write_pair
from posenc.device import resolve_dtype
from posenc.errors import InvalidArgument
from posenc.limits import check_elements, sequence_length
from posenc.rope_vllm import DEEPSEEK_MODEL_TYPES, VllmRope, vllm_complete, vllm_for_fields

RopeLayout = Literal["half", "interleaved"]
ScalingType = Literal["linear", "dynamic", "yarn", "longrope", "llama3", "proportional"]

ROPE_LAYOUTS: tuple[str, ...] = get_args(RopeLayout)
SCALING_TYPES: tuple[str, ...] = get_args(ScalingType)


def _param_keys(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    fields = dataclasses.fields(cls)
    required = tuple(f.name for f in fields if f.default is dataclasses.MISSING)
    optional = tuple(f.name for f in fields if f.default is not dataclasses.MISSING)
    return required, optional


# transformers' defaults for YaRN's ramp boundaries (`beta_fast or 32`, `beta_slow or 1`).
_YARN_BETA_FAST = 32.0
_YARN_BETA_SLOW = 1.0


# One frozen parameter class per scaling type (transformers' ``_validate_<type>_rope_parameters``
# shape): a field without a default is required. ``RopeScaling.params()`` gives the instance
# that the type's function in ROPE_INIT_FUNCTIONS reads.


@dataclass(frozen=True)
class LinearParams:
    """Position interpolation: every frequency divided by ``factor``."""

    factor: float


@dataclass(frozen=True)
class DynamicParams:
    """Dynamic NTK: the base grows with the length above ``original_max_position_embeddings``."""

    factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class YarnParams:
    """YaRN (Peng et al., 2023): ramp between interpolation and extrapolation, mscale."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool | None = None


@dataclass(frozen=True)
class LongRopeParams:
    """LongRoPE (Ding et al., 2024): per-frequency divisors, short up to the original length."""

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float | None = None
    attention_factor: float | None = None


@dataclass(frozen=True)
class Llama3Params:
    """Llama 3.1's frequency bands."""

    factor: float
    original_max_position_embeddings: int
    low_freq_factor: float
    high_freq_factor: float


@dataclass(frozen=True)
class ProportionalParams:
    """Gemma 4's proportional RoPE: the first ``partial_rotary_factor`` of the frequencies."""

    factor: float | None = None
    partial_rotary_factor: float | None = None


#: Scaling type → its frozen parameter class.
ROPE_PARAMETER_CLASSES: dict[str, type] = {
    "linear": LinearParams,
    "dynamic": DynamicParams,
    "yarn": YarnParams,
    "longrope": LongRopeParams,
    "llama3": Llama3Params,
    "proportional": ProportionalParams,
}

#: ``{type: (required, optional)}`` parameter names, from the classes (yarn's and llama3's
#: ``original_max_position_embeddings`` and dynamic's are required here: transformers would
#: otherwise take it from the model config, which posenc reads in :mod:`posenc.hf_config`).
ROPE_PARAMETER_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    t: _param_keys(c) for t, c in ROPE_PARAMETER_CLASSES.items()
}
_REQUIRED: dict[str, tuple[str, ...]] = {t: k[0] for t, k in ROPE_PARAMETER_KEYS.items()}


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE scaling scheme, with the parameter names of transformers' ``rope_parameters``.

    Only the parameters of the chosen ``type`` are read; see the module docstring for where
    posenc takes a value that transformers would read from the model config.

    Attributes:
        type: ``linear``, ``dynamic``, ``yarn``, ``longrope`` or ``llama3``.
        factor: context extension factor (all types; optional for ``longrope`` when
            ``attention_factor`` is given).
        original_max_position_embeddings: the pretraining context length. ``dynamic`` rescales the
            base and ``longrope`` switches to ``long_factor`` only when ``max(positions) + 1``
            exceeds it; ``yarn`` and ``llama3`` use it to place their frequency bands.
        beta_fast: YaRN: rotations at which extrapolation ends (default 32).
        beta_slow: YaRN: rotations at which interpolation begins (default 1).
        mscale: YaRN (DeepSeek): numerator ``mscale`` of the attention factor.
        mscale_all_dim: YaRN (DeepSeek): denominator ``mscale`` of the attention factor.
        attention_factor: YaRN and LongRoPE: explicit attention scaling (else derived from
            ``factor``).
        low_freq_factor: Llama 3: wavelengths above ``original / low_freq_factor`` are divided
            by ``factor``.
        high_freq_factor: Llama 3: wavelengths below ``original / high_freq_factor`` are kept.
        short_factor: LongRoPE: ``R/2`` per-frequency divisors used up to the original length.
        long_factor: LongRoPE: ``R/2`` per-frequency divisors used beyond the original length.
        truncate: YaRN: round the correction range outwards to whole dimensions (default True).
        partial_rotary_factor: proportional (Gemma 4): the fraction of the head's frequencies
            that rotate (default 1); the others are 0.
    """

    type: ScalingType
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    truncate: bool | None = None
    partial_rotary_factor: float | None = None

    def __post_init__(self) -> None:
        _validate_scaling(self)

    def params(self) -> Any:
        """The frozen parameter class of this type (:data:`ROPE_PARAMETER_CLASSES`), holding
        only that type's parameters."""
        cls = ROPE_PARAMETER_CLASSES[self.type]
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RopeScaling:
        """Build from a transformers-style ``rope_parameters`` / ``rope_scaling`` mapping.

        ``rope_type`` is accepted as an alias of ``type``. ``rope_theta`` and (except for
        ``proportional``) ``partial_rotary_factor`` are not scaling parameters here (they are
        ``base`` and ``rotary_dim``) and are rejected like any other unknown key.

        Raises:
            InvalidArgument: unknown keys, a missing or unknown type, a missing required parameter
                (``field`` is e.g. ``scaling.factor``) or a value out of range.
        """
        if not isinstance(d, Mapping):
            raise InvalidArgument(
                f"scaling must be an object, got {type(d).__name__}", field="scaling"
            )
        params = dict(d)
        if "type" in params and "rope_type" in params and params["type"] != params["rope_type"]:
            raise InvalidArgument(
                f"scaling.type {params['type']!r} and scaling.rope_type {params['rope_type']!r} "
                "disagree; give one of them",
                field="scaling.type",
            )
        if "rope_type" in params:
            params["type"] = params.pop("rope_type")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise InvalidArgument(
                f"unknown scaling parameter(s) {unknown}; allowed: {sorted(known)} "
                "(rope_type is accepted as an alias of type)",
                field=f"scaling.{unknown[0]}",
            )
        for name in ("short_factor", "long_factor"):
            value = params.get(name)
            if value is not None:
                if isinstance(value, str | bytes) or not isinstance(value, Sequence | Tensor):
                    raise InvalidArgument(
                        f"scaling.{name} must be a list of numbers, got {type(value).__name__}",
                        field=f"scaling.{name}",
                    )
                params[name] = tuple(float(v) for v in value)
        return cls(**params)


@dataclass(frozen=True)
class RopeTables:
    """The tables :func:`rope_cos_sin` returns.

    Attributes:
        cos: ``(T, R)`` cosines, attention scaling already applied, in the requested dtype.
        sin: ``(T, R)`` sines, attention scaling already applied.
        inv_freq: ``(R/2,)`` inverse frequencies after scaling.
        attention_scaling: the factor ``cos`` and ``sin`` were multiplied by (1.0 unless ``yarn``
            or ``longrope``).
    """

    cos: Tensor
    sin: Tensor
    inv_freq: Tensor
    attention_scaling: float


def _validate_scaling(s: RopeScaling) -> None:
    """Check the parameters of ``s`` for its type; raise InvalidArgument naming the field."""
    check_choice("scaling.type", s.type, SCALING_TYPES)
    for name in _REQUIRED[s.type]:
        if getattr(s, name) is None:
            raise InvalidArgument(
                f"scaling.{name} is required for {s.type} scaling", field=f"scaling.{name}"
            )
    if s.type == "longrope" and s.factor is None and s.attention_factor is None:
        raise InvalidArgument(
            "scaling.factor is required for longrope scaling unless scaling.attention_factor is "
            "given (transformers uses max_position_embeddings / original_max_position_embeddings; "
            "pass that ratio as factor)",
            field="scaling.factor",
        )
    for name in (
        "factor",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "low_freq_factor",
        "high_freq_factor",
    ):
        value = getattr(s, name)
        if value is not None:
            check_finite(f"scaling.{name}", value, greater_than=0)
    for name in ("mscale", "mscale_all_dim"):
        value = getattr(s, name)
        if value is not None:
            check_finite(f"scaling.{name}", value)
    if s.partial_rotary_factor is not None:
        if s.type != "proportional":
            raise InvalidArgument(
                f"scaling.partial_rotary_factor is a parameter of proportional scaling only, "
                f"got it with {s.type}; give the rotated fraction as rotary_dim",
                field="scaling.partial_rotary_factor",
            )
        check_finite("scaling.partial_rotary_factor", s.partial_rotary_factor, greater_than=0)
        if s.partial_rotary_factor > 1:
            raise InvalidArgument(
                f"scaling.partial_rotary_factor must be in (0, 1], got {s.partial_rotary_factor}",
                field="scaling.partial_rotary_factor",
            )
    omax = s.original_max_position_embeddings
    if omax is not None:
        check_int_at_least("scaling.original_max_position_embeddings", omax, 1, noun="an integer")
    if s.truncate is not None and not isinstance(s.truncate, bool):
        raise InvalidArgument(
            f"scaling.truncate must be true or false, got {s.truncate!r}", field="scaling.truncate"
        )
    for name in ("short_factor", "long_factor"):
        values = getattr(s, name)
        if values is None:
            continue
        for i, v in enumerate(values):
            check_finite(f"scaling.{name}[{i}]", v, greater_than=0, field=f"scaling.{name}")
    if s.type == "yarn":
        fast = s.beta_fast if s.beta_fast is not None else _YARN_BETA_FAST
        slow = s.beta_slow if s.beta_slow is not None else _YARN_BETA_SLOW
        if fast < slow:
            raise InvalidArgument(
                f"scaling.beta_fast must be >= scaling.beta_slow, got beta_fast={fast} and "
                f"beta_slow={slow}",
                field="scaling.beta_fast",
            )
    # equal factors (Llama 4 Scout publishes 1.0 and 1.0) leave no medium band: transformers
    # warns and runs them; only a reversed band is refused
    if s.type == "llama3" and s.high_freq_factor < s.low_freq_factor:  # type: ignore[operator]
        raise InvalidArgument(
            f"scaling.high_freq_factor must be >= scaling.low_freq_factor, got "
            f"high_freq_factor={s.high_freq_factor} and low_freq_factor={s.low_freq_factor}",
            field="scaling.high_freq_factor",
        )


def _check_rotary_dim(rotary_dim: Any, field: str = "rotary_dim") -> None:
    check_int(field, rotary_dim)
    if rotary_dim <= 0 or rotary_dim % 2:
        raise InvalidArgument(
            f"{field} must be an even integer >= 2, got {rotary_dim}", field=field
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

    beta_fast = s.beta_fast if s.beta_fast is not None else _YARN_BETA_FAST
    beta_slow = s.beta_slow if s.beta_slow is not None else _YARN_BETA_SLOW

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


def _llama3(base_inv_freq: Tensor, s: Llama3Params) -> Tensor:
    """Llama 3.1 band rescaling as transformers' ``_compute_llama3_parameters``, in float64."""
    factor = float(s.factor)
    low_ff = float(s.low_freq_factor)
    high_ff = float(s.high_freq_factor)
    old_context_len = float(s.original_max_position_embeddings)
    low_freq_wavelen = old_context_len / low_ff
    high_freq_wavelen = old_context_len / high_ff

    wavelen = 2 * math.pi / base_inv_freq  # (R/2,)
    inv_freq = torch.where(wavelen > low_freq_wavelen, base_inv_freq / factor, base_inv_freq)
    smooth = (old_context_len / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    if high_ff == low_ff:  # no medium band (a 0/0 smooth factor): keep the two outer bands
        return inv_freq
    return torch.where(is_medium, smoothed, inv_freq)


# Each scaling type: ``(base_inv_freq (R/2,), R, base, scaling, seq_len) -> (inv_freq, scale)``.
RopeInitFn = Callable[[Tensor, int, float, Any, "int | None"], tuple[Tensor, float]]


def _linear_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: LinearParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Position interpolation: ``ω_i / factor`` (``_compute_linear_scaling_rope_parameters``)."""
    return inv_freq / float(s.factor), 1.0


def _dynamic_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: DynamicParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Dynamic NTK (``_compute_dynamic_ntk_parameters``): the base grows above ``L0``."""
    if rotary_dim < 4:
        raise InvalidArgument(
            f"dynamic scaling needs rotary_dim >= 4 (the base exponent is R/(R-2)), "
            f"got {rotary_dim}",
            field="rotary_dim",
        )
    omax = int(s.original_max_position_embeddings)
    length = max(seq_len if seq_len is not None else omax, omax)
    if length == omax:
        return inv_freq, 1.0
    factor = float(s.factor)
    new_base = base * ((factor * length / omax) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (new_base**exponents), 1.0


def _yarn_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: YarnParams, seq_len: int | None
) -> tuple[Tensor, float]:
    return _yarn(inv_freq, rotary_dim, base, s)


def _longrope_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: LongRopeParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """LongRoPE (``_compute_longrope_parameters``): per-frequency divisors, short or long."""
    half = rotary_dim // 2
    for name in ("short_factor", "long_factor"):
        n = len(getattr(s, name))
        if n != half:
            raise InvalidArgument(
                f"scaling.{name} must have rotary_dim/2 = {half} entries, got {n}",
                field=f"scaling.{name}",
            )
    omax = int(s.original_max_position_embeddings)
    if s.attention_factor is not None:
        attention_factor = float(s.attention_factor)
    elif s.factor <= 1.0:  # type: ignore[operator]
        attention_factor = 1.0
    else:
        attention_factor = math.sqrt(1 + math.log(s.factor) / math.log(omax))  # type: ignore[arg-type]
    use_long = seq_len is not None and seq_len > omax
    ext = s.long_factor if use_long else s.short_factor
    ext_factors = torch.tensor(ext, dtype=torch.float64)  # (R/2,)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (ext_factors * base**exponents), attention_factor


def _llama3_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: Llama3Params, seq_len: int | None
) -> tuple[Tensor, float]:
    return _llama3(inv_freq, s), 1.0


def _proportional_init(
    inv_freq: Tensor, rotary_dim: int, base: float, s: ProportionalParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Gemma 4's proportional RoPE (``_compute_proportional_rope_parameters``).

    ``rotary_dim`` is the whole head ``Dh``: the first ``int(p·Dh // 2)`` frequencies are
    ``base^(−2i/Dh)`` and the remaining ones 0, all divided by ``factor`` (default 1).
    """
    p = 1.0 if s.partial_rotary_factor is None else float(s.partial_rotary_factor)
    rope_angles = int(p * rotary_dim // 2)
    out = inv_freq.clone()
    out[rope_angles:] = 0.0
    factor = 1.0 if s.factor is None else float(s.factor)
    return out / factor, 1.0


#: Scaling type → function computing ``(inv_freq, attention_scaling)`` in float64, as
#: transformers' ``ROPE_INIT_FUNCTIONS``.
ROPE_INIT_FUNCTIONS: dict[str, RopeInitFn] = {
    "linear": _linear_init,
    "dynamic": _dynamic_init,
    "yarn": _yarn_init,
    "longrope": _longrope_init,
    "llama3": _llama3_init,
    "proportional": _proportional_init,
}


def rope_inv_freq(
    rotary_dim: int,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    *,
    seq_len: int | None = None,
    max_elements: int | None = None,
) -> tuple[Tensor, float]:
    """Inverse frequencies ``ω_i`` and attention scaling, as transformers' ROPE_INIT_FUNCTIONS.

    Unscaled, ``ω_i = base^(−2i/R)`` for ``i < R/2`` (RoFormer). The scaling types follow
    transformers' ``modeling_rope_utils.py`` formula for formula, evaluated in float64.

    Args:
        rotary_dim: ``R``, the number of rotated channels (even, ≥ 2).
        base: ``rope_theta``.
        scaling: the scaling scheme, or None for plain RoPE.
        seq_len: the sequence length ``max(positions) + 1``. ``dynamic`` rescales the base as
            ``base · (factor·L/L0 − (factor − 1))^(R/(R−2))`` only when ``L = seq_len`` exceeds
            ``L0 = original_max_position_embeddings``; ``longrope`` uses ``long_factor`` only
            then, else ``short_factor``. None means "within the original length". Ignored by the
            other types.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(inv_freq, attention_scaling)``: ``(R/2,)`` float64 on the CPU, and a float.

    Raises:
        InvalidArgument: odd or non-positive ``rotary_dim``, ``base ≤ 1``, ``short_factor`` /
            ``long_factor`` not of length ``R/2``, ``dynamic`` with ``R = 2``, a bad ``seq_len``.
    """
    _check_rotary_dim(rotary_dim)
    check_elements(
        rotary_dim // 2, what=f"inv_freq (R/2={rotary_dim // 2})", max_elements=max_elements
    )
    check_finite("base", base, greater_than=1)
    if seq_len is not None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise InvalidArgument(
            f"scaling must be a RopeScaling or None, got {type(scaling).__name__}", field="scaling"
        )
    base = float(base)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    inv_freq = 1.0 / (base**exponents)
    if scaling is None:
        return inv_freq, 1.0

    return ROPE_INIT_FUNCTIONS[scaling.type](inv_freq, rotary_dim, base, scaling.params(), seq_len)


def _positions_tensor(positions: Sequence[int] | Tensor | None, seq_len: int | None) -> Tensor:
    """Exactly one of ``positions`` / ``seq_len`` → a ``(T,)`` int64 CPU tensor of positions."""
    if (positions is None) == (seq_len is None):
        raise InvalidArgument(
            "give exactly one of positions or seq_len"
            f" (got positions={'None' if positions is None else '...'}, seq_len={seq_len!r})",
            field="positions",
        )
    if seq_len is not None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
        return torch.arange(seq_len, dtype=torch.int64)
    if isinstance(positions, Tensor):
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise InvalidArgument(
                f"positions must be integers, got a tensor of {positions.dtype}", field="positions"
            )
        if positions.dim() != 1:
            raise InvalidArgument(
                f"positions must be 1-D, got shape {tuple(positions.shape)}", field="positions"
            )
        pos = positions.detach().to(device="cpu", dtype=torch.int64)
    else:
        values = list(positions)  # type: ignore[arg-type]
        for i, p in enumerate(values):
            if not isinstance(p, int) or isinstance(p, bool):
                raise InvalidArgument(
                    f"positions[{i}] must be an integer, got {p!r}", field=f"positions[{i}]"
                )
        pos = torch.tensor(values, dtype=torch.int64)
    if pos.numel() == 0:
        raise InvalidArgument("positions must not be empty", field="positions")
    low = int(pos.min())
    if low < 0:
        (i,) = first_true(pos < 0)
        raise InvalidArgument(
            f"positions must be >= 0, got positions[{i}] = {int(pos[i])}", field=f"positions[{i}]"
        )
    return pos


def _tables(
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float,
    layout: RopeLayout,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor]:
    """cos and sin ``(..., R)`` for integer ``positions (...)``, in float64 until the final cast."""
    angles = positions.to(torch.float64)[..., None] * inv_freq.to(  # (..., R/2)
        device=positions.device, dtype=torch.float64
    )
    half = angles.shape[-1]
    # cos and sin of each angle once, cast straight into both of its places:
    # half: [θ_0 … θ_{R/2−1} | same]; interleaved: θ_0 θ_0 θ_1 θ_1 …
    shape = (*angles.shape[:-1], 2 * half)
    cos = torch.empty(shape, dtype=dtype, device=angles.device)  # (..., R)
    sin = torch.empty(shape, dtype=dtype, device=angles.device)  # (..., R)
    values = torch.empty_like(angles)  # (..., R/2) float64
    for table, func in ((cos, torch.cos), (sin, torch.sin)):
        func(angles, out=values)
        if attention_scaling != 1.0:  # x * 1.0 is x exactly: skip the pass
            values.mul_(attention_scaling)
        if layout == "half":
            table[..., :half].copy_(values)
            table[..., half:].copy_(values)
        else:
            pairs = table.view(*table.shape[:-1], half, 2)  # (..., R/2, 2)
            pairs[..., 0].copy_(values)
            pairs[..., 1].copy_(values)
    return cos, sin


def rope_cos_sin(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    rotary_dim: int,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> RopeTables:
    """RoPE cos/sin tables for the given positions, attention scaling included.

    ``half`` (GPT-NeoX, Llama; transformers' ``LlamaRotaryEmbedding``): ``cos = cat(cos θ, cos θ)``.
    ``interleaved`` (GPT-J, RoFormer): each angle repeated twice in place. ``θ[t, i] =
    positions[t] · inv_freq[i]`` with ``inv_freq`` from :func:`rope_inv_freq`, given
    ``seq_len = max(positions) + 1``.

    Args:
        positions: ``(T,)`` integers ≥ 0 (a sequence or a 1-D integer tensor); or
        seq_len: ``T``, meaning positions ``0 … T−1``. Exactly one of the two.
        rotary_dim: ``R`` (even, ≥ 2).
        base: ``rope_theta``.
        layout: ``"half"`` or ``"interleaved"``.
        scaling: the scaling scheme, or None.
        device: where the tables are computed and returned (None: CPU).
        dtype: the dtype of the returned tensors (all arithmetic is float64 before it).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        :class:`RopeTables` with ``cos`` and ``sin`` ``(T, R)``, ``inv_freq`` ``(R/2,)``, all in
        ``dtype`` on ``device``, and the attention scaling.

    Raises:
        InvalidArgument: see :func:`rope_inv_freq`; also a bad layout, negative or non-integer
            positions, or both / neither of ``positions`` and ``seq_len``.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    _check_rotary_dim(rotary_dim)
    count = sequence_length(positions, seq_len)
    if count is not None:  # cos + sin (T, R) and inv_freq (R/2,), before anything exists
        check_elements(
            2 * count * rotary_dim + rotary_dim // 2,
            what=f"the RoPE tables (T={count}, R={rotary_dim})",
            max_elements=max_elements,
        )
    pos = _positions_tensor(positions, seq_len)
    length = int(pos.max()) + 1
    inv_freq, attention_scaling = rope_inv_freq(
        rotary_dim, base, scaling, seq_len=length, max_elements=max_elements
    )
    dev = torch.device("cpu") if device is None else torch.device(device)
    cos, sin = _tables(pos.to(dev), inv_freq.to(dev), attention_scaling, layout, dtype)
    return RopeTables(
        cos=cos,
        sin=sin,
        inv_freq=inv_freq.to(device=dev, dtype=dtype),
        attention_scaling=attention_scaling,
    )


def rotate_half(x: Tensor) -> Tensor:
    """``[x1 | x2] → [−x2 | x1]`` on the last dim (GPT-NeoX, Llama)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: Tensor) -> Tensor:
    """``(x0, x1, x2, x3, …) → (−x1, x0, −x3, x2, …)`` on the last dim (GPT-J, RoFormer)."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x_odd, x_even), dim=-1).flatten(-2)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, *, layout: RopeLayout = "half") -> Tensor:
    """Rotate the first ``R`` channels of each head of ``x``; leave the other ``Dh − R``.

    ``out_rot = x_rot · cos + rotate(x_rot) · sin`` with ``rotate_half`` (``half``) or
    ``rotate_every_two`` (``interleaved``): transformers' ``apply_rotary_pos_emb`` of Llama and
    of GPT-J, with GPT-NeoX's partial rotary (``rotary_pct``). The product is taken in ``x``'s
    dtype (cos and sin are cast to it, as transformers does).

    Args:
        x: ``(B, H, T, Dh)`` queries or keys.
        cos: ``(T, R)``, or ``(B, T, R)`` for per-row positions, from :func:`rope_cos_sin` with
            the same ``layout``.
        sin: same shape as ``cos``.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        ``(B, H, T, Dh)``, same dtype as ``x``.

    Raises:
        InvalidArgument: shapes that do not fit, an odd ``R``, or ``R > Dh``.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    if x.dim() != 4:
        raise InvalidArgument(f"x must be (B, H, T, Dh), got shape {tuple(x.shape)}", field="x")
    if cos.shape != sin.shape:
        raise InvalidArgument(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}",
            field="sin",
        )
    if cos.dim() not in (2, 3):
        raise InvalidArgument(
            f"cos must be (T, R) or (B, T, R), got shape {tuple(cos.shape)}", field="cos"
        )
    head_dim, rotary_dim, t = x.shape[-1], cos.shape[-1], x.shape[-2]
    if rotary_dim % 2 or rotary_dim == 0:
        raise InvalidArgument(f"rotary_dim must be even and > 0, got {rotary_dim}", field="cos")
    if rotary_dim > head_dim:
        raise InvalidArgument(
            f"rotary_dim must be <= head_dim, got rotary_dim={rotary_dim} and head_dim={head_dim}",
            field="rotary_dim",
        )
    if cos.shape[-2] != t:
        raise InvalidArgument(f"cos has {cos.shape[-2]} positions but x has T = {t}", field="cos")
    if cos.dim() == 3:
        if cos.shape[0] not in (1, x.shape[0]):
            raise InvalidArgument(
                f"cos has batch {cos.shape[0]} but x has B = {x.shape[0]}", field="cos"
            )
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, R)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]  # (B, H, T, R), (B, H, T, Dh − R)
    rotate = rotate_half if layout == "half" else rotate_every_two
    out = x_rot * cos + rotate(x_rot) * sin
    return torch.cat((out, x_pass), dim=-1) if rotary_dim < head_dim else out


# ---------------------------------------------------------------------------------------------
# Multimodal RoPE (M-RoPE) tables
# ---------------------------------------------------------------------------------------------
#
# Multimodal RoPE (M-RoPE) tables: three position rows, one per axis, over frequency sections.
#
# Qwen2-VL (Wang et al., 2024, "Qwen2-VL") gives each token three positions (temporal, height,
# width) and splits the ``R/2`` rotary frequencies into ``mrope_section = [s_t, s_h, s_w]``
# (``s_t + s_h + s_w = R/2``): frequency ``j`` turns with the position of the axis that owns it.
#
# - contiguous (Qwen2-VL, Qwen2.5-VL; transformers' ``recomposition_frequencies`` of
#   ``Qwen2_5_VLRotaryEmbedding``): the first ``s_t`` frequencies follow the temporal row, the next
#   ``s_h`` the height row, the last ``s_w`` the width row;
# - interleaved (Qwen3-VL; ``Qwen3VLTextRotaryEmbedding``): frequency ``j`` follows the height row
#   when ``j ≡ 1 (mod 3)`` and ``j < 3·s_h``, the width row when ``j ≡ 2 (mod 3)`` and
#   ``j < 3·s_w``, else the temporal row.
#
# The chosen angles are then laid out as plain RoPE (``cat(θ, θ)`` for ``half``). Angles are float64
# until the final cast, as above; with three equal rows the tables equal
# :func:`rope_cos_sin`.
#
# Notation: ``T`` sequence length, ``R`` rotary dimension.


def check_mrope_section(rotary_dim: int, mrope_section: Sequence[int]) -> list[int]:
    """``mrope_section`` as a list, checked against ``rotary_dim`` (numbers only).

    Raises:
        InvalidArgument: not three non-negative ints, or a sum other than ``R/2``.
    """
    section = list(mrope_section)
    half = rotary_dim // 2
    if len(section) != 3 or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in section
    ):
        raise InvalidArgument(
            f"mrope_section must be three ints >= 0 (temporal, height, width), got {section!r}",
            field="mrope_section",
        )
    if sum(section) != half:
        raise InvalidArgument(
            f"mrope_section must sum to rotary_dim/2 = {half}, got {section} (sum {sum(section)})",
            field="mrope_section",
        )
    return section


def mrope_channel_axes(
    rotary_dim: int, mrope_section: Sequence[int], *, interleaved: bool = False
) -> Tensor:
    """Which position row (0 temporal, 1 height, 2 width) drives each of the ``R/2``
    frequencies: ``(R/2,)`` int64.

    Raises:
        InvalidArgument: not three non-negative ints, or a sum other than ``R/2``.
    """
    section = check_mrope_section(rotary_dim, mrope_section)
    half = rotary_dim // 2
    if not interleaved:
        return torch.cat([torch.full((s,), i, dtype=torch.int64) for i, s in enumerate(section)])
    axes = torch.zeros(half, dtype=torch.int64)
    for axis in (1, 2):
        axes[axis : section[axis] * 3 : 3] = axis
    return axes


def mrope_cos_sin(
    positions: Sequence[Sequence[int]] | Tensor,
    *,
    rotary_dim: int,
    mrope_section: Sequence[int],
    interleaved: bool = False,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> RopeTables:
    """M-RoPE cos/sin tables, attention scaling included.

    Args:
        positions: ``(3, T)`` integers ≥ 0: temporal, height and width rows.
        rotary_dim: ``R`` (even).
        mrope_section: ``[s_t, s_h, s_w]`` summing to ``R/2``.
        interleaved: Qwen3-VL's interleaving (else Qwen2-VL's contiguous sections).
        base, layout, scaling, device, dtype: as :func:`posenc.rope.rope_cos_sin`; a
            length-dependent scaling sees ``max(positions) + 1``.

    Returns:
        :class:`~posenc.rope.RopeTables`: ``cos``, ``sin`` ``(T, R)``, ``inv_freq`` ``(R/2,)``.

    Raises:
        InvalidArgument: positions not ``(3, T)`` non-negative integers; a bad section; see
            :func:`posenc.rope.rope_inv_freq`.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    if isinstance(positions, Tensor):
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise InvalidArgument(
                f"positions must be integers, got a tensor of {positions.dtype}", field="positions"
            )
        pos = positions.detach().to("cpu", torch.int64)
    else:
        rows = [list(r) for r in positions]
        for i, row in enumerate(rows):
            for j, p in enumerate(row):
                if not isinstance(p, int) or isinstance(p, bool):
                    raise InvalidArgument(
                        f"positions[{i}][{j}] must be an integer, got {p!r}",
                        field=f"positions[{i}][{j}]",
                    )
        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise InvalidArgument(
                f"the three position rows must have the same length, got {sorted(lengths)}",
                field="positions",
            )
        pos = torch.tensor(rows, dtype=torch.int64)
    if pos.dim() != 2 or pos.shape[0] != 3 or pos.shape[1] == 0:
        raise InvalidArgument(
            f"M-RoPE positions must be (3, T) with T >= 1 (temporal, height, width rows), got "
            f"shape {tuple(pos.shape)}",
            field="positions",
        )
    if int(pos.min()) < 0:
        raise InvalidArgument(f"positions must be >= 0, got {int(pos.min())}", field="positions")
    axes = mrope_channel_axes(rotary_dim, mrope_section, interleaved=interleaved)
    inv_freq, attention_scaling = rope_inv_freq(
        rotary_dim, base, scaling, seq_len=int(pos.max()) + 1
    )
    dev = torch.device("cpu") if device is None else torch.device(device)
    angles = pos.to(dev, torch.float64)[..., None] * inv_freq.to(dev)  # (3, T, R/2)
    index = axes.to(dev)[None, None, :].expand(1, pos.shape[1], -1)  # (1, T, R/2)
    chosen = angles.gather(0, index)[0]  # (T, R/2): angle of the axis owning each frequency
    if layout == "half":
        full = torch.cat((chosen, chosen), dim=-1)  # (T, R)
    else:
        full = chosen.repeat_interleave(2, dim=-1)  # (T, R)
    return RopeTables(
        cos=(full.cos() * attention_scaling).to(dtype),
        sin=(full.sin() * attention_scaling).to(dtype),
        inv_freq=inv_freq.to(device=dev, dtype=dtype),
        attention_scaling=attention_scaling,
    )


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of queries and keys, built on :func:`rope_cos_sin`.

    RoFormer (Su et al., 2021), with GPT-NeoX's partial rotary and the scaling types of
    transformers' ``ROPE_INIT_FUNCTIONS``. For the static types (none, ``linear``, ``yarn``,
    ``llama3``) the tables for positions ``0 … max_seq_len − 1`` are cached in :meth:`rope_init`
    as non-persistent buffers; ``dynamic`` and ``longrope`` depend on ``max(positions) + 1`` and
    positions beyond the cache are computed on the fly (stateless, unlike transformers' dynamic
    update which keeps the largest length seen).

    Args:
        head_dim: ``Dh`` (even).
        rotary_dim: ``R`` (even, ≤ ``Dh``); None means ``Dh``.
        base: ``rope_theta``.
        layout: ``"half"`` or ``"interleaved"``.
        scaling: the scaling scheme, or None.
        max_seq_len: number of cached positions.
    """

    cos: Tensor  # (max_seq_len, R) buffer
    sin: Tensor  # (max_seq_len, R) buffer

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        layout: RopeLayout = "half",
        scaling: RopeScaling | None = None,
        max_seq_len: int = 4096,
    ) -> None:
        super().__init__()
        _check_rotary_dim(head_dim, "head_dim")
        rotary_dim = head_dim if rotary_dim is None else rotary_dim
        _check_rotary_dim(rotary_dim)
        if rotary_dim > head_dim:
            raise InvalidArgument(
                f"rotary_dim must be <= head_dim, got rotary_dim={rotary_dim} and "
                f"head_dim={head_dim}",
                field="rotary_dim",
            )
        check_choice("layout", layout, ROPE_LAYOUTS)
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.base = base
        self.layout: RopeLayout = layout
        self.scaling = scaling
        self.max_seq_len = max_seq_len
        self.rope_init()

    def rope_init(self) -> None:
        """(Re)build the cached tables ``cos``, ``sin`` ``(max_seq_len, R)`` in float32."""
        tables = rope_cos_sin(
            seq_len=self.max_seq_len,
            rotary_dim=self.rotary_dim,
            base=self.base,
            layout=self.layout,
            scaling=self.scaling,
        )
        self.attention_scaling = tables.attention_scaling
        self.register_buffer("cos", tables.cos, persistent=False)
        self.register_buffer("sin", tables.sin, persistent=False)

    def tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin ``(..., R)`` for integer ``positions`` of shape ``(T,)`` or ``(B, T)``."""
        length = int(positions.max()) + 1
        length_dependent = self.scaling is not None and self.scaling.type in ("dynamic", "longrope")
        if not length_dependent and length <= self.max_seq_len:
            idx = positions.to(device=self.cos.device, dtype=torch.int64)
            return self.cos[idx], self.sin[idx]
        inv_freq, scale = rope_inv_freq(self.rotary_dim, self.base, self.scaling, seq_len=length)
        return _tables(positions.to(torch.int64), inv_freq, scale, self.layout, torch.float32)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate ``x`` ``(B, H, T, Dh)`` at ``positions`` ``(T,)`` or ``(B, T)`` (default 0…T−1)."""
        if positions is None:
            positions = torch.arange(x.shape[-2], device=x.device)
        _positions_tensor(positions.reshape(-1), None)  # validates: integers >= 0, not empty
        cos, sin = self.tables(positions)
        return apply_rope(x, cos, sin, layout=self.layout)


# ---------------------------------------------------------------------------------------------
# The rope endpoint kind (posenc.kinds): RoPE and M-RoPE tables, with presets and configs
# ---------------------------------------------------------------------------------------------


def _mrope_rows(p: Mapping[str, Any]) -> list[list[int]] | None:
    """The ``(3, T)`` M-RoPE position rows of resolved fields, or None for plain RoPE: three
    given rows, or with ``mrope_section`` one row (or ``seq_len``) as text on all three axes, as
    transformers expands text positions."""
    rows = p["positions"]
    if rows is not None and isinstance(rows[0], list):
        return [list(r) for r in rows]
    if p["mrope_section"] is None:
        return None
    text = list(rows) if rows is not None else list(range(int(p["seq_len"])))
    return [text, text, text]


def _rope_lengths(p: Mapping[str, Any]) -> tuple[int, int]:
    """``(T, max(position) + 1)`` of resolved fields, from the numbers."""
    rows = p["positions"]
    if rows is None:
        return int(p["seq_len"]), int(p["seq_len"])
    if isinstance(rows[0], list):
        return len(rows[0]), max(max(r) for r in rows) + 1
    return len(rows), max(rows) + 1


def _rope_check(p: Mapping[str, Any]) -> None:
    check_seq_len_or_positions(p.get("seq_len"), p.get("positions"))
    head_dim, rotary_dim = p.get("head_dim"), p.get("rotary_dim")
    if head_dim is not None and rotary_dim is not None and rotary_dim > head_dim:
        raise InvalidArgument(
            f"rotary_dim must be <= head_dim, got rotary_dim {rotary_dim} > head_dim {head_dim}",
            field="rotary_dim",
        )


def _rope_complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """``rotary_dim`` defaults to ``head_dim``; the M-RoPE fields and the scaling are checked
    (numbers only: nothing of the table's size is made here)."""
    p = {**p, "rotary_dim": p["head_dim"] if p["rotary_dim"] is None else p["rotary_dim"]}
    rows = p["positions"]
    if rows is not None and isinstance(rows[0], list) and p["mrope_section"] is None:
        raise InvalidArgument(
            "positions given as three rows (temporal, height, width) need mrope_section "
            "(three ints summing to rotary_dim/2), or a config that has one",
            field="mrope_section",
        )
    if p["mrope_section"] is not None:
        check_mrope_section(p["rotary_dim"], p["mrope_section"])
    if p["scaling"] is not None:
        RopeScaling.from_dict(p["scaling"])
    if p["engine"] == "vllm":  # vLLM's defaults, and positions beyond its cache refused
        p = vllm_complete(p, _rope_lengths(p)[1] - 1)
    return p


def _vllm(p: Mapping[str, Any]) -> VllmRope | None:
    """vLLM's frequencies and magnitude for resolved fields with ``engine: vllm`` (or None)."""
    return vllm_for_fields(p) if p["engine"] == "vllm" else None


def _rope_scaling(p: Mapping[str, Any]) -> RopeScaling | None:
    return RopeScaling.from_dict(p["scaling"]) if p["scaling"] is not None else None


def _rope_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    seq_len, length = _rope_lengths(p)
    scaling = _rope_scaling(p)
    _inv_freq, attention_scaling = rope_inv_freq(
        p["rotary_dim"], p["base"], scaling, seq_len=length
    )
    vllm = _vllm(p)
    if vllm is not None:
        attention_scaling = vllm.attention_scaling
    meta = {
        "kind": "rope",
        "seq_len": seq_len,
        **{k: p[k] for k in ("head_dim", "rotary_dim", "base", "layout", "scaling", "preset")},
        "rope_type": scaling.type if scaling is not None else "default",
        "attention_scaling": attention_scaling,
        "layer_type": p["layer_type"],
        "dtype": p["dtype"],
        **{k: p[k] for k in ("config_model_type", "rope_type") if k in p},
    }
    if _mrope_rows(p) is not None:
        meta["mrope_section"] = p["mrope_section"]
        meta["mrope_interleaved"] = bool(p["mrope_interleaved"])
    meta["engine"] = p["engine"]
    if vllm is not None:
        meta.update(max_model_len=p["vllm_max_model_len"], vllm_rope=vllm.rope_type)
        meta["vllm_rows"] = vllm.rows if vllm.rows < 2**53 else None  # None: no known limit
    return meta


def _table_arguments(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    """The arguments every RoPE table function takes, from resolved fields."""
    return dict(
        rotary_dim=p["rotary_dim"],
        base=p["base"],
        layout=p["layout"],
        scaling=_rope_scaling(p),
        device=ctx.device,
        dtype=ctx.dtype,
    )


def _rope_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    common = _table_arguments(p, ctx)
    rows = _mrope_rows(p)
    if rows is not None:
        tables = mrope_cos_sin(
            rows,
            mrope_section=p["mrope_section"],
            interleaved=bool(p["mrope_interleaved"]),
            **common,
        )
    else:
        vllm = _vllm(p)
        if vllm is not None:  # vLLM's angles and magnitude, exact in float64 as the default's
            pos = _positions_tensor(p["positions"], p["seq_len"]).to(ctx.device)
            inv = vllm.inv_freq.to(ctx.device)
            cos, sin = _tables(pos, inv, vllm.attention_scaling, p["layout"], ctx.dtype)
            return {"cos": cos, "sin": sin, "inv_freq": inv.to(ctx.dtype)}
        tables = rope_cos_sin(p["positions"], seq_len=p["seq_len"], **common)
    return {"cos": tables.cos, "sin": tables.sin, "inv_freq": tables.inv_freq}


def _rope_streams(p: Mapping[str, Any]) -> bool:
    """Row blocks are of 1-D positions; three rows of M-RoPE positions are computed whole."""
    return p["positions"] is None or not isinstance(p["positions"][0], list)


# float64 angles per piece of a RoPE block on the CPU: the scratch of a piece (512 KiB a buffer)
# comes from the heap and is reused, where a whole 8 MiB block's scratch was fresh memory
# faulted in for every table (as fast per angle: the cosines, not the memory, set the pace)
_ROPE_PIECE_ANGLES = 1 << 16


def rope_blocks(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    rotary_dim: int,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    which: str = "cos",
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    frequencies: tuple[Tensor, float] | None = None,
) -> TableBlocks:
    """The ``cos`` or ``sin`` table ``(T, R)`` of :func:`~posenc.rope.rope_cos_sin` in row blocks.

    Per block: angles ``θ = p·inv_freq`` ``(N, R/2)`` in float64 once, their cos (or sin) times
    the attention scaling, written into both halves (``half``) or both slots of each pair
    (``interleaved``) of ``out``, cast once. ``inv_freq`` and the scaling come from
    :func:`~posenc.rope.rope_inv_freq` with ``seq_len = max(positions) + 1``, as the whole
    table's do.

    Args:
        which: ``"cos"`` or ``"sin"``; the other arguments as :func:`~posenc.rope.rope_cos_sin`.
        frequencies: ``(inv_freq (R/2,), attention scaling)`` in place of ``rope_inv_freq``'s
            (another engine's rule, :mod:`posenc.rope_vllm`).

    Raises:
        InvalidArgument: as :func:`~posenc.rope.rope_cos_sin`; ``which`` not cos or sin.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("which", which, ("cos", "sin"))
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    if seq_len is not None and positions is None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
        held: Tensor | None = None
        total = length = int(seq_len)
    else:
        held = _positions_tensor(positions, seq_len)  # (T,) int64
        total, length = held.numel(), int(held.max()) + 1
        held = held.to(dev, torch.float64)
    if frequencies is None:
        inv_freq, attention_scaling = rope_inv_freq(rotary_dim, base, scaling, seq_len=length)
    else:
        inv_freq, attention_scaling = frequencies
    inv_freq = inv_freq.to(device=dev, dtype=torch.float64)  # (R/2,)
    func = torch.cos if which == "cos" else torch.sin
    scratch = Scratch(dev)
    half = rotary_dim // 2

    def fill_part(start: int, stop: int, out: Tensor) -> None:
        n = stop - start
        if held is None:
            pos = torch.arange(start, stop, dtype=torch.float64, device=dev)  # (N,)
        else:
            pos = held[start:stop]
        angles = torch.mul(pos[:, None], inv_freq[None, :], out=scratch.get("angles", (n, half)))
        values = func(angles, out=scratch.get("values", (n, half)))  # (N, R/2)
        if attention_scaling != 1.0:  # x * 1.0 is x: skip the pass
            values.mul_(attention_scaling)
        write_pair(out, values, values, layout == "interleaved")

    def fill(start: int, stop: int, out: Tensor) -> None:
        step = stop - start if dev.type != "cpu" else max(1, _ROPE_PIECE_ANGLES // half)
        for first in range(start, stop, step):
            last = min(stop, first + step)
            fill_part(first, last, out[first - start : last - start])

    return TableBlocks(which, (total, rotary_dim), dtype, fill, dev)


def _rope_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    kw = {**_table_arguments(p, ctx), "seq_len": p["seq_len"]}
    _seq_len, length = _rope_lengths(p)
    inv_freq, _ = rope_inv_freq(p["rotary_dim"], p["base"], kw["scaling"], seq_len=length)
    vllm = _vllm(p)
    if vllm is not None:
        inv_freq = vllm.inv_freq
        kw["frequencies"] = (vllm.inv_freq, vllm.attention_scaling)
    return {
        "cos": rope_blocks(p["positions"], which="cos", **kw),
        "sin": rope_blocks(p["positions"], which="sin", **kw),
        "inv_freq": tensor_blocks("inv_freq", inv_freq.to(device=ctx.device, dtype=ctx.dtype)),
    }


def _rope_from_config(
    positions: Any, given: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of a read config (:class:`posenc.hf_config.ModelPositions`, which the config
    reader above this module makes) for the layer type asked for."""
    layer_type = given.get("layer_type")
    fields = positions.rope_fields(layer_type)
    info = {"rope_type": positions.rope_for(layer_type).rope_type}
    if given.get("engine") == "vllm":  # what vLLM's model code passes get_rope
        deepseek = positions.model_type.removesuffix("_text") in DEEPSEEK_MODEL_TYPES
        info.update(config_max_position_embeddings=positions.max_position_embeddings)
        info.update(config_deepseek=deepseek)
    return fields, info


def _rope_follow(given: Mapping[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A preset's (or config's) rotated fraction follows a ``head_dim`` given without
    ``rotary_dim`` (GPT-NeoX's ``rotary_pct``, Phi's ``partial_rotary_factor``)."""
    head_dim, rotary_dim = defaults.get("head_dim"), defaults.get("rotary_dim")
    if (
        given.get("head_dim") is not None
        and given.get("rotary_dim") is None
        and head_dim
        and rotary_dim
    ):
        return {**defaults, "rotary_dim": int(given["head_dim"] * rotary_dim / head_dim)}
    return defaults


def _scaling_member(name: str, type_: Any, description: str, **bounds: Any) -> Any:
    return kinds.FieldSpec(name, type_, description, default=None, **bounds)


_SCALING_FIELD = kinds.FieldSpec(
    "scaling",
    "struct",
    "null or a scaling object, with the names of transformers' rope_parameters",
    default=None,
    sourced=True,
    schema_name="RopeScalingRequest",
    aliases=(("rope_type", "type"),),
    example={
        "type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    members=(
        kinds.FieldSpec(
            "type",
            "str",
            "linear, dynamic, yarn, longrope, llama3 or proportional (Gemma 4); rope_type is "
            "accepted as an alias",
            choices=SCALING_TYPES,
        ),
        _scaling_member("factor", "float", "context extension factor", exclusive_minimum=0),
        _scaling_member(
            "original_max_position_embeddings",
            "int",
            "the pretraining context length",
            minimum=1,
        ),
        _scaling_member("beta_fast", "float", "YaRN: rotations where extrapolation ends"),
        _scaling_member("beta_slow", "float", "YaRN: rotations where interpolation begins"),
        _scaling_member("mscale", "float", "YaRN (DeepSeek): numerator mscale"),
        _scaling_member("mscale_all_dim", "float", "YaRN (DeepSeek): denominator mscale"),
        _scaling_member(
            "attention_factor", "float", "YaRN, LongRoPE: attention scaling", exclusive_minimum=0
        ),
        _scaling_member(
            "low_freq_factor", "float", "Llama 3: low-frequency factor", exclusive_minimum=0
        ),
        _scaling_member(
            "high_freq_factor", "float", "Llama 3: high-frequency factor", exclusive_minimum=0
        ),
        _scaling_member("short_factor", "floats", "LongRoPE: R/2 divisors up to the original"),
        _scaling_member("long_factor", "floats", "LongRoPE: R/2 divisors beyond the original"),
        _scaling_member("truncate", "bool", "YaRN: round the correction range (default true)"),
        _scaling_member(
            "partial_rotary_factor",
            "float",
            "proportional only: the fraction of the head's frequencies that rotate",
            exclusive_minimum=0,
            maximum=1,
        ),
    ),
)

ROPE: kinds.Kind = kinds.Kind(
    name="rope",
    path="/v1/encodings/rope",
    tag="encodings",
    summary="Rotary position embedding tables",
    description="RoPE cos/sin tables with the scaling types of Hugging Face transformers "
    "(linear, dynamic, yarn, longrope, llama3, proportional); cos and sin include the "
    "attention scaling (`meta.attention_scaling`, with `meta.rope_type`). `config` takes a "
    "model's config.json (as transformers 5 reads it; `layer_type` for per-layer-type "
    "RoPE); `positions` as three rows with `mrope_section` gives M-RoPE (Qwen2-VL).",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T: positions 0 … T−1", None, minimum=1, example=8),
        kinds.FieldSpec(
            "positions",
            "ints",
            "explicit positions (ints ≥ 0) instead of seq_len; or three lists (temporal, "
            "height, width: (3, T)) with mrope_section",
            None,
            minimum=0,
            rows=3,
        ),
        kinds.FieldSpec(
            "head_dim",
            "int",
            "Dh, even (required unless a preset or config gives it)",
            minimum=2,
            multiple_of=2,
            sourced=True,
            example=16,
        ),
        kinds.FieldSpec(
            "rotary_dim",
            "int",
            "R, even ≤ head_dim (default head_dim)",
            None,
            minimum=2,
            multiple_of=2,
            sourced=True,
        ),
        kinds.FieldSpec(
            "base",
            "float",
            "rope_theta (default 10000 when neither preset nor config gives it)",
            10000.0,
            exclusive_minimum=0,
            sourced=True,
        ),
        kinds.FieldSpec(
            "layout",
            "str",
            "half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when "
            "neither preset nor config gives it",
            "half",
            choices=ROPE_LAYOUTS,
            sourced=True,
        ),
        _SCALING_FIELD,
        kinds.preset_field("rope"),
        kinds.CONFIG_FIELD,
        kinds.FieldSpec(
            "layer_type",
            "str",
            "for a config with RoPE parameters per layer type (Gemma 3: sliding_attention, "
            "full_attention): which type; required there, refused otherwise",
            None,
        ),
        kinds.FieldSpec(
            "mrope_section",
            "ints",
            "M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2",
            None,
            minimum=0,
            length=3,
            sourced=True,
        ),
        kinds.FieldSpec(
            "mrope_interleaved",
            "bool",
            "M-RoPE: false (default) Qwen2-VL's contiguous sections, true Qwen3-VL's interleaving",
            None,
            sourced=True,
        ),
        kinds.FieldSpec(
            "engine",
            "str",
            "whose tables: transformers (default) or vllm (what vLLM's get_rope builds from the "
            "same config: see docs/engines.md)",
            "transformers",
            choices=("transformers", "vllm"),
        ),
        kinds.FieldSpec(
            "max_model_len",
            "int",
            "engine vllm: the server's --max-model-len (default the config's "
            "max_position_embeddings); LongRoPE uses its long factors everywhere above "
            "original_max_position_embeddings",
            None,
            minimum=1,
        ),
    ),
    tensors=(
        kinds.TensorSpec("cos", ("T", "R")),
        kinds.TensorSpec("sin", ("T", "R")),
        kinds.TensorSpec("inv_freq", ("R/2",)),
    ),
    shapes=lambda p: {
        "cos": (_rope_lengths(p)[0], p["rotary_dim"]),
        "sin": (_rope_lengths(p)[0], p["rotary_dim"]),
        "inv_freq": (p["rotary_dim"] // 2,),
    },
    compute=_rope_compute,
    check=_rope_check,
    meta=_rope_meta,
    blocks=_rope_blocks,
    streams=_rope_streams,
    row_elements=lambda p: int(p["rotary_dim"]),
    sources=kinds.Sources("rope", _rope_from_config, _rope_follow),
    complete=_rope_complete,
    examples=(
        {"seq_len": 8, "head_dim": 16},
        {"positions": [0, 1, 2, 4096], "preset": "llama-3.1-8b"},
    ),
)
"""The rope endpoint kind (see :mod:`posenc.kinds`)."""

"""RoPE scaling: :class:`RopeScaling` (transformers' ``rope_parameters`` names), the table of
scaling types and :func:`rope_inv_freq`.

Each type is one module of this package, as vLLM keeps one file per rotary type: its ``NAME``
and ``LABEL``, its frozen parameter class ``Params`` (transformers'
``_validate_<type>_rope_parameters`` shape: a field without a default is required), each field
declared with its description and bounds (:func:`posenc.rope.parameters.parameter`), its
``validate`` and its ``inv_freq``, so a new parameter or rule is written once, in its type's
module. :data:`ROPE_TYPES` lists them (:func:`register_scaling_type` adds one); the scaling
types, :data:`ROPE_PARAMETER_CLASSES`, :data:`ROPE_INIT_FUNCTIONS`, :data:`ROPE_PARAMETER_KEYS`,
the checks every type's parameters get and the rope kind's HTTP ``scaling`` schema
(:func:`scaling_parameters`) are read off them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import check_choice, check_finite, check_int, check_int_at_least
from posenc.rope import dynamic, linear, llama3, longrope, proportional, yarn
from posenc.rope.parameters import ScalingParameter, parameters_of

RopeLayout = Literal["half", "interleaved"]
#: ``positive``: ``x·cos θ + rotate(x)·sin θ`` (RoFormer and nearly every model); ``negative``:
#: the model rotates by ``−θ`` (nanochat's ``rotate_half`` is ``cat(x2, −x1)``), so its tables
#: carry ``−sin θ``.
RopeRotation = Literal["positive", "negative"]
#: The built-in scaling types (a test checks it equals the registered modules' names).
ScalingType = Literal["linear", "dynamic", "yarn", "longrope", "llama3", "proportional"]

ROPE_LAYOUTS: tuple[str, ...] = get_args(RopeLayout)
ROPE_ROTATIONS: tuple[str, ...] = get_args(RopeRotation)
#: Which ``R`` channels of a ``Dh``-wide head rotate: the ``leading`` ones (every model but one)
#: or the ``trailing`` ones (DeepSeek-V4 lays each head out as ``[nope | rope]``).
RopeChannels = Literal["leading", "trailing"]
ROPE_CHANNELS: tuple[str, ...] = get_args(RopeChannels)
#: The registered scaling types (rebound by :func:`register_scaling_type`).
SCALING_TYPES: tuple[str, ...] = get_args(ScalingType)


#: Scaling type -> its module (``NAME``, ``LABEL``, ``Params``, ``validate``, ``inv_freq``).
#: Read-only views below follow it; :func:`register_scaling_type` is the one way to add a type.
ROPE_TYPES: dict[str, ModuleType] = {}
#: Scaling type -> its frozen parameter class.
ROPE_PARAMETER_CLASSES: dict[str, type] = {}
#: Scaling type -> its declared parameters (:class:`~posenc.rope.parameters.ScalingParameter`).
ROPE_PARAMETERS: dict[str, tuple[ScalingParameter, ...]] = {}
#: ``{type: (required, optional)}`` parameter names, from the classes (yarn's and llama3's
#: ``original_max_position_embeddings`` and dynamic's are required here: transformers would
#: otherwise take it from the model config, which posenc reads in :mod:`posenc.readers.hf`).
ROPE_PARAMETER_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


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

    # the fields are the union of every type's parameters (tests/lib/test_scaling_modules.py
    # checks it); a type with a parameter of a new name adds its field here

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
    """Check the parameters of ``s``: the type, its required parameters, finiteness and the
    lower bound of every parameter given (as declared by the types that take it), then its
    type's own rules (the ``validate`` of its module); raise InvalidArgument naming the field."""
    check_choice("scaling.type", s.type, SCALING_TYPES)
    for name in ROPE_PARAMETER_KEYS[s.type][0]:
        if getattr(s, name) is None:
            raise InvalidArgument(
                f"scaling.{name} is required for {s.type} scaling", field=f"scaling.{name}"
            )
    declared = {p.name: p for p in scaling_parameters()}
    for name in _FIELD_NAMES:
        value = getattr(s, name)
        if value is not None and name != "partial_rotary_factor" and name in declared:
            _check_parameter(declared[name], value)
    if s.partial_rotary_factor is not None and "partial_rotary_factor" not in {
        p.name for p in ROPE_PARAMETERS[s.type]
    }:
        raise InvalidArgument(
            f"scaling.partial_rotary_factor is a parameter of proportional scaling only, "
            f"got it with {s.type}; give the rotated fraction as rotary_dim",
            field="scaling.partial_rotary_factor",
        )
    ROPE_TYPES[s.type].validate(s.params())  # the type's own rules (its module's validate)


def _check_parameter(p: ScalingParameter, value: Any) -> None:
    """One given parameter against its declaration: a finite number above its lower bound, an
    integer at least its minimum, true or false, or a list of such numbers."""
    name = f"scaling.{p.name}"
    low = p.bounds.get("exclusive_minimum")
    if p.type == "float":
        check_finite(name, value, greater_than=low)
    elif p.type == "int":
        check_int_at_least(name, value, int(p.bounds.get("minimum", 1)), noun="an integer")
    elif p.type == "bool":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name} must be true or false, got {value!r}", field=name)
    else:
        for i, v in enumerate(value):
            check_finite(f"{name}[{i}]", v, greater_than=low, field=name)


def check_rotary_dim(rotary_dim: Any, field: str = "rotary_dim") -> None:
    """``rotary_dim`` (or ``field``) is an even integer >= 2."""
    check_int(field, rotary_dim)
    if rotary_dim <= 0 or rotary_dim % 2:
        raise InvalidArgument(
            f"{field} must be an even integer >= 2, got {rotary_dim}", field=field
        )


def check_exponent_dim(rotary_dim: int, exponent_dim: Any, field: str = "exponent_dim") -> int:
    """The exponents' denominator ``E`` for a table ``R`` wide: ``R`` (None), else an odd
    ``R − 1`` (the odd rotated width of a model's config, :func:`rope_inv_freq`)."""
    if exponent_dim is None:
        return rotary_dim
    check_int(field, exponent_dim)
    if exponent_dim not in (rotary_dim, rotary_dim - 1):
        raise InvalidArgument(
            f"{field} must be rotary_dim ({rotary_dim}) or the odd rotary_dim - 1 "
            f"({rotary_dim - 1}), got {exponent_dim}",
            field=field,
        )
    return int(exponent_dim)


# Each scaling type: ``(base_inv_freq (R/2,), R, base, scaling, seq_len) -> (inv_freq, scale)``.
RopeInitFn = Callable[[Tensor, int, float, Any, "int | None"], tuple[Tensor, float]]

#: Scaling type -> function computing ``(inv_freq, attention_scaling)`` in float64, as
#: transformers' ``ROPE_INIT_FUNCTIONS``.
ROPE_INIT_FUNCTIONS: dict[str, RopeInitFn] = {}
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(RopeScaling) if f.name != "type")


def register_scaling_type(module: ModuleType) -> None:
    """Add the scaling type of ``module``: its ``NAME``, ``LABEL``, ``Params`` (fields declared
    with :func:`~posenc.rope.parameters.parameter`), ``validate(params)`` and
    ``inv_freq(base_inv_freq, E, base, params, seq_len) -> (inv_freq, attention_scaling)``.
    Every table derived from the types follows (the rope kind's schema is built from them when
    the kind is, :func:`posenc.rope_kinds.kind.rope_kind`).

    Raises:
        ValueError: a name already registered; a parameter :class:`RopeScaling` has no field
            for, or one declared with another type or other bounds than another type's.
    """
    global SCALING_TYPES
    name = module.NAME
    if name in ROPE_TYPES:
        raise ValueError(f"scaling type {name!r} is already registered")
    params = parameters_of(module.Params)
    declared = {p.name: p for t in ROPE_TYPES for p in ROPE_PARAMETERS[t]}
    for p in params:
        if p.name not in _FIELD_NAMES:
            raise ValueError(f"{name}: RopeScaling has no field {p.name!r}; add it there")
        other = declared.get(p.name)
        if other is not None and (other.type, dict(other.bounds)) != (p.type, dict(p.bounds)):
            raise ValueError(f"{name}: {p.name} is declared otherwise by another type")
    ROPE_TYPES[name] = module
    ROPE_PARAMETER_CLASSES[name] = module.Params
    ROPE_PARAMETERS[name] = params
    ROPE_PARAMETER_KEYS[name] = (
        tuple(p.name for p in params if p.required),
        tuple(p.name for p in params if not p.required),
    )
    ROPE_INIT_FUNCTIONS[name] = module.inv_freq
    SCALING_TYPES = tuple(ROPE_TYPES)


def unregister_scaling_type(name: str) -> None:
    """Remove a scaling type (tests register their own and take them out again)."""
    global SCALING_TYPES
    for table in (ROPE_TYPES, ROPE_PARAMETER_CLASSES, ROPE_PARAMETERS, ROPE_PARAMETER_KEYS):
        table.pop(name, None)
    ROPE_INIT_FUNCTIONS.pop(name, None)
    SCALING_TYPES = tuple(ROPE_TYPES)


def scaling_parameters() -> tuple[ScalingParameter, ...]:
    """Every parameter of every type, once, in :class:`RopeScaling`'s field order, for the
    HTTP ``scaling`` schema: its description led by the types that take it (``YaRN,
    LongRoPE: attention scaling``) unless every type does, and optional (the types that do not
    take it ignore it)."""
    out = []
    for field_name in _FIELD_NAMES:
        takers = [t for t in ROPE_TYPES if any(p.name == field_name for p in ROPE_PARAMETERS[t])]
        if not takers:
            continue
        first = next(p for p in ROPE_PARAMETERS[takers[0]] if p.name == field_name)
        who = ", ".join(ROPE_TYPES[t].LABEL for t in takers)
        description = (
            first.description if len(takers) == len(ROPE_TYPES) else f"{who}: {first.description}"
        )
        out.append(dataclasses.replace(first, description=description, required=False))
    return tuple(out)


for _module in (linear, dynamic, yarn, longrope, llama3, proportional):
    register_scaling_type(_module)


def rope_inv_freq(
    rotary_dim: int,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    *,
    seq_len: int | None = None,
    max_elements: int | None = None,
    exponent_dim: int | None = None,
) -> tuple[Tensor, float]:
    """Inverse frequencies ``ω_i`` and attention scaling, as transformers' ROPE_INIT_FUNCTIONS.

    Unscaled, ``ω_i = base^(−2i/E)`` for ``i < R/2`` (RoFormer), with ``E = exponent_dim``,
    ``R`` by default. The scaling types follow transformers' ``modeling_rope_utils.py`` formula
    for formula, evaluated in float64.

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
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).
        exponent_dim: ``E``, the denominator of the exponents: ``R`` (None), or the odd
            ``R − 1`` of a model whose config makes the rotated width odd. transformers then
            builds ``arange(0, E, 2) / E``: GLM-4-MoE's ``int(42 · 0.5) = 21`` gives 11
            frequencies ``base^(−2i/21)`` and a 22-wide table. The scaling types get ``E`` as
            transformers' ``dim``; ``yarn`` and ``longrope``, whose ramps and factor lists are
            ``E // 2`` long (one short of the frequencies: transformers fails on them), are
            refused.

    Returns:
        ``(inv_freq, attention_scaling)``: ``(R/2,)`` float64 on the CPU, and a float.

    Raises:
        InvalidArgument: odd or non-positive ``rotary_dim``, ``base ≤ 1``, ``short_factor`` /
            ``long_factor`` not of length ``R/2``, ``dynamic`` with ``R = 2``, a bad ``seq_len``;
            an ``exponent_dim`` other than ``R`` or ``R − 1``.
    """
    check_rotary_dim(rotary_dim)
    exponent = check_exponent_dim(rotary_dim, exponent_dim)
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
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / exponent  # (R/2,)
    inv_freq = 1.0 / (base**exponents)
    if scaling is None:
        return inv_freq, 1.0
    if exponent != rotary_dim and getattr(ROPE_TYPES[scaling.type], "NEEDS_EVEN_WIDTH", False):
        raise InvalidArgument(
            f"{scaling.type} scaling needs an even rotated width: exponent_dim {exponent} gives "
            f"{rotary_dim // 2} frequencies but {scaling.type}'s ramp and factors have "
            f"{exponent // 2} (transformers cannot build it either)",
            field="exponent_dim",
        )
    return ROPE_INIT_FUNCTIONS[scaling.type](inv_freq, exponent, base, scaling.params(), seq_len)

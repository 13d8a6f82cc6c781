"""Position-dependent query scale: the factor some models multiply their queries by.

Two published rules have the same form, ``scale(p) = 1 + alpha · ln(1 + floor((p + offset) /
period))`` for position ``p``:

- Llama 4's attention temperature tuning (Nakanishi, "Scalable-Softmax Is Superior for
  Attention", arXiv 2501.19399) on its no-RoPE layers: ``alpha = attn_scale`` (0.1),
  ``period = floor_scale`` (8192), ``offset = 1``. Reference: transformers
  ``models/llama4/modeling_llama4.py::Llama4TextAttention.forward`` (``attn_temperature_tuning``
  and ``not use_rope``).
- ``llama_4_scaling_beta`` in ``rope_parameters`` (Ministral 3, Mistral Large 3 / Mistral 4), on
  every layer: ``alpha = llama_4_scaling_beta``, ``period =
  rope_parameters.original_max_position_embeddings``, ``offset = 0``. Reference: transformers
  ``models/ministral3/modeling_ministral3.py::get_llama_4_attn_scale`` (the same function in
  ``mistral4``).

posenc divides in integers (``floor`` exact at any position) and takes the logarithm in float64,
casting once at the end; transformers computes in float32. ``precision: "engine"`` gives
transformers' own float32 arithmetic instead (:func:`query_scale_engine`), bit for bit: Llama 4's
``log1p(floor((p.float() + 1.0) / floor_scale)) * attn_scale + 1.0`` and Ministral 3's
``1 + beta * log(1 + floor(p / original_max_position_embeddings))`` (float32 true division),
whose ``floor`` departs from the exact step once ``p + 1`` passes 2^24.

Notation used for tensor shapes:
    T: number of positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posenc.core import kinds
from posenc.core.errors import InvalidArgument, UnknownName
from posenc.core.limits import check_elements
from posenc.core.validate import check_int, check_seq_len_or_positions, device_or_cpu
from posenc.facts.config_parts import text_part
from posenc.facts.families import family, types_where
from posenc.facts.model_configs import MODEL_CONFIGS
from posenc.readers.hf.positions import read_positions

#: The model types whose transformers attention applies ``llama_4_scaling_beta``.
BETA_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.query_scale == "llama4_beta")


def query_scale(
    positions: torch.Tensor | list[int],
    *,
    alpha: float,
    period: int,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """``1 + alpha · ln(1 + floor((p + offset) / period))`` for each position ``p``.

    Args:
        positions: (T,) integer positions (>= 0).
        alpha: the scale's growth per doubling-ish step (Llama 4 ``attn_scale``; Ministral 3
            ``llama_4_scaling_beta``).
        period: positions per step (Llama 4 ``floor_scale``; Ministral 3
            ``original_max_position_embeddings``), >= 1.
        offset: added to the position before the division (Llama 4: 1; Ministral 3: 0), >= 0.
        dtype: dtype of the result (computed in float64).
        device: where the result lives (None: the positions' device, or CPU).

    Returns:
        (T,) the factor each query is multiplied by; 1 up to the first step.

    Raises:
        InvalidArgument: non-integer or negative positions, ``period < 1``, ``offset < 0``, or a
            non-finite ``alpha``.
    """
    period = check_int("period", period, 1)
    offset = check_int("offset", offset, 0)
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not math.isfinite(alpha):
        raise InvalidArgument(f"alpha must be a finite number, got {alpha!r}", field="alpha")
    p = torch.as_tensor(positions)
    if device is not None:
        p = p.to(device_or_cpu(device))
    if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
        raise InvalidArgument(
            f"positions must hold integers, got dtype {p.dtype}", field="positions"
        )
    p = p.to(torch.int64)
    if p.numel() and int(p.min()) < 0:
        raise InvalidArgument(f"positions must be >= 0, got {int(p.min())}", field="positions")
    steps = torch.div(p + offset, period, rounding_mode="floor")  # (T,) exact
    scale = (1.0 + alpha * torch.log1p(steps.to(torch.float64))).to(dtype)
    if not torch.isfinite(scale).all():
        raise InvalidArgument(
            f"the query scale overflows {dtype} with alpha {alpha:g} (largest step "
            f"{int(steps.max())}); use a smaller alpha or float64",
            field="alpha",
        )
    return scale


def query_scale_engine(
    positions: torch.Tensor, *, alpha: float, period: int, offset: int, rule: str
) -> torch.Tensor:
    """transformers' float32 query scale for ``rule``, bit for bit on the same torch build.

    Args:
        positions: ``(T,)`` int64 positions.
        rule: ``llama4_temperature_tuning`` (``Llama4TextAttention.forward``:
            ``log1p(floor((p.float() + offset) / period)) * alpha + 1.0``) or
            ``llama_4_scaling_beta`` (``get_llama_4_attn_scale``: ``1 + alpha * log(1 +
            floor((p + offset) / period))``, the int64 positions divided in float32).

    Returns:
        ``(T,)`` float32.
    """
    p = positions.to(torch.int64)
    if rule == "llama4_temperature_tuning":
        return torch.log1p(torch.floor((p.float() + float(offset)) / period)) * alpha + 1.0
    shifted = p + offset if offset else p
    return 1 + alpha * torch.log(1 + torch.floor(shifted / period))


@dataclass(frozen=True)
class QueryScaleRule:
    """A config's query scale: the formula's numbers and the layers it applies to.

    Attributes:
        rule: ``llama4_temperature_tuning`` or ``llama_4_scaling_beta``.
        alpha, period, offset: see :func:`query_scale`.
        layers: indices of the layers that multiply their queries by it (the others by 1).
        num_layers: the model's layer count (None where the config gives none).
    """

    rule: str
    alpha: float
    period: int
    offset: int
    layers: tuple[int, ...] | None
    num_layers: int | None


def query_scale_from_config(config: Mapping[str, Any]) -> QueryScaleRule | None:
    """The query scale a model's ``config.json`` applies, as transformers 5 reads it, or None
    when its attention multiplies queries by no position-dependent factor.

    Raises:
        InvalidArgument: a config posenc cannot read (``field`` names the key).
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a model's config.json), got {type(config).__name__}",
            field="config",
        )
    text, prefix = text_part(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    base = model_type.removesuffix("_text")
    if family(base).temperature_tuning:
        positions = read_positions(config)
        temperature = positions.attention_temperature
        if temperature is None:
            return None
        layers = tuple(i for i, t in enumerate(positions.layer_types) if t == "no_rope")
        floor_scale = temperature["floor_scale"]
        if floor_scale != int(floor_scale) or floor_scale < 1:
            raise InvalidArgument(
                f"{prefix}floor_scale must be an integer >= 1, got {floor_scale!r}",
                field=f"{prefix}floor_scale",
            )
        return QueryScaleRule(
            rule="llama4_temperature_tuning",
            alpha=float(temperature["attn_scale"]),
            period=int(floor_scale),
            offset=1,
            layers=layers,
            num_layers=len(positions.layer_types) or None,
        )
    if family(base).query_scale == "llama4_beta":
        rope = text.get("rope_scaling") or text.get("rope_parameters")
        where = f"{prefix}rope_parameters"
        if not isinstance(rope, Mapping) or rope.get("llama_4_scaling_beta") is None:
            return None
        beta = rope["llama_4_scaling_beta"]
        if isinstance(beta, bool) or not isinstance(beta, int | float) or beta != beta:
            raise InvalidArgument(
                f"{where}.llama_4_scaling_beta must be a number, got {beta!r}",
                field=f"{where}.llama_4_scaling_beta",
            )
        period = rope.get("original_max_position_embeddings")
        if isinstance(period, bool) or not isinstance(period, int | float) or period < 1:
            raise InvalidArgument(
                f"{where}.original_max_position_embeddings must be an integer >= 1 (the period "
                f"of llama_4_scaling_beta's scale), got {period!r}",
                field=f"{where}.original_max_position_embeddings",
            )
        n_layers = text.get("num_hidden_layers")
        n = n_layers if isinstance(n_layers, int) and not isinstance(n_layers, bool) else None
        return QueryScaleRule(
            rule="llama_4_scaling_beta",
            alpha=float(beta),
            period=int(period),
            offset=0,
            layers=tuple(range(n)) if n is not None else None,
            num_layers=n,
        )
    return None


def describe_query_scale(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """JSON-ready ``{"rule", "alpha", "period", "offset", "layers", "endpoint"}`` of a config's
    query scale (``layers``: the layer indices that apply it, the others multiply by 1), or None
    when the model applies none; as ``POST /v1/configs/positions`` answers."""
    rule = query_scale_from_config(config)
    if rule is None:
        return None
    return {
        "rule": rule.rule,
        "alpha": rule.alpha,
        "period": rule.period,
        "offset": rule.offset,
        "layers": list(rule.layers) if rule.layers is not None else None,
        "endpoint": "/v1/encodings/query-scale",
    }


__all__ = [
    "BETA_MODEL_TYPES",
    "QUERY_SCALE",
    "QueryScaleRule",
    "describe_query_scale",
    "query_scale",
    "query_scale_engine",
    "query_scale_from_config",
]


# ---------------------------------------------------------------------------------------------
# The query-scale endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------

_RULE_FIELDS = ("alpha", "period", "offset")


def _merged(p: Mapping[str, Any]) -> dict[str, Any]:
    """The fields with a config's rule under them (the caller's values win)."""
    out = dict(p)
    config = p.get("config")
    if p.get("preset") is not None:
        config = _preset_config(p["preset"], config)
    rule: QueryScaleRule | None = None
    if config is not None:
        rule = query_scale_from_config(config)
        if rule is None:
            text, _ = text_part(config)
            model_type = text.get("model_type") or config.get("model_type")
            raise InvalidArgument(
                f"config of model_type {model_type!r} applies no position-dependent query scale "
                "(known: Llama 4's attn_temperature_tuning on its no-RoPE layers, and "
                f"llama_4_scaling_beta in rope_parameters of {sorted(BETA_MODEL_TYPES)})",
                field="config",
            )
        for name in _RULE_FIELDS:
            if out.get(name) is None:
                out[name] = getattr(rule, name)
    out["config_model_type"] = None
    if config is not None:
        text, _ = text_part(config)
        out["config_model_type"] = config.get("model_type") or text.get("model_type")
    if out.get("offset") is None:
        out["offset"] = 0
    for name in ("alpha", "period"):
        if out.get(name) is None:
            raise InvalidArgument(
                f"{name} is required: give {name} or a config (Llama 4, Ministral 3, Mistral 4)",
                field=name,
            )
    out["_rule"] = rule
    if p.get("precision") == "engine" and rule is None:
        raise InvalidArgument(
            "precision \"engine\" follows a model's own arithmetic (Llama 4's or Ministral 3's "
            "differ): give its config or a preset",
            field="precision",
        )
    layer = p.get("layer")
    if layer is not None:
        if rule is None:
            raise InvalidArgument("layer picks a layer of a config; give a config", field="layer")
        if rule.num_layers is not None and layer >= rule.num_layers:
            raise InvalidArgument(
                f"layer must be < {rule.num_layers} (the config's layers), got {layer}",
                field="layer",
            )
    return out


def _preset_config(name: str, config: Any) -> Mapping[str, Any]:
    """The quoted published config of preset ``name`` (:mod:`posenc.facts.model_configs`)."""
    if config is not None:
        raise InvalidArgument(
            f"give config or preset, not both (got preset {name!r} and a config)", field="config"
        )
    known = sorted(n for n, (_, c) in MODEL_CONFIGS.items() if query_scale_from_config(c))
    if name not in known:
        raise UnknownName(
            f"preset {name!r} quotes no config with a query scale; those that do: "
            f"{', '.join(known)}",
            field="preset",
            name=name,
            known=known,
        )
    return MODEL_CONFIGS[name][1]


def _length(p: Mapping[str, Any]) -> int:
    check_seq_len_or_positions(p.get("seq_len"), p.get("positions"))
    return int(p["seq_len"]) if p.get("seq_len") is not None else len(p["positions"])


def _applies(m: Mapping[str, Any]) -> bool:
    rule, layer = m["_rule"], m.get("layer")
    return layer is None or rule is None or rule.layers is None or layer in rule.layers


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, torch.Tensor]:
    m = _merged(p)
    n = _length(p)
    check_elements(n, what=f"the (T={n},) query scale")
    if p.get("positions") is not None:
        positions = torch.tensor(p["positions"], dtype=torch.int64, device=ctx.device)
    else:
        positions = torch.arange(n, dtype=torch.int64, device=ctx.device)
    if not _applies(m):  # a layer that scales no query (Llama 4's RoPE layers)
        return {"scale": torch.ones(n, dtype=ctx.dtype, device=ctx.device)}
    if p.get("precision") == "engine":
        rule: QueryScaleRule = m["_rule"]
        scale = query_scale_engine(
            positions.cpu(),
            alpha=m["alpha"],
            period=m["period"],
            offset=m["offset"],
            rule=rule.rule,
        )
        return {"scale": scale.to(device=ctx.device, dtype=ctx.dtype)}
    scale = query_scale(
        positions, alpha=m["alpha"], period=m["period"], offset=m["offset"], dtype=ctx.dtype
    )
    return {"scale": scale}


def _meta(p: Mapping[str, Any]) -> dict[str, Any]:
    m = _merged(p)
    rule: QueryScaleRule | None = m["_rule"]
    return {
        "kind": "query_scale",
        "seq_len": _length(p),
        "rule": rule.rule if rule is not None else None,
        "alpha": m["alpha"],
        "period": m["period"],
        "offset": m["offset"],
        "layers": list(rule.layers) if rule is not None and rule.layers is not None else None,
        "layer": p.get("layer"),
        "applies": _applies(m),
        "preset": p.get("preset"),
        "config_model_type": m["config_model_type"],
        "dtype": p["dtype"],
        "precision": p.get("precision") or "exact",
    }


def _check(p: Mapping[str, Any]) -> None:
    if p.get("seq_len") is not None and p.get("positions") is not None:
        check_seq_len_or_positions(p["seq_len"], p["positions"])


QUERY_SCALE: kinds.Kind = kinds.Kind(
    name="query_scale",
    path="/v1/encodings/query-scale",
    tag="encodings",
    summary="Position-dependent query scale (Llama 4, Ministral 3)",
    description="The factor a model multiplies each query by, `1 + alpha · ln(1 + floor((p + "
    "offset) / period))`: Llama 4's `attn_temperature_tuning` on its no-RoPE layers "
    "(alpha `attn_scale`, period `floor_scale`, offset 1; transformers "
    "`Llama4TextAttention`), and `llama_4_scaling_beta` in `rope_parameters` on every layer "
    "(alpha the beta, period `original_max_position_embeddings`, offset 0; transformers "
    "`get_llama_4_attn_scale` of Ministral 3 / Mistral 4). float64, cast once.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T: positions 0 … T−1", None, minimum=1, example=8),
        kinds.FieldSpec(
            "positions",
            "ints",
            "explicit positions (ints ≥ 0) instead of seq_len",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "alpha",
            "float",
            "the scale's factor (Llama 4 attn_scale, Ministral 3 llama_4_scaling_beta); "
            "required without a config",
            None,
            example=0.1,
        ),
        kinds.FieldSpec(
            "period",
            "int",
            "positions per step (Llama 4 floor_scale, Ministral 3 "
            "original_max_position_embeddings); required without a config",
            None,
            minimum=1,
            example=8192,
        ),
        kinds.FieldSpec(
            "offset",
            "int",
            "added to p before the division (Llama 4: 1; default 0)",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "layer",
            "int",
            "with a config: this layer's scale (ones where the layer scales no query, as "
            "Llama 4's RoPE layers)",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "preset",
            "str",
            "a preset (GET /v1/presets) whose quoted config applies a query scale, e.g. "
            "llama-4-scout; not together with config",
            None,
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "a model's config.json (a multimodal file whole): Llama 4 (attn_temperature_"
            "tuning, attn_scale, floor_scale, no_rope_layers), Ministral 3 / Mistral 3 / "
            "Mistral 4 (rope_parameters.llama_4_scaling_beta, "
            "original_max_position_embeddings); alpha, period, offset override it",
            None,
        ),
        kinds.FieldSpec(  # issue 30
            "precision",
            "str",
            "exact (default: integer floor, float64 logarithm, cast once) or engine: the "
            "model's transformers attention in float32, bit for bit (needs config or preset)",
            "exact",
            choices=("exact", "engine"),
        ),
    ),
    tensors=(kinds.TensorSpec("scale", ("T",)),),
    shapes=lambda p: {"scale": (_length(p),)},
    compute=_compute,
    check=_check,
    meta=_meta,
    examples=({"seq_len": 8, "alpha": 0.1, "period": 4, "offset": 1},),
)
"""The query-scale endpoint kind (see :mod:`posenc.core.kinds`)."""

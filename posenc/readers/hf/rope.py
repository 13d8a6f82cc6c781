"""A config's RoPE, as transformers 5 reads it: the layer types, the rope parameters by layer
type (nested, legacy or vLLM-only), each layer type's rotated width, theta and scaling, the
layout and the M-RoPE sections (the module docstring of :mod:`posenc.readers.hf.positions` lists the
rules)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Any, TypeGuard

from posenc.core.errors import InvalidArgument
from posenc.core.validate import is_number
from posenc.facts.config_parts import ConfigReader
from posenc.facts.families import Family, family, types_where
from posenc.readers.hf.heads import (
    MAX_HEAD_DIM,
    head_dim_cause,
    is_mla,
    read_head_dim,
    read_softmax_scale,
)
from posenc.readers.hf.results import ModelPositions, RopeLayerType, plain
from posenc.rope import ROPE_PARAMETER_KEYS, RopeScaling, rope_inv_freq
from posenc.rope.scaling import ROPE_TYPES
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES

_MROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})

#: What vLLM's ``get_rope`` reads of a vLLM-only rope dict besides ``rope_type`` / ``rope_theta``.
_VLLM_KEYS = ("alpha", "factor", "mixed_b", "xdrope_section")


#: Model types whose attention rotates by ``−θ`` / the trailing channels (views of the records).
NEGATIVE_ROTATION_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.rotation == "negative")
TRAILING_ROTARY_MODEL_TYPES: frozenset[str] = types_where(
    lambda f: f.rotated_channels == "trailing"
)


def _layer_types(base: str, r: ConfigReader, n_layers: int | None) -> list[str] | None:
    c = r.config
    fam = family(base)
    given = c.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise InvalidArgument(
                f"config.layer_types must be a list of strings (one per layer), got {given!r:.80}",
                field=r.field("layer_types"),
            )
        types = list(given)
    elif n_layers is None:
        return None
    elif fam.layer_rule == "alternating":
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    elif fam.layer_rule == "every_nth" and fam.sliding_pattern is not None:
        default = fam.sliding_pattern
        pattern = r.int("sliding_window_pattern", default) or default
        types = [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)
        ]
    elif (
        fam.layer_rule == "qwen_sliding" and c.get("use_sliding_window") and c.get("sliding_window")
    ):
        mwl = r.int("max_window_layers", 28, minimum=0)
        types = [
            "sliding_attention" if i >= mwl else "full_attention"  # type: ignore[operator]
            for i in range(n_layers)
        ]
    elif fam.layer_rule == "no_rope_layers":
        interval = r.int("no_rope_layer_interval", 4) or 4
        no_rope = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n_layers)]
        if not isinstance(no_rope, list):
            raise InvalidArgument(
                "config.no_rope_layers must be a list of flags (1: RoPE, 0: none)",
                field=r.field("no_rope_layers"),
            )
        types = ["chunked_attention" if use else "no_rope" for use in no_rope]
        return types
    else:
        types = ["full_attention"] * n_layers
    if fam.nope_interval:
        # SmolLM3: NoPE every no_rope_layer_interval-th layer (no_rope_layers[i] == 0)
        interval = r.int("no_rope_layer_interval", 4) or 4
        flags = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(len(types))]
        if not isinstance(flags, list) or len(flags) < len(types):
            raise InvalidArgument(
                f"config.no_rope_layers must be a list of {len(types)} flags (1: RoPE, 0: none)",
                field=r.field("no_rope_layers"),
            )
        types = [t if flags[i] else "no_rope" for i, t in enumerate(types)]
    if fam.last_layer_full and types and types[-1] != "full_attention":
        types[-1] = "full_attention"
        r.warnings.append("layer_types: the last layer is full_attention (Gemma 4 forces it)")
    if fam.full_is_no_rope:
        types = ["no_rope" if t == "full_attention" else t for t in types]
    return types


def _per_layer_head_dim(r: ConfigReader, layer_types: list[str] | None, name: str) -> int | None:
    """The head_dim that ``per_layer_config`` (EmbeddingGemma 2: ``{"05": {"head_dim": 512}}``,
    keyed by layer index) gives every layer of type ``name``; None when it gives none."""
    per_layer = r.config.get("per_layer_config")
    if not isinstance(per_layer, Mapping) or not layer_types:
        return None
    by_index: dict[int, Any] = {}
    for key, value in per_layer.items():
        try:
            by_index[int(key)] = value
        except (TypeError, ValueError):
            continue
    dims = set()
    for i, t in enumerate(layer_types):
        if t != name:
            continue
        entry = by_index.get(i)
        dim = entry.get("head_dim") if isinstance(entry, Mapping) else None
        dims.add(dim)
    if len(dims) != 1 or None in dims:
        return None
    dim = dims.pop()
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_HEAD_DIM:
        raise InvalidArgument(
            f"per_layer_config head_dim must be an integer in [1, {MAX_HEAD_DIM}], got {dim!r}",
            field=r.field("per_layer_config"),
        )
    return dim


def _rope_dicts(
    base: str, model_type: str, r: ConfigReader, layer_types: list[str] | None
) -> tuple[dict[str, dict[str, Any]], bool]:
    """The raw rope parameter dicts by layer type (``{"default": ...}`` when not nested), with
    ``rope_theta`` and ``rope_type`` filled in; and whether they are nested."""
    c = r.config
    fam = family(base)
    own_theta = family(model_type).default_theta
    theta_default = own_theta if own_theta is not None else fam.default_theta
    default_theta = theta_default if theta_default is not None else 10000.0
    if fam.theta_ratio_key is not None:  # modeling_chatglm.py: base = 10000 * rope_ratio
        default_theta *= r.float(fam.theta_ratio_key, 1.0) or 1.0
    params = c.get("rope_parameters")
    scaling = c.get("rope_scaling")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, Mapping):
            raise InvalidArgument(
                f"{r.field(key)} must be an object or null, got {type(value).__name__}",
                field=r.field(key),
            )
    if scaling is not None:
        r.warnings.append(
            "rope_scaling: legacy spelling of rope_parameters (read as transformers 5 reads it)"
        )
        if params is not None:
            r.warnings.append("rope_parameters: ignored, rope_scaling wins (as in transformers)")
    top_theta = r.float("rope_theta")
    if top_theta is not None and (scaling is not None or params is None):
        r.warnings.append("rope_theta: legacy top-level key, read as rope_parameters.rope_theta")
    if top_theta is None and r.has("rotary_emb_base"):
        top_theta = r.float("rotary_emb_base")
        r.warnings.append("rotary_emb_base: legacy spelling of rope_theta")

    if fam.rope_nesting == "local_global":
        dicts = _local_global_dicts(r, params, scaling, top_theta)
        nested_flag = True
    else:
        raw = dict(scaling if scaling is not None else (params or {}))
        labels = set(layer_types or ()) | {"full_attention", "sliding_attention"}
        nested_keys = [k for k in raw if k in labels and isinstance(raw[k], Mapping | None)]
        if not nested_keys and raw and all(isinstance(v, Mapping) for v in raw.values()):
            # every value a dict: rope kinds of their own (DeepSeek-V4's main / compress, which
            # its rotary module builds from rope_parameters' keys, not from layer_types)
            nested_keys = list(raw)
        if fam.rope_nesting == "proportional_global" and params is None and scaling is None:
            raw = {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 1_000_000.0,
                },
            }
            nested_keys = list(raw)
        if nested_keys:
            dicts = {k: dict(raw[k]) for k in nested_keys if raw[k] is not None}
            nested_flag = True
        else:
            dicts = {"default": raw}
            nested_flag = False
        for d in dicts.values():
            d.setdefault("rope_theta", top_theta if top_theta is not None else default_theta)
    _name_rope_types(r, dicts, nested_flag, scaling is not None)
    return dicts, nested_flag


def _local_global_dicts(
    r: ConfigReader,
    params: Mapping[str, Any] | None,
    scaling: Mapping[str, Any] | None,
    top_theta: float | None,
) -> dict[str, dict[str, Any]]:
    """Gemma 3's sliding and full layer types' dicts, as its config class reads them
    (``rope_scaling`` for the full layers only; ``rope_local_base_freq`` the sliding theta)."""
    # configuration_gemma3.convert_rope_params_to_dict
    nested = (
        {k: dict(v) if isinstance(v, Mapping) else None for k, v in params.items()}
        if params is not None
        else {}
    )
    nested = {k: v for k, v in nested.items() if k in ("full_attention", "sliding_attention")}
    full = nested.get("full_attention") or {"rope_type": "default"}
    if scaling is not None:
        full.update(scaling)
    full.setdefault("rope_theta", top_theta if top_theta is not None else 1_000_000.0)
    sliding = nested.get("sliding_attention") or {"rope_type": "default"}
    local = r.float("rope_local_base_freq")
    if local is not None:
        r.warnings.append(
            "rope_local_base_freq: legacy spelling of rope_parameters.sliding_attention.rope_theta"
        )
    sliding.setdefault("rope_theta", local if local is not None else 10_000.0)
    return {"sliding_attention": sliding, "full_attention": full}


def _name_rope_types(
    r: ConfigReader, dicts: dict[str, dict[str, Any]], nested: bool, legacy: bool
) -> None:
    """Each dict's ``rope_type`` (``type`` read as its legacy spelling, ``mrope`` as
    ``default``) and ``_where``, the field its errors name."""
    for name, d in dicts.items():
        where = r.field("rope_scaling" if legacy else "rope_parameters")
        if nested:
            where = f"{where}.{name}"
        if "type" in d:
            if "rope_type" in d and d["rope_type"] != d["type"]:
                r.warnings.append(
                    f"{where}.type {d['type']!r}: ignored, rope_type {d['rope_type']!r} wins"
                )
            else:
                r.warnings.append(f"{where}.type: legacy spelling of rope_type")
            d.setdefault("rope_type", d["type"])
            del d["type"]
        d.setdefault("rope_type", "default")
        if d["rope_type"] == "mrope":  # Qwen2-VL: plain RoPE over three position sections
            d["rope_type"] = "default"
        d["_where"] = where


def _rope_layer(
    d: dict[str, Any],
    *,
    r: ConfigReader,
    base: str,
    head_dim: int,
    max_pos: int | None,
    nested: bool,
) -> tuple[RopeLayerType, dict[str, Any]]:
    """One layer type's RoPE; returns it and the mrope keys found in its dict."""
    fam = family(base)
    where = d.pop("_where")
    rope_type, theta = _type_and_theta(d, where)
    vllm, rope_type, theta = _vllm_only(d, r, base, where, rope_type, theta, head_dim)
    prf, rotary_dim, exponent_dim = _rotated_width(d, r, fam, where, rope_type, head_dim)
    mrope = {k: d.pop(k) for k in list(d) if k in _MROPE_KEYS}
    layer = partial(
        RopeLayerType,
        rope_type=rope_type,
        rope_theta=theta,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        partial_rotary_factor=float(prf),
        vllm=vllm,
    )
    if rope_type in VLLM_ONLY_ROPE_TYPES:  # transformers has no rule: nothing more to check
        for key in d:
            if key not in _VLLM_KEYS and d[key] is not None:
                r.warnings.append(f"{where}.{key}: ignored by rope_type {rope_type!r} (vLLM)")
        kept = {k: d[k] for k in ("factor", "mixed_b", "alpha") if d.get(k) is not None}
        return layer(parameters=MappingProxyType(kept), attention_scaling=1.0), mrope
    params = _scaling_parameters(d, r, fam, where, rope_type, prf, max_pos, nested)
    try:
        scaling = (
            RopeScaling.from_dict({"type": rope_type, **params})
            if params or (rope_type != "default")
            else None
        )
        _, attention_scaling = rope_inv_freq(rotary_dim, theta, scaling, exponent_dim=exponent_dim)
    except InvalidArgument as exc:
        sub = (exc.field or "").removeprefix("scaling.")
        raise InvalidArgument(
            f"{where}: {exc.message}", field=f"{where}.{sub}" if sub else where
        ) from None
    frozen = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return (
        layer(
            parameters=MappingProxyType(frozen),
            attention_scaling=float(attention_scaling),
            exponent_dim=exponent_dim if exponent_dim != rotary_dim else None,
        ),
        mrope,
    )


def _type_and_theta(d: dict[str, Any], where: str) -> tuple[str, float]:
    """The layer type's ``rope_type`` (one posenc reads) and ``rope_theta`` (> 1), taken out of
    ``d``."""
    rope_type = d.pop("rope_type")
    if not isinstance(rope_type, str) or (
        rope_type != "default"
        and rope_type not in ROPE_PARAMETER_KEYS
        and rope_type not in VLLM_ONLY_ROPE_TYPES
    ):
        raise InvalidArgument(
            f"{where}.rope_type {rope_type!r} is not supported; accepted: default, "
            f"{', '.join(ROPE_PARAMETER_KEYS)} (and mrope, read as default; "
            f"{', '.join(sorted(VLLM_ONLY_ROPE_TYPES))} for engine vllm)",
            field=f"{where}.rope_type",
        )
    theta_value = d.pop("rope_theta")
    if (
        isinstance(theta_value, bool)
        or not isinstance(theta_value, int | float)
        or not (theta_value > 1 and math.isfinite(theta_value))
    ):
        raise InvalidArgument(
            f"{where}.rope_theta must be a finite number > 1, got {theta_value!r}",
            field=f"{where}.rope_theta",
        )
    theta = float(theta_value)
    return rope_type, theta


def _rotated_width(
    d: dict[str, Any], r: ConfigReader, fam: Family, where: str, rope_type: str, head_dim: int
) -> tuple[float, int, int]:
    """``(partial_rotary_factor, rotary_dim, exponent_dim)`` of a layer type: the rotated
    fraction as read (or the record's default), the width of the table, and the exponents'
    denominator (the odd width where ``int(head_dim · partial_rotary_factor)`` is odd)."""
    c = r.config
    prf = d.pop("partial_rotary_factor", None)
    if prf is None:
        prf = c.get("partial_rotary_factor")
    if prf is None and c.get("rotary_pct") is not None:
        prf = c.get("rotary_pct")
        r.warnings.append("rotary_pct: legacy spelling of partial_rotary_factor")
    prf_default = prf is None
    if prf is None:
        prf = fam.partial_rotary if fam.partial_rotary is not None else 1.0
    if isinstance(prf, bool) or not isinstance(prf, int | float) or not 0 < prf <= 1:
        raise InvalidArgument(
            f"{where}.partial_rotary_factor must be a number in (0, 1], got {prf!r}",
            field=f"{where}.partial_rotary_factor",
        )
    if fam.given_rotary_dim and c.get("rotary_dim") is not None:
        rotary_dim = r.int("rotary_dim")
    elif rope_type == "proportional":
        rotary_dim = head_dim
    else:
        rotary_dim = int(head_dim * prf)
    if head_dim > MAX_HEAD_DIM or (rotary_dim is not None and rotary_dim > head_dim):
        raise InvalidArgument(
            f"the rotary dimension {rotary_dim} must be <= the head dimension {head_dim}, and "
            f"that <= {MAX_HEAD_DIM}",
            field=f"{where}.partial_rotary_factor"
            if not fam.given_rotary_dim
            else r.field("rotary_dim"),
        )
    exponent_dim = rotary_dim
    if (
        rotary_dim is not None
        and rotary_dim % 2
        and 3 <= rotary_dim < head_dim
        and not fam.given_rotary_dim  # their rotary_dim is given, not a fraction
    ):
        # an odd rotated width from partial_rotary_factor (GLM-4-MoE: int(42 x 0.5) = 21):
        # transformers builds arange(0, 21, 2) / 21, 11 frequencies, and rotates a 22-wide
        # table; the exponents keep the odd width as their denominator
        r.warnings.append(
            f"{where}.partial_rotary_factor: int(head_dim {head_dim} x {prf}) = {rotary_dim} "
            f"is odd; the model rotates {rotary_dim + 1} channels with exponents over "
            f"{rotary_dim} (exponent_dim)"
        )
        rotary_dim += 1
    if rotary_dim is None or rotary_dim < 2 or rotary_dim % 2:
        field = f"{where}.partial_rotary_factor"
        if rotary_dim == head_dim or (head_dim % 2 and prf_default):
            # the head dimension itself is odd (or too small): blame where it comes from
            cause, field = head_dim_cause(r, head_dim)
            raise InvalidArgument(
                f"{cause}; RoPE rotates pairs of channels, so the rotary dimension "
                f"({rotary_dim}) must be even and >= 2",
                field=field,
            )
        raise InvalidArgument(
            f"the rotary dimension int(head_dim {head_dim} x partial_rotary_factor {prf}) = "
            f"{rotary_dim} must be even and >= 2",
            field=field,
        )
    return prf, rotary_dim, exponent_dim if exponent_dim is not None else rotary_dim


def _scaling_parameters(
    d: dict[str, Any],
    r: ConfigReader,
    fam: Family,
    where: str,
    rope_type: str,
    prf: float,
    max_pos: int | None,
    nested: bool,
) -> dict[str, Any]:
    """The scaling parameters in effect for ``rope_type`` (transformers' names): those of its
    type from ``d`` (the others warned of as ignored), with ``original_max_position_embeddings``
    and ``factor`` filled in as transformers fills them; the required ones checked."""
    c = r.config
    required, optional = ((), ()) if rope_type == "default" else ROPE_PARAMETER_KEYS[rope_type]
    known = set(required) | set(optional) | {"original_max_position_embeddings"}
    params: dict[str, Any] = {}
    for key, value in d.items():
        if key in known and value is not None:
            params[key] = value
        elif value is not None:
            r.warnings.append(f"{where}.{key}: ignored by rope_type {rope_type!r}")
    module = ROPE_TYPES.get(rope_type)
    original_from = getattr(module, "ORIGINAL_MAX_FROM_CONFIG", None)
    if "partial_rotary_factor" in optional:  # proportional: the fraction is its parameter
        params["partial_rotary_factor"] = float(prf)
    if original_from == "original":
        if not nested and c.get("original_max_position_embeddings") is not None:
            params["original_max_position_embeddings"] = r.int("original_max_position_embeddings")
        elif not nested and fam.original_max_default is not None:
            params["original_max_position_embeddings"] = fam.original_max_default  # Phi3Config
        elif "original_max_position_embeddings" not in params:
            if max_pos is None:
                raise InvalidArgument(
                    f"{where}.original_max_position_embeddings is required for {rope_type} "
                    "(or config.max_position_embeddings)",
                    field=f"{where}.original_max_position_embeddings",
                )
            params["original_max_position_embeddings"] = max_pos
    if (
        getattr(module, "FACTOR_FROM_LENGTHS", False)
        and params.get("factor") is None
        and max_pos is not None
    ):
        params["factor"] = max_pos / params["original_max_position_embeddings"]
    if original_from == "max_position":
        if max_pos is None:
            raise InvalidArgument(
                f"{rope_type} RoPE needs config.max_position_embeddings (the length above "
                "which it rescales the base)",
                field=r.field("max_position_embeddings"),
            )
        if "original_max_position_embeddings" in params:
            r.warnings.append(
                f"{where}.original_max_position_embeddings: ignored by {rope_type}, which uses "
                "max_position_embeddings"
            )
        params["original_max_position_embeddings"] = max_pos
    if original_from is None and params.pop("original_max_position_embeddings", None) is not None:
        r.warnings.append(
            f"{where}.original_max_position_embeddings: ignored by rope_type {rope_type!r}"
        )
    for key in required:
        if params.get(key) is None:
            raise InvalidArgument(
                f"{where}.{key} is required for rope_type {rope_type!r} (required: "
                f"{list(required)}, optional: {list(optional)})",
                field=f"{where}.{key}",
            )
    return params


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _positive_number(value: Any) -> TypeGuard[int | float]:
    return is_number(value) and value > 0


def _dual_chunk(r: ConfigReader, dca: Any) -> dict[str, int]:
    """Qwen2.5-1M's ``dual_chunk_attention_config`` as vLLM reads it: ``{"chunk_size",
    "local_size"}`` (integers, local below chunk)."""
    field = r.field("dual_chunk_attention_config")
    if not isinstance(dca, Mapping) or not all(
        _positive_int(dca.get(k)) for k in ("chunk_size", "local_size")
    ):
        raise InvalidArgument(
            f"{field} must be an object with integers chunk_size and local_size >= 1, got {dca!r}",
            field=field,
        )
    if dca["local_size"] >= dca["chunk_size"]:
        raise InvalidArgument(
            f"{field}.local_size ({dca['local_size']}) must be below chunk_size "
            f"({dca['chunk_size']})",
            field=f"{field}.local_size",
        )
    r.warnings.append(
        f"{field}: read by vLLM only (DualChunkRotaryEmbedding, before any rope type: plain "
        "angles at remapped positions in five caches; engine vllm, dual_chunk_cache); "
        "transformers applies plain RoPE at every position"
    )
    return {"chunk_size": dca["chunk_size"], "local_size": dca["local_size"]}


def _vllm_only(
    d: dict[str, Any],
    r: ConfigReader,
    base: str,
    where: str,
    rope_type: str,
    theta: float,
    head_dim: int,
) -> tuple[MappingProxyType[str, Any] | None, str, float]:
    """What vLLM reads of this rope dict (and the config's ``dual_chunk_attention_config``)
    where transformers reads it otherwise, and transformers' reading: ``(vllm, rope_type,
    theta)``. Hunyuan's NTK-alpha becomes ``default`` with ``theta·alpha^(Dh/(Dh−2))``
    (``compute_ntk_alpha_rope_parameters``); the keys only vLLM reads leave ``d``."""
    c = r.config
    dca = c.get("dual_chunk_attention_config")
    alpha = d.get("alpha")
    vllm_reads_alpha = rope_type in ("dynamic", "xdrope") and alpha is not None
    if dca is None and not vllm_reads_alpha and rope_type not in VLLM_ONLY_ROPE_TYPES:
        return None, rope_type, theta
    vllm: dict[str, Any] = {"rope_type": rope_type, "rope_theta": theta}
    vllm.update({k: plain(d[k]) for k in _VLLM_KEYS if d.get(k) is not None})
    if dca is not None:
        vllm["dual_chunk_attention_config"] = _dual_chunk(r, dca)
    if vllm_reads_alpha:
        if not _positive_number(alpha):
            raise InvalidArgument(
                f"{where}.alpha must be a number > 0, got {alpha!r}", field=f"{where}.alpha"
            )
        if rope_type == "xdrope":
            section = d.get("xdrope_section")
            if not isinstance(section, list) or not all(_positive_int(x) for x in section):
                raise InvalidArgument(
                    f"{where}.xdrope_section must be a list of ints >= 1 (one per position "
                    f"row), got {section!r}",
                    field=f"{where}.xdrope_section",
                )
        if family(base).ntk_alpha:
            # transformers' Hunyuan rotary modules: a fixed base (dim = config.head_dim)
            new_theta = theta * float(alpha) ** (head_dim / (head_dim - 2))
            r.warnings.append(
                f"{where}.alpha {alpha:g}: Hunyuan's NTK-alpha (transformers' ntk_alpha, vLLM's "
                f"DynamicNTKAlphaRotaryEmbedding): the fixed base rope_theta·alpha^(Dh/(Dh−2)) "
                f"= {new_theta:.10g}, read as rope_type default"
            )
            if rope_type == "xdrope":
                r.warnings.append(
                    f"{where}.xdrope_section {d['xdrope_section']}: one frequency block per "
                    "position row (P/W/H/T, vLLM's XDRotaryEmbedding; transformers' HunYuanVL "
                    "reads it as a four-row mrope_section); one row of positions (text) is the "
                    "same on every row"
                )
            for key in ("alpha", "xdrope_section"):
                d.pop(key, None)
            return MappingProxyType(vllm), "default", new_theta
        if rope_type == "dynamic":
            r.warnings.append(
                f"{where}.alpha: read by vLLM only (DynamicNTKAlphaRotaryEmbedding: the fixed "
                f"base rope_theta·alpha^(R/(R−2))); transformers' {base or 'generic'} rotary "
                "module applies dynamic NTK with factor"
            )
            d.pop("alpha")
    need = {"ntk": "factor", "xdrope": "alpha"}.get(rope_type)
    if need is not None:
        value = d.get(need)
        if not _positive_number(value):
            raise InvalidArgument(
                f"{where}.{need} is required for rope_type {rope_type!r} (vLLM's "
                f"get_rope reads it): a number > 0, got {value!r}",
                field=f"{where}.{need}",
            )
        mixed = d.get("mixed_b")
        if rope_type == "ntk" and mixed is not None and not _positive_number(mixed):
            raise InvalidArgument(
                f"{where}.mixed_b must be a number > 0, got {mixed!r}", field=f"{where}.mixed_b"
            )
    if rope_type in VLLM_ONLY_ROPE_TYPES:
        r.warnings.append(
            f"{where}.rope_type {rope_type!r}: vLLM only ("
            + ("NTKScalingRotaryEmbedding" if rope_type == "ntk" else "XDRotaryEmbedding")
            + "); transformers 5.24 has no rule for it, so its tables need engine vllm"
        )
    return MappingProxyType(vllm), rope_type, theta


def _rope_by_layer_type(
    r: ConfigReader,
    fam: Family,
    base: str,
    head_dim: int,
    max_pos: int | None,
    layer_types: list[str] | None,
    dicts: dict[str, dict[str, Any]],
    nested: bool,
) -> tuple[dict[str, RopeLayerType], dict[str, Any]]:
    """Each layer type's RoPE (one set named by every layer type that uses it where the config
    gives one), and the M-RoPE keys found in the dicts."""
    rope: dict[str, RopeLayerType] = {}
    mrope: dict[str, Any] = {}
    for name, d in dicts.items():
        hd = head_dim
        if name == "full_attention" and (
            fam.global_head_dim is not None or r.has("global_head_dim")
        ):
            hd = r.int("global_head_dim", fam.global_head_dim) or head_dim
        hd = _per_layer_head_dim(r, layer_types, name) or hd
        layer, found = _rope_layer(d, r=r, base=base, head_dim=hd, max_pos=max_pos, nested=nested)
        rope[name] = layer
        mrope.update(found)
    if not nested:
        # one set for every layer: name it by the layer types that use it
        single = rope.pop("default")
        names = [t for t in dict.fromkeys(layer_types or ["full_attention"]) if t != "no_rope"]
        for t in names or ["full_attention"]:
            rope[t] = single
    return rope, mrope


def _layout(r: ConfigReader, fam: Family, base: str, model_type: str) -> str:
    """``interleaved`` or ``half``: the record's, unless ``rope_interleave`` says otherwise
    (where the model reads it)."""
    c = r.config
    layout = "interleaved" if "interleaved" in (fam.layout, family(model_type).layout) else "half"
    if fam.always_interleaved:
        if c.get("rope_interleave") is False:
            r.warnings.append(
                f"rope_interleave: ignored, {base} always rotates adjacent pairs "
                "(apply_rotary_pos_emb_interleave)"
            )
    elif c.get("rope_interleave") is False:
        layout = "half"
    elif c.get("rope_interleave") is True:
        layout = "interleaved"
    return layout


def _mrope_section(
    r: ConfigReader, fam: Family, base: str, mrope: Mapping[str, Any]
) -> tuple[list[int] | None, bool]:
    """The M-RoPE sections (the config's, else the record's) and whether they interleave."""
    section = mrope.get("mrope_section")
    if section is None and fam.mrope_section is not None:
        section = list(fam.mrope_section)
        r.warnings.append(
            f"rope_parameters.mrope_section: not given; {base}'s rotary module uses {section}"
        )
    if section is not None and (
        not isinstance(section, list)
        or len(section) != 3
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in section)
    ):
        raise InvalidArgument(
            f"mrope_section must be three ints >= 0 (temporal, height, width), got {section!r}",
            field=r.field("rope_parameters.mrope_section"),
        )
    interleaved = mrope.get("mrope_interleaved")
    if interleaved is None:
        # the models whose rotary module interleaves the sections with no flag in the config
        interleaved = fam.mrope_interleaved
    return section, bool(interleaved)


def read_rope(
    shown_type: str,
    model_type: str,
    base: str,
    r: ConfigReader,
    max_pos: int | None,
    n_layers: int | None,
) -> ModelPositions:
    c = r.config
    fam = family(base)
    if r.has("qk_rope_head_dim") and (fam.mla or (is_mla(base, r) and not r.has("head_dim"))):
        head_dim = r.int("qk_rope_head_dim")
    else:
        head_dim = read_head_dim(r)
    if head_dim is None:
        raise InvalidArgument(
            f"{r.field('head_dim')} is missing: give head_dim, or hidden_size and "
            "num_attention_heads",
            field=r.field("head_dim"),
        )
    layer_types = _layer_types(base, r, n_layers)
    dicts, nested = _rope_dicts(base, model_type, r, layer_types)
    rope, mrope = _rope_by_layer_type(r, fam, base, head_dim, max_pos, layer_types, dicts, nested)
    layout = _layout(r, fam, base, model_type)
    section, interleaved = _mrope_section(r, fam, base, mrope)
    first = next(iter(rope.values()))
    temperature = None
    if fam.temperature_tuning and _temperature_tuning(r):
        temperature = MappingProxyType(
            {
                "floor_scale": float(r.float("floor_scale", 8192.0)),  # type: ignore[arg-type]
                "attn_scale": float(r.float("attn_scale", 0.1)),  # type: ignore[arg-type]
            }
        )
    sliding = r.int("sliding_window", minimum=0) or None
    if fam.layer_rule == "qwen_sliding" and not c.get("use_sliding_window"):
        sliding = None
    attn_head_dim = head_dim if is_mla(base, r) else read_head_dim(r)
    return ModelPositions(
        model_type=shown_type,
        kind="rope",
        head_dim=head_dim,
        rotary_dim=first.rotary_dim,
        layout=layout,
        max_position_embeddings=max_pos,
        layer_types=tuple(layer_types or ()),
        rope=MappingProxyType(rope),
        per_layer_type=nested,
        softmax_scale=read_softmax_scale(base, r, attn_head_dim, first),
        attention_temperature=temperature,
        sliding_window=sliding,
        mrope_section=tuple(section) if section is not None else None,
        mrope_interleaved=bool(interleaved) if section is not None else False,
        rotation="negative" if {base, model_type} & NEGATIVE_ROTATION_MODEL_TYPES else "positive",
        rotated_channels=(
            "trailing" if {base, model_type} & TRAILING_ROTARY_MODEL_TYPES else "leading"
        ),
        warnings=tuple(r.warnings),
    )


def _temperature_tuning(r: ConfigReader) -> bool:
    """Llama 4's ``attn_temperature_tuning`` (default on). The published Scout file has 4, an
    int; transformers 5 types the field bool, so any nonzero number turns it on."""
    value = r.config.get("attn_temperature_tuning")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value != 0
    return r.bool("attn_temperature_tuning", True)


__all__ = ["read_rope"]

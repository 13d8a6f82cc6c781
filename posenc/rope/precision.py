"""RoPE in an engine's own precision: transformers' float32 arithmetic, step for step.

posenc's tables are exact by default (float64 angles, cast once). ``precision: "engine"`` asks
instead for what the engine itself computes, in its own dtype and order of operations, so a
caller porting RoPE to a kernel, or debugging a model, can compare bit for bit.

transformers 5 (``modeling_rope_utils.py`` and each model's ``<Model>RotaryEmbedding``):

- ``inv_freq`` is computed once in float32 by the rope type's init function
  (``1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`` and the type's float32 edits);
  dynamic NTK recomputes it, with a float32 base, when ``max(position) + 1`` passes the
  original length, and LongRoPE picks its long factors there;
- ``forward``: ``freqs = position_ids[..., None].float() * inv_freq`` (one float32 product),
  ``emb = cat(freqs, freqs)``, ``cos = emb.cos() * attention_scaling`` (torch's float32
  ``cos``), cast to the activations' dtype. Llama 4 takes ``torch.polar(ones, freqs)`` instead.

Every step here is the same torch operation on the same float32 values, so on the same torch
build the tables equal the module's output bit for bit (torch's float32 ``cos``/``sin`` give
each element the same value whatever the tensor's shape, so row blocks equal the whole table).

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.facts.families import types_where
from posenc.facts.model_configs import MODEL_CONFIGS
from posenc.rope.float32 import default_float32
from posenc.rope.llamacpp import (
    ROPE_MODES,
    LlamaCppRope,
    ggml_rope_tables,
    llamacpp_inv_freq,
    llamacpp_rope_for,
    llamacpp_rope_tables,
)
from posenc.rope.mlx import (
    MlxRope,
    mlx_exact_tables,
    mlx_magnitude,
    mlx_rope_for,
    mlx_rope_tables,
    mlx_speeds,
)
from posenc.rope.scaling import ROPE_TYPES, RopeScaling, rope_inv_freq
from posenc.rope.sections import mrope_channel_axes
from posenc.rope.vllm import VllmRope, default_max_position, vllm_for_fields

Precision = Literal["exact", "engine"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

#: Text model types whose transformers rotary module returns ``torch.polar(1, θ)`` (complex)
#: rather than ``cos``/``sin`` of ``θ`` (the records' ``polar_rotary``).
POLAR_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.polar_rotary)


def transformers_float32_hook(rope_type: str) -> Any:
    """The scaling type's ``transformers_float32(E, base, params, seq_len) -> inv_freq (E/2,)``
    (transformers' float32 rule, in the type's module), or None where its module has none."""
    module = ROPE_TYPES.get(rope_type)
    return None if module is None else getattr(module, "transformers_float32", None)


def vllm_float32_hook(rope_type: str) -> Any:
    """The scaling type's ``vllm_float32(R, base, params, vllm_class, max_position) ->
    inv_freq (R/2,)`` (vLLM's float32 rule, in the type's module), or None."""
    module = ROPE_TYPES.get(rope_type)
    return None if module is None else getattr(module, "vllm_float32", None)


def check_vllm_float32(rope_type: str) -> Any:
    """The type's ``vllm_float32`` hook, or a refusal naming the engine and the type.

    Raises:
        InvalidArgument: the type's module gives no ``vllm_float32``.
    """
    hook = vllm_float32_hook(rope_type)
    if hook is None:
        raise InvalidArgument(
            f'precision "engine" of engine vllm has no float32 rule for scaling type '
            f'{rope_type!r} (its module gives no vllm_float32); ask precision "exact"',
            field="precision",
        )
    return hook


def check_transformers_float32(rope_type: str) -> Any:
    """The type's ``transformers_float32`` hook, or a refusal naming the engine and the type
    (a type registered as one module without it has no ``precision: "engine"`` yet).

    Raises:
        InvalidArgument: the type's module gives no ``transformers_float32``.
    """
    hook = transformers_float32_hook(rope_type)
    if hook is None:
        raise InvalidArgument(
            f'precision "engine" of engine transformers has no float32 rule for scaling type '
            f"{rope_type!r} (its module gives no transformers_float32); ask precision "
            '"exact"',
            field="precision",
        )
    return hook


def transformers_inv_freq(
    rotary_dim: int,
    base: float,
    scaling: RopeScaling | None = None,
    *,
    seq_len: int,
    exponent_dim: int | None = None,
) -> tuple[Tensor, float]:
    """The float32 ``inv_freq`` transformers' rotary module uses for a sequence of ``seq_len``
    positions (``max(position) + 1``), and its attention scaling.

    Returns:
        ``(inv_freq (R/2,) float32, attention_scaling)``; the scaling is the same Python float
        as :func:`posenc.rope.rope_inv_freq`'s (transformers computes it with ``math``).
    """
    dim = rotary_dim if exponent_dim is None else exponent_dim
    _exact, attention_scaling = rope_inv_freq(
        rotary_dim, base, scaling, seq_len=seq_len, exponent_dim=exponent_dim
    )
    if scaling is None:
        inv = default_float32(dim, base)
    else:  # the type's own hook, beside its exact rule in its module
        hook = check_transformers_float32(scaling.type)
        inv = hook(dim, base, scaling.params(), seq_len)
    return inv[: rotary_dim // 2], float(attention_scaling)


def transformers_half_tables(
    positions: Tensor, inv_freq: Tensor, attention_scaling: float, *, polar: bool = False
) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` of the forward's ``freqs`` before ``cat``: ``(T, R/2)`` float32 each.

    ``freqs = positions.float()[:, None] * inv_freq`` (float32), then ``freqs.cos() *
    attention_scaling`` (or Llama 4's ``torch.polar(ones, freqs) * attention_scaling``).
    """
    freqs = positions[..., None].float() * inv_freq.to(dtype=torch.float)  # (..., T, R/2)
    if polar:
        cis = torch.polar(torch.ones_like(freqs), freqs) * attention_scaling
        return cis.real.contiguous(), cis.imag.contiguous()
    return freqs.cos() * attention_scaling, freqs.sin() * attention_scaling


def widen(half: Tensor, layout: str) -> Tensor:
    """``(T, R/2)`` values to ``(T, R)`` in ``layout``: ``cat(x, x)`` (half) or each value twice
    in place (interleaved, as DeepSeek, GLM and Llama 4 apply it)."""
    return torch.cat((half, half), -1) if layout == "half" else half.repeat_interleave(2, -1)


def transformers_cos_sin(
    positions: Tensor,
    *,
    rotary_dim: int,
    base: float,
    layout: str = "half",
    scaling: RopeScaling | None = None,
    exponent_dim: int | None = None,
    rotation: str = "positive",
    mrope_section: Sequence[int] | None = None,
    mrope_interleaved: bool = False,
    polar: bool = False,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor, Tensor]:
    """transformers' ``(cos, sin, inv_freq)`` in its own float32 arithmetic.

    Args:
        positions: ``(T,)`` int64 positions, or ``(3, T)`` M-RoPE rows with ``mrope_section``.
        seq_len: the sequence length dynamic NTK and LongRoPE see (default ``max + 1``).
        polar: Llama 4's complex ``torch.polar`` form.
        dtype: the activations' dtype the module casts to at the end.

    Returns:
        cos, sin ``(T, R)`` in ``layout`` and the float32 ``inv_freq (R/2,)`` cast to ``dtype``.
    """
    length = int(positions.max()) + 1 if seq_len is None else seq_len
    if positions.numel() == 0:
        length = 1
    inv, scale = transformers_inv_freq(
        rotary_dim, base, scaling, seq_len=length, exponent_dim=exponent_dim
    )
    cos, sin = transformers_half_tables(positions, inv, scale, polar=polar)
    if mrope_section is not None:  # (3, T, R/2): each frequency from the axis that owns it
        axes = mrope_channel_axes(rotary_dim, mrope_section, interleaved=mrope_interleaved)
        index = axes[None, None, :].expand(1, cos.shape[1], -1)
        cos, sin = cos.gather(0, index)[0], sin.gather(0, index)[0]
    if rotation == "negative":
        sin = -sin
    return widen(cos, layout).to(dtype), widen(sin, layout).to(dtype), inv.to(dtype)


#: vLLM's own rotary classes whose float32 cache posenc replays (``VllmRope.rope_type``) beside
#: the scaling types' (each type's module gives ``vllm_float32``): the base ``RotaryEmbedding``,
#: Hunyuan's alpha, fixed and mixed NTK, dual chunk.
VLLM_OWN_CLASSES: frozenset[str] = frozenset({"default", "dynamic_alpha", "ntk", "dual_chunk"})


def _preset_text_config(p: Mapping[str, Any]) -> Mapping[str, Any]:
    """The quoted config's text part behind a preset (empty when there is none)."""
    preset = p.get("preset")
    if not isinstance(preset, str):
        return {}
    quoted = MODEL_CONFIGS.get(preset.removesuffix("-local"))
    if quoted is None:
        return {}
    config = quoted[1]
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type"):
        return text
    return config


def model_type_of(p: Mapping[str, Any]) -> str:
    """The text ``model_type`` behind resolved fields: the config's, else the preset's config's
    (``""`` when neither names one)."""
    if p.get("config_model_type"):
        return str(p["config_model_type"])
    return str(_preset_text_config(p).get("model_type") or "")


def _member(name: str, type_: kinds.FieldType, description: str, **kw: Any) -> kinds.FieldSpec:
    return kinds.FieldSpec(name, type_, description, default=None, **kw)


#: The rope kind's ``llamacpp`` field: ggml_rope_ext's arguments given directly (a GGUF body
#: is read into it), in place of what llama.cpp would read from the config.
LLAMACPP_FIELD = kinds.FieldSpec(
    "llamacpp",
    "struct",
    "engine llama.cpp: ggml_rope_ext's arguments, given directly (a GGUF body is read into "
    "them) instead of read from the preset or config; n_dims defaults to rotary_dim",
    default=None,
    schema_name="LlamaCppRopeRequest",
    example={"mode": "neox", "freq_base": 1000000.0, "freq_scale": 0.25, "ext_factor": 1.0},
    members=(
        _member("n_dims", "int", "the rotated dimensions (n_rot)", minimum=2, multiple_of=2),
        _member("mode", "str", "normal, neox, mrope or imrope", choices=tuple(ROPE_MODES)[:4]),
        _member("freq_base", "float", "rope.freq_base", exclusive_minimum=0),
        _member("freq_scale", "float", "1 / rope.scaling.factor", exclusive_minimum=0),
        _member("ext_factor", "float", "YaRN's extrapolation mix (1 with YaRN)"),
        _member("attn_factor", "float", "the magnitude passed to ggml"),
        _member("beta_fast", "float", "YaRN: default 32"),
        _member("beta_slow", "float", "YaRN: default 1"),
        _member("n_ctx_orig", "int", "rope.scaling.original_context_length", minimum=0),
        _member("sections", "ints", "M-RoPE's four sections", minimum=0, length=4),
        _member("freq_factors", "floats", "the n_dims/2 frequency divisors (rope_freqs)"),
    ),
)


def _given_llamacpp(p: Mapping[str, Any]) -> LlamaCppRope:
    given = {k: v for k, v in dict(p["llamacpp"]).items() if v is not None}
    given.setdefault("n_dims", int(p["rotary_dim"]))
    given.setdefault("mode", "normal" if p["layout"] == "interleaved" else "neox")
    given.setdefault("freq_base", float(p["base"]))
    if given["n_dims"] > int(p["rotary_dim"]):
        raise InvalidArgument(
            f"llamacpp.n_dims {given['n_dims']} is more than rotary_dim {p['rotary_dim']}",
            field="llamacpp.n_dims",
        )
    for name in ("sections", "freq_factors"):
        if given.get(name) is not None:
            given[name] = tuple(given[name])
    if given.get("sections") is not None and sum(given["sections"]) <= 0:
        raise InvalidArgument(
            f"llamacpp.sections must not all be 0, got {list(given['sections'])}",
            field="llamacpp.sections",
        )
    for name, value in given.items():
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise InvalidArgument(f"llamacpp.{name} must be finite", field=f"llamacpp.{name}")
    factors = given.get("freq_factors")
    if factors is not None and len(factors) < given["n_dims"] // 2:
        raise InvalidArgument(
            f"llamacpp.freq_factors needs n_dims/2 = {given['n_dims'] // 2} values, got "
            f"{len(factors)}",
            field="llamacpp.freq_factors",
        )
    return LlamaCppRope(**given)


def _max_position_embeddings(p: Mapping[str, Any]) -> Any:
    """The config's ``max_position_embeddings`` (the preset's config's), or None."""
    mpe = p.get("config_max_position_embeddings")
    if mpe is None:
        mpe = _preset_text_config(p).get("max_position_embeddings")
    return mpe


def llamacpp_complete(p: dict[str, Any]) -> dict[str, Any]:
    """Resolved fields with ``engine: "llama.cpp"``: llama.cpp's arguments (``llamacpp``, a
    plain dict) and its layout."""
    if p.get("llamacpp") is not None:  # given directly, or read from a GGUF
        rope = _given_llamacpp(p)
        return {
            **p,
            "rotary_dim": rope.n_dims,
            "layout": rope.layout,
            "llamacpp": rope.to_dict(),
            "llamacpp_notes": [],
        }
    mpe = _max_position_embeddings(p)
    rope = llamacpp_rope_for(
        model_type=model_type_of(p),
        rotary_dim=int(p["rotary_dim"]),
        base=float(p["base"]),
        layout=p["layout"],
        scaling=p.get("scaling"),
        max_position_embeddings=mpe,
        n_ctx=p.get("max_model_len"),
        mrope_section=p.get("mrope_section"),
    )
    return {
        **p,
        "layout": rope.layout,
        "llamacpp": rope.to_dict(),
        "llamacpp_notes": list(rope.notes),
    }


def mlx_complete(p: dict[str, Any]) -> dict[str, Any]:
    """Resolved fields with ``engine: "mlx"``: mlx-lm's ``initialize_rope`` arguments
    (``mlx``)."""
    rope = mlx_rope_for(
        rotary_dim=int(p["rotary_dim"]),
        base=float(p["base"]),
        layout=p["layout"],
        scaling=p.get("scaling"),
        max_position_embeddings=_max_position_embeddings(p),
    )
    return {**p, "layout": rope.layout, "mlx": rope.to_dict()}


def _mlx_half(p: Mapping[str, Any], pos: Tensor, length: int | None) -> tuple[Tensor, Tensor]:
    """MLX's ``(T, R/2)`` cos and sin (``length``: the call's ``T + offset``, for dynamic NTK)."""
    rope = MlxRope(**p["mlx"])
    if p.get("precision") == "engine":
        return mlx_rope_tables(pos, rope, length)
    return mlx_exact_tables(pos, rope, length)


def llamacpp_arguments(p: Mapping[str, Any]) -> LlamaCppRope:
    """The :class:`LlamaCppRope` of resolved fields with ``llamacpp``."""
    d = dict(p["llamacpp"])
    sections = d.pop("sections")
    factors = d.pop("freq_factors")
    return LlamaCppRope(
        **d,
        sections=tuple(sections) if sections is not None else None,
        freq_factors=tuple(factors) if factors is not None else None,
    )


def mlx_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    """What ``meta`` says of MLX: its ``initialize_rope`` arguments, magnitude and layout."""
    magnitude = mlx_magnitude(MlxRope(**p["mlx"]))
    return {"mlx": dict(p["mlx"]), "attention_scaling": magnitude, "layout": p["layout"]}


def llamacpp_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    """What ``meta`` says of llama.cpp: its arguments, its magnitude and how it read the
    model."""
    _speed, magnitude = llamacpp_inv_freq(llamacpp_arguments(p))
    return {
        "llamacpp": dict(p["llamacpp"]),
        "llamacpp_notes": list(p.get("llamacpp_notes") or []),
        "attention_scaling": magnitude,
        "layout": p["layout"],
    }


def _arguments(p: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`transformers_cos_sin`'s keyword arguments from resolved rope fields."""
    scaling = RopeScaling.from_dict(p["scaling"]) if p.get("scaling") is not None else None
    return dict(
        rotary_dim=int(p["rotary_dim"]),
        base=float(p["base"]),
        layout=p["layout"],
        scaling=scaling,
        exponent_dim=p.get("exponent_dim"),
        rotation=p.get("rotation") or "positive",
        polar=model_type_of(p) in POLAR_MODEL_TYPES,
    )


def refuse_llamacpp_field(p: Mapping[str, Any], engine: str) -> None:
    """``llamacpp`` (ggml_rope_ext's arguments) given to an engine that reads none."""
    if p.get("llamacpp") is not None:
        raise InvalidArgument(
            f'llamacpp gives llama.cpp\'s arguments: it needs engine "llama.cpp", not {engine!r}',
            field="llamacpp",
        )


def refuse_dual_chunk(p: Mapping[str, Any]) -> None:
    """``dual_chunk_cache`` given to an engine other than vLLM."""
    if p.get("dual_chunk_cache") is not None:
        raise InvalidArgument(
            "dual_chunk_cache picks one of vLLM's DualChunkRotaryEmbedding caches: it needs "
            "engine vllm (transformers applies plain RoPE to a dual-chunk config)",
            field="dual_chunk_cache",
        )


def wants_engine_precision(p: Mapping[str, Any]) -> bool:
    """Whether resolved fields ask for the engine's own arithmetic (``precision: "engine"``)."""
    return bool(p.get("precision", "exact") != "exact")


def check_vllm_engine_types(p: Mapping[str, Any]) -> None:
    """``precision: "engine"`` with vLLM: its own classes posenc replays, or a scaling type whose
    module gives vLLM's float32 rule (``vllm_float32``); else a refusal naming the class."""
    rope = vllm_for_fields(p)
    if rope.rope_type in VLLM_OWN_CLASSES:
        return
    if p.get("scaling") is None or p.get("config_vllm") is not None:  # a vLLM-only class
        covered = sorted(VLLM_OWN_CLASSES | {t for t in ROPE_TYPES if vllm_float32_hook(t)})
        raise InvalidArgument(
            f'precision "engine" for vLLM covers its {", ".join(covered)} classes; this config '
            f'builds {rope.rope_type!r}; ask precision "exact"',
            field="precision",
        )
    check_vllm_float32(RopeScaling.from_dict(p["scaling"]).type)


def check_xdrope_engine(p: Mapping[str, Any], engine: str, *, replayed: bool) -> None:
    """XD-RoPE (HunyuanOCR) with ``precision: "engine"``: transformers' ``HunYuanVLRotaryEmbedding``
    only (``replayed``; vLLM 0.32 has no ``XDRotaryEmbedding``: it serves the model on its
    Transformers backend), in the half layout that module splits."""
    if not replayed:
        raise InvalidArgument(
            f'precision "engine" covers XD-RoPE (HunyuanOCR) for engine "transformers" only '
            f"(vLLM 0.32 has no XDRotaryEmbedding and runs HunYuanVL on its Transformers "
            f'backend); got {engine!r}; ask engine "transformers" or precision "exact"',
            field="precision",
        )
    if p["layout"] != "half":
        raise InvalidArgument(
            "transformers' HunYuanVL splits the half layout's two copies over different "
            "position rows, which the interleaved layout cannot hold; ask layout half",
            field="layout",
        )


def _hunyuan_vl_tables(p: Mapping[str, Any]) -> dict[str, Tensor]:
    """``HunYuanVLRotaryEmbedding.forward`` in float32: the default ``inv_freq`` of the
    (alpha-rescaled) base; every row of positions (P/W/H/T, or text expanded to all of them)
    ``position_ids[..., None].float() * inv_freq``, ``cos()``/``sin()`` times
    ``attention_scaling`` (1.0); then ``recomposition_frequencies``: ``cat((f, f))`` split by
    twice each ``xdrope_section`` part, part ``i`` from row ``i mod n``. ``(T, R)`` each."""
    section = [int(x) for x in p["config_xdrope_section"]]
    rows = p.get("positions")
    if rows is None:
        rows = list(range(int(p["seq_len"])))
    pos = torch.tensor(rows, dtype=torch.int64)
    if pos.ndim == 1:  # text: the module expands one row to every axis
        pos = pos[None, :].expand(len(section), -1)
    inv = default_float32(int(p["rotary_dim"]), float(p["base"]))
    freqs = pos[..., None].float() * inv
    out = {}
    for name, values in (("cos", freqs.cos() * 1.0), ("sin", freqs.sin() * 1.0)):
        doubled = torch.cat((values, values), dim=-1)
        parts = torch.split(doubled, [2 * x for x in section], dim=-1)
        out[name] = torch.cat([m[i % len(section)] for i, m in enumerate(parts)], dim=-1)
    return {**out, "inv_freq": inv}


def _ntk(dim: int, base: float, factor: float, mixed_b: float | None) -> Tensor:
    """``NTKScalingRotaryEmbedding._compute_inv_freq`` in float32: fixed (``base·factor``, then
    ``/ factor ** (2/R)``) or mixed (``/ exp(a · m ** b)`` with a float32 ``a``)."""
    inv = default_float32(dim, base * (factor if mixed_b is None else 1))
    if mixed_b is None:
        fixed: Tensor = inv / factor ** (2 / dim)
        return fixed
    a = torch.tensor(factor).log() / (dim / 2) ** mixed_b
    lambda_1_m = (a * torch.arange(1, dim // 2 + 1).float() ** mixed_b).exp()
    mixed: Tensor = inv / lambda_1_m
    return mixed


def vllm_inv_freq(p: Mapping[str, Any], rope: VllmRope) -> Tensor:
    """The float32 ``inv_freq`` of the vLLM class ``rope.rope_type`` (``_compute_inv_freq``),
    ``(R/2,)``: the base class's ``1.0 / (base ** (arange(0, R, 2, dtype=float) / R))`` with
    the class's base (dynamic NTK's ``base·((L·f/L) − (f − 1))^(R/(R−2))``, Hunyuan's
    ``base·alpha^(R/(R−2))``, NTK's) and float32 edits (Llama 3's, YaRN's; DeepSeek's YaRN
    always truncated; LongRoPE's factors; mixed NTK's ``exp``)."""
    rotary_dim, base = int(p["rotary_dim"]), float(p["base"])
    s = RopeScaling.from_dict(p["scaling"]) if p.get("scaling") is not None else None
    vllm = dict(p.get("config_vllm") or {})
    theta = float(vllm.get("rope_theta", base))
    kind = rope.rope_type
    if kind not in VLLM_OWN_CLASSES:  # a scaling type's class: its module's float32 rule
        assert s is not None  # vLLM builds these classes from a scaling only
        hook = check_vllm_float32(s.type)
        max_position = p.get("config_max_position_embeddings") or default_max_position(
            p["scaling"], p.get("max_model_len")
        )
        inv: Tensor = hook(rotary_dim, base, s.params(), kind, max_position)
        return inv
    if kind == "dynamic_alpha":
        alpha = float(vllm["alpha"])
        return default_float32(rotary_dim, theta * alpha ** (rotary_dim / (rotary_dim - 2)))
    if kind == "ntk":
        mixed = vllm.get("mixed_b")
        return _ntk(
            rotary_dim, theta, float(vllm["factor"]), None if mixed is None else float(mixed)
        )
    return default_float32(rotary_dim, theta if kind == "dual_chunk" else base)


def vllm_half_tables(positions: Tensor, p: Mapping[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """vLLM's float32 cache rows at ``positions``: ``(cos, sin)`` ``(T, R/2)`` and its float32
    ``inv_freq``.

    ``_compute_cos_sin_cache``: ``t = arange(rows).float()`` (divided by the factor first in
    ``LinearScalingRotaryEmbedding``; ``DualChunkRotaryEmbedding``'s five caches hold remapped
    positions, small integers exact in float32), ``einsum("i,j->ij", t, inv_freq)`` (one
    float32 product), ``cos()``, times the class's magnitude (YaRN's, DeepSeek's ``mscale``,
    LongRoPE's) where it has one. ``inv_freq``: :func:`vllm_inv_freq`.
    """
    rope: VllmRope = vllm_for_fields(p)
    inv = vllm_inv_freq(p, rope)
    t = rope.angle_positions(positions.to(torch.int64)).to(torch.float)
    if rope.rope_type == "linear":
        t = t / float(p["scaling"]["factor"])
    freqs = t[:, None] * inv[None, :]
    if rope.rope_type in _VLLM_MAGNITUDE_TYPES:
        scale = rope.attention_scaling
        return freqs.cos() * scale, freqs.sin() * scale, inv
    return freqs.cos(), freqs.sin(), inv


#: vLLM's classes that multiply their cache by a magnitude (``mscale``).
_VLLM_MAGNITUDE_TYPES = frozenset(
    {"yarn", "deepseek_yarn", "deepseek_llama_scaling", "longrope", "longrope_long"}
)


def _vllm_mrope(
    p: Mapping[str, Any], rows: Sequence[Sequence[int]]
) -> tuple[Tensor, Tensor, Tensor]:
    """``MRotaryEmbedding.forward_native``: the cache rows of the three position rows
    ``(3, T, R/2)``, each frequency taken from its axis (``split(mrope_section)``, or
    ``apply_interleaved_rope``): ``(cos, sin)`` ``(T, R/2)`` and ``inv_freq``."""
    pos = torch.tensor([list(r) for r in rows], dtype=torch.int64)  # (3, T)
    parts = [vllm_half_tables(pos[i], p) for i in range(pos.shape[0])]
    cos = torch.stack([c for c, _s, _i in parts])  # (3, T, R/2)
    sin = torch.stack([s for _c, s, _i in parts])
    axes = mrope_channel_axes(
        int(p["rotary_dim"]), p["mrope_section"], interleaved=bool(p["mrope_interleaved"])
    )
    index = axes[None, None, :].expand(1, cos.shape[1], -1)
    return cos.gather(0, index)[0], sin.gather(0, index)[0], parts[0][2]


def transformers_tables(
    p: Mapping[str, Any],
    rows: Sequence[Sequence[int]] | None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """The rope kind's tensors with ``precision: "engine"``: transformers' own float32
    ``cos``, ``sin`` and ``inv_freq`` for resolved fields (``rows``: M-RoPE's three rows).

    1-D positions are :func:`transformers_blocks` filled whole; M-RoPE's three rows of positions
    and HunyuanOCR's XD-RoPE rows, which have no row blocks, are computed here."""
    if p.get("config_xdrope_section") is not None:  # transformers' HunYuanVL
        tables = _hunyuan_vl_tables(p)
        return {k: v.to(device=device, dtype=dtype) for k, v in tables.items()}
    if rows is None:
        blocks = transformers_blocks(p, device=device, dtype=dtype)
        return {name: table.whole().to(device) for name, table in blocks.items()}
    kw = _arguments(p)
    pos = torch.tensor([list(r) for r in rows], dtype=torch.int64)  # (3, T)
    kw.update(mrope_section=p["mrope_section"], mrope_interleaved=bool(p["mrope_interleaved"]))
    cos, sin, inv = transformers_cos_sin(pos, dtype=dtype, **kw)
    return {"cos": cos.to(device), "sin": sin.to(device), "inv_freq": inv.to(device)}


def vllm_tables(
    p: Mapping[str, Any],
    rows: Sequence[Sequence[int]] | None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """vLLM's float32 cache rows (``precision: "engine"``): 1-D positions by
    :func:`vllm_blocks`, M-RoPE's three rows by ``MRotaryEmbedding`` (each frequency from its
    axis's cache row)."""
    if rows is None:
        blocks = vllm_blocks(p, device=device, dtype=dtype)
        return {name: table.whole().to(device) for name, table in blocks.items()}
    cos, sin, inv = _vllm_mrope(p, rows)
    layout = p["layout"]
    return {
        "cos": widen(cos, layout).to(device=device, dtype=dtype),
        "sin": widen(sin, layout).to(device=device, dtype=dtype),
        "inv_freq": inv.to(device=device, dtype=dtype),
    }


def _llamacpp_half(
    p: Mapping[str, Any], pos: Tensor, length: int | None = None
) -> tuple[Tensor, Tensor]:
    """llama.cpp's (or MLX's) ``(T, R/2)`` cos and sin: the engine's float32 or exact float64
    (``length``: the whole table's ``max + 1``, default the rows')."""
    if p.get("mlx") is not None:
        return _mlx_half(p, pos, length)
    rope = llamacpp_arguments(p)
    if p.get("precision") == "engine":
        return ggml_rope_tables(pos, rope)
    return llamacpp_rope_tables(pos, rope)


def own_tables(
    p: Mapping[str, Any],
    rows: Sequence[Sequence[int]] | None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """llama.cpp's (``llamacpp`` fields) or MLX's (``mlx`` fields) tables, exact or in the
    engine's float32 (``precision``): 1-D positions by :func:`own_blocks`, else M-RoPE's rows."""
    if rows is None and p.get("config_xdrope_section") is None:
        blocks = own_blocks(p, device=device, dtype=dtype)
        return {name: table.whole().to(device) for name, table in blocks.items()}
    return _own_rows(p, rows, device=device, dtype=dtype)


def _own_rows(
    p: Mapping[str, Any],
    rows: Sequence[Sequence[int]] | None,
    *,
    device: torch.device | str | None,
    dtype: torch.dtype,
) -> dict[str, Tensor]:
    """:func:`own_tables` of M-RoPE's three rows (MLX: text positions only), or of positions
    with XD-RoPE's sections, which have no row blocks."""
    if rows is not None:
        pos = torch.tensor([list(r) for r in rows], dtype=torch.int64)  # (3, T)
        if p.get("mlx") is not None:  # mlx-lm's "mrope" is plain RoPE: text positions only
            if not bool((pos == pos[:1]).all()):
                raise InvalidArgument(
                    "engine mlx applies plain RoPE (mlx-lm's mrope type): give one row of "
                    "positions, or three equal ones",
                    field="positions",
                )
            pos = pos[0]
    elif p.get("positions") is not None:
        pos = torch.tensor(list(p["positions"]), dtype=torch.int64)
    else:
        pos = torch.arange(int(p["seq_len"]), dtype=torch.int64)
    length = int(pos.max()) + 1 if pos.numel() else 1
    cos, sin = _llamacpp_half(p, pos, length)
    speed = _speeds(p, length)
    layout = p["layout"]
    return {
        "cos": widen(cos, layout).to(device=device, dtype=dtype),
        "sin": widen(sin, layout).to(device=device, dtype=dtype),
        "inv_freq": speed.to(device=device, dtype=dtype),
    }


def transformers_blocks(
    p: Mapping[str, Any], *, device: torch.device | str | None = None, dtype: torch.dtype
) -> dict[str, TableBlocks]:
    """transformers' float32 tables for 1-D positions in row blocks (each element is computed
    alone, so the blocks are the whole table's bytes)."""
    held, total, length, dev = _extent(p, device)
    kw = _arguments(p)
    inv, scale = transformers_inv_freq(
        kw["rotary_dim"], kw["base"], kw["scaling"], seq_len=length, exponent_dim=kw["exponent_dim"]
    )
    width = kw["rotary_dim"]

    def filler(which: str) -> Any:
        def fill(start: int, stop: int, out: Tensor) -> None:
            pos = torch.arange(start, stop) if held is None else held[start:stop]
            cos, sin = transformers_half_tables(pos, inv, scale, polar=kw["polar"])
            half = cos if which == "cos" else (-sin if kw["rotation"] == "negative" else sin)
            out.copy_(widen(half, kw["layout"]).to(dtype))

        return fill

    out = {w: TableBlocks(w, (total, width), dtype, filler(w), dev) for w in ("cos", "sin")}
    out["inv_freq"] = tensor_blocks("inv_freq", inv.to(dtype))
    return out


def _extent(
    p: Mapping[str, Any], device: torch.device | str | None
) -> tuple[Tensor | None, int, int, torch.device]:
    """``(positions given or None, T, max + 1, device)`` of resolved fields."""
    held = None if p.get("positions") is None else torch.tensor(list(p["positions"]))
    total = int(p["seq_len"]) if held is None else held.numel()
    length = total if held is None else int(held.max()) + 1
    dev = torch.device("cpu") if device is None else torch.device(device)
    return held, total, length, dev


def vllm_blocks(
    p: Mapping[str, Any], *, device: torch.device | str | None = None, dtype: torch.dtype
) -> dict[str, TableBlocks]:
    """vLLM's float32 cache rows in row blocks (each row is computed alone)."""
    held, total, _length, dev = _extent(p, device)
    return _vllm_blocks(p, held, total, dev, dtype)


def own_blocks(
    p: Mapping[str, Any], *, device: torch.device | str | None = None, dtype: torch.dtype
) -> dict[str, TableBlocks]:
    """:func:`own_tables` for 1-D positions in row blocks."""
    held, total, length, dev = _extent(p, device)
    return _llamacpp_blocks(p, held, total, length, dev, dtype)


def _vllm_blocks(
    p: Mapping[str, Any], held: Tensor | None, total: int, dev: torch.device, dtype: torch.dtype
) -> dict[str, TableBlocks]:
    """vLLM's float32 cache rows in row blocks (each row is computed alone)."""
    width = int(p["rotary_dim"])

    def filler(which: str) -> Any:
        def fill(start: int, stop: int, out: Tensor) -> None:
            pos = torch.arange(start, stop) if held is None else held[start:stop]
            cos, sin, _inv = vllm_half_tables(pos, p)
            out.copy_(widen(cos if which == "cos" else sin, p["layout"]).to(dtype))

        return fill

    out = {w: TableBlocks(w, (total, width), dtype, filler(w), dev) for w in ("cos", "sin")}
    _c, _s, inv = vllm_half_tables(torch.zeros(1, dtype=torch.int64), p)
    out["inv_freq"] = tensor_blocks("inv_freq", inv.to(dtype))
    return out


def _llamacpp_blocks(
    p: Mapping[str, Any],
    held: Tensor | None,
    total: int,
    length: int,
    dev: torch.device,
    dtype: torch.dtype,
) -> dict[str, TableBlocks]:
    """llama.cpp's tables in row blocks (each position's row is computed alone)."""
    width = int(p["rotary_dim"])

    def filler(which: str) -> Any:
        def fill(start: int, stop: int, out: Tensor) -> None:
            pos = torch.arange(start, stop) if held is None else held[start:stop]
            cos, sin = _llamacpp_half(p, pos, length)
            out.copy_(widen(cos if which == "cos" else sin, p["layout"]).to(dtype))

        return fill

    out = {w: TableBlocks(w, (total, width), dtype, filler(w), dev) for w in ("cos", "sin")}
    out["inv_freq"] = tensor_blocks("inv_freq", _speeds(p, length).to(dtype))
    return out


def _speeds(p: Mapping[str, Any], length: int = 1) -> Tensor:
    """The ``(R/2,)`` angle per position of llama.cpp's or MLX's rule, float64."""
    if p.get("mlx") is not None:
        return mlx_speeds(MlxRope(**p["mlx"]), length)
    speed, _scale = llamacpp_inv_freq(llamacpp_arguments(p))
    return speed


__all__ = [
    "LLAMACPP_FIELD",
    "POLAR_MODEL_TYPES",
    "PRECISIONS",
    "VLLM_OWN_CLASSES",
    "Precision",
    "check_transformers_float32",
    "check_vllm_engine_types",
    "check_vllm_float32",
    "check_xdrope_engine",
    "llamacpp_arguments",
    "llamacpp_complete",
    "llamacpp_meta",
    "mlx_complete",
    "mlx_meta",
    "model_type_of",
    "own_blocks",
    "own_tables",
    "refuse_dual_chunk",
    "refuse_llamacpp_field",
    "transformers_blocks",
    "transformers_cos_sin",
    "transformers_float32_hook",
    "transformers_half_tables",
    "transformers_inv_freq",
    "transformers_tables",
    "vllm_blocks",
    "vllm_float32_hook",
    "vllm_half_tables",
    "vllm_inv_freq",
    "vllm_tables",
    "wants_engine_precision",
    "widen",
]

"""References the tests share, each independent of the code under test: closed forms written
with numpy or Python floats from the papers' formulas, transformers' own functions where they
are the reference, and the published configs (or the keys of them a rule reads) that more than
one test file sends. A test file imports them from here, never from another test file.

- Sinusoidal (Vaswani et al., 2017, §3.5; tensor2tensor's ``get_timing_signal_1d``):
  :func:`sinusoidal`.
- RoPE (Su et al., 2021): :func:`rope_inv_freq`, :func:`rope_cos_sin`; Llama 3.1's bands as
  transformers' ``_compute_llama3_parameters``: :func:`llama3_inv_freq`.
- Diffusion sincos (diffusers' ``get_1d_sincos_pos_embed_from_grid``): :func:`sincos_1d`.
- ALiBi (Press et al., 2022; BLOOM's ``build_alibi_tensor`` for other head counts):
  :func:`alibi_slopes`.
- xPos (Sun et al., 2022): :func:`xpos_scale`.
- RoPE's inverse frequencies of a scaling type: transformers' ``ROPE_INIT_FUNCTIONS`` on a
  ``LlamaConfig`` (:func:`transformers_inv_freq`).
- T5's buckets and DeBERTa's relative positions: transformers' own functions
  (:func:`t5_buckets`, :func:`deberta_build_relative_position`).
- M-RoPE ids: transformers' ``get_rope_index`` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL on the
  published configs (:data:`MROPE_CONFIGS`, :func:`mrope_reference`).
- RoPE applied to queries and keys: the model's rotary module and modeling file's apply
  function (:func:`transformers_rotation`).
- Vision towers: the sub-configs of a transformers config that describe one
  (:func:`vision_subconfigs`).

Notation: ``T`` positions, ``D`` model width, ``R`` rotary dimension.
"""

from __future__ import annotations

import copy
import functools
import importlib
import math
import types
from typing import Any

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------------------


def sinusoidal(
    positions: Any, d_model: int, base: float = 10000.0, layout: str = "interleaved"
) -> np.ndarray:
    """The sinusoidal table ``(T, D)`` in float64: interleaved ``PE[p, 2i] = sin(p·w_i)``,
    ``PE[p, 2i+1] = cos(p·w_i)`` with ``w_i = base^(−2i/D)``; ``concat`` ``[sin | cos]``;
    ``tensor2tensor`` ``[sin | cos]`` with ``w_i = base^(−i/max(D/2 − 1, 1))``."""
    pos = np.asarray(positions, dtype=np.float64)[:, None]  # (T, 1)
    half = d_model // 2
    i = np.arange(half, dtype=np.float64)
    w = base ** (-i / max(half - 1, 1)) if layout == "tensor2tensor" else base ** (-2 * i / d_model)
    angles = pos * w[None, :]  # (T, D/2)
    if layout == "interleaved":
        out = np.empty((len(pos), d_model))
        out[:, 0::2], out[:, 1::2] = np.sin(angles), np.cos(angles)
        return out
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def rope_inv_freq(rotary_dim: int, base: float) -> np.ndarray:
    """RoPE's inverse frequencies ``base^(−2i/R)``, ``(R/2,)`` float64."""
    return 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def llama3_inv_freq(
    inv_freq: np.ndarray, factor: float, low: float, high: float, original: float
) -> np.ndarray:
    """Llama 3.1's bands (transformers' ``_compute_llama3_parameters``) over ``inv_freq``:
    wavelengths above ``original/low`` divided by ``factor``, below ``original/high`` kept, and
    the medium band smoothed between them; ``(R/2,)`` float64."""
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return np.where(medium, smoothed, scaled)


def rope_cos_sin(
    positions: Any, inv_freq: np.ndarray, layout: str = "half", scaling: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """RoPE's cos and sin ``(T, R)`` in float64: ``half`` repeats the ``R/2`` angles as
    ``cat(θ, θ)``, ``interleaved`` as ``θ0 θ0 θ1 θ1 …``; times ``scaling``."""
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]  # (T, R/2)
    if layout == "half":
        angles = np.concatenate([angles, angles], axis=1)
    else:
        angles = np.repeat(angles, 2, axis=1)
    return np.cos(angles) * scaling, np.sin(angles) * scaling


def sincos_1d(channels: int, pos: np.ndarray) -> np.ndarray:
    """The 1-D sincos table ``(N, C)`` of diffusers' ``get_1d_sincos_pos_embed_from_grid``:
    ``[sin(p·ω) | cos(p·ω)]`` with ``ω_i = 10000^(−i/(C/2))``, float64."""
    omega = 1.0 / 10000 ** (np.arange(channels // 2) / (channels / 2))
    angles = pos[:, None] * omega
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def alibi_slopes(n: int, max_bias: float = 8.0) -> np.ndarray:
    """ALiBi's slopes, ``(H,)``: for a power of two ``n``, ``m_h = 2^(−max_bias·(h+1)/n)``; else
    the ``p`` slopes of the largest power of two ``p`` below ``n``, then the first ``n − p``
    even-indexed slopes (0, 2, 4, …) of ``2p`` heads."""

    def power_of_two(k: int) -> list[float]:
        return [2.0 ** (-max_bias * (h + 1) / k) for h in range(k)]

    if n & (n - 1) == 0:
        return np.array(power_of_two(n))
    p = 1 << (n.bit_length() - 1)
    return np.array(power_of_two(p) + power_of_two(2 * p)[0::2][: n - p])


def xpos_scale(n: int, dim: int, base: float) -> torch.Tensor:
    """xPos's query scale ``(N, dim)`` float64 in Python floats: ``ζ_i^((t − N//2)/base)`` with
    ``ζ_i = (2i + 0.4·dim)/(1.4·dim)``, each repeated twice (torchscale's ``XPOS``)."""
    rows = []
    for t in range(n):
        row = []
        for i in range(dim // 2):
            zeta = (2 * i + 0.4 * dim) / (1.4 * dim)
            row += [zeta ** ((t - n // 2) / base)] * 2
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# transformers' own functions
# ---------------------------------------------------------------------------------------------


def transformers_rope_config(
    params: dict[str, Any],
    *,
    head_dim: int,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    max_position_embeddings: int = 4096,
) -> Any:
    """A transformers 5.x ``LlamaConfig`` whose ``rope_parameters`` carry ``params``
    (``rope_type``, ...), with ``partial_rotary_factor = rotary_dim / head_dim``."""
    from transformers import LlamaConfig

    rope_parameters = {"rope_theta": base, **params}
    if rotary_dim is not None and rotary_dim != head_dim:
        rope_parameters["partial_rotary_factor"] = rotary_dim / head_dim
    return LlamaConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=rope_parameters,
    )


def transformers_inv_freq(
    params: dict[str, Any], *, seq_len: int | None = None, **config: Any
) -> tuple[torch.Tensor, float]:
    """transformers' ``ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=...)``: the inverse
    frequencies ``(R/2,)`` (float32) and the attention scaling of :func:`transformers_rope_config`."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    made = transformers_rope_config(params, **config)
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](made, None, seq_len=seq_len)
    return inv_freq, float(scaling)


def t5_buckets(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's ``T5Attention._relative_position_bucket`` of ``relative_position`` (key − query)."""
    from transformers.models.t5.modeling_t5 import T5Attention

    buckets: torch.Tensor = T5Attention._relative_position_bucket(
        relative_position,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    return buckets


def deberta_build_relative_position(
    t: int, s: int, bucket_size: int, max_position: int
) -> torch.Tensor:
    """DeBERTa-v2's ``build_relative_position`` for ``t`` queries and ``s`` keys, ``(T, S)``."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    q, k = torch.zeros(1, t, 4), torch.zeros(1, s, 4)
    out: torch.Tensor = build_relative_position(
        q, k, bucket_size=bucket_size, max_position=max_position
    )[0]
    return out


def vision_subconfigs(cfg: Any) -> list[tuple[str, Any]]:
    """A transformers config and its nested sub-configs that describe an image tower (a
    ``patch_size``, not a text config), with their paths (``""``, ``"vision_config"``, …)."""
    from transformers import PreTrainedConfig

    out: list[tuple[str, Any]] = []

    def walk(c: Any, path: str, depth: int) -> None:
        if hasattr(c, "patch_size") and "text" not in c.model_type:
            out.append((path, c))
        if depth > 3:
            return
        for key in getattr(c, "sub_configs", {}) or {}:
            sub = getattr(c, key, None)
            if isinstance(sub, PreTrainedConfig):
                walk(sub, f"{path}.{key}" if path else key, depth + 1)

    walk(cfg, "", 0)
    return out


# ---------------------------------------------------------------------------------------------
# Published configs
# ---------------------------------------------------------------------------------------------

# https://huggingface.co/Qwen/Qwen2-VL-7B-Instruct/blob/main/config.json (keys read here)
QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_size": 3584,
    "model_type": "qwen2_vl",
    "rope_theta": 1000000.0,
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_chans": 3,
        "hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 152064,
}

# https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json (keys read here)
QWEN2_5_VL_3B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_size": 2048,
    "model_type": "qwen2_5_vl",
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 151936,
}

# https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/config.json (keys read here)
QWEN3_VL_8B = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 4096,
        "model_type": "qwen3_vl_text",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rope_scaling": {
            "mrope_interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_type": "default",
        },
        "rope_theta": 5000000,
        "vocab_size": 151936,
    },
    "tie_word_embeddings": False,
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [8, 16, 24],
        "depth": 27,
        "hidden_size": 1152,
        "model_type": "qwen3_vl",
        "num_heads": 16,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}

IMG, VID, VS, VE = 151655, 151656, 151652, 151653

MROPE_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2_vl": QWEN2_VL_7B,
    "qwen2_5_vl": QWEN2_5_VL_3B,
    "qwen3_vl": QWEN3_VL_8B,
}


def mrope_classes(rule: str) -> tuple[Any, Any]:
    """transformers' config and model class of an M-RoPE rule (``qwen2_vl`` …)."""
    import transformers
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    return {
        "qwen2_vl": (transformers.Qwen2VLConfig, Qwen2VLModel),
        "qwen2_5_vl": (transformers.Qwen2_5_VLConfig, Qwen2_5_VLModel),
        "qwen3_vl": (transformers.Qwen3VLConfig, Qwen3VLModel),
    }[rule]


def mrope_reference(rule: str, input_ids: torch.Tensor, **kwargs: Any) -> Any:
    """transformers' own ``get_rope_index`` of the model class of ``rule``, on its published
    config, bound to a minimal object (no weights); ``mm_token_type_ids`` as the processor
    builds it (1 at the image token, 2 at the video token)."""
    config_cls, model_cls = mrope_classes(rule)
    config = config_cls(**copy.deepcopy(MROPE_CONFIGS[rule]))
    obj = types.SimpleNamespace(config=config)
    obj.get_vision_position_ids = functools.partial(model_cls.get_vision_position_ids, obj)
    types_ = torch.zeros_like(input_ids)
    types_[input_ids == config.image_token_id] = 1
    types_[input_ids == config.video_token_id] = 2
    return model_cls.get_rope_index(obj, input_ids, mm_token_type_ids=types_, **kwargs)


# meta-llama/Llama-4-Scout-17B-16E-Instruct: the text_config keys the scale depends on
SCOUT = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_hidden_layers": 48,
        "rope_theta": 500000.0,
        "attn_temperature_tuning": 4,
        "floor_scale": 8192,
        "attn_scale": 0.1,
        "max_position_embeddings": 10485760,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    },
}

# Layer keys of published files not quoted in posenc.facts.model_configs (their mask-bearing keys).
QWEN3_NEXT = {  # Qwen/Qwen3-Next-80B-A3B-Instruct: every 4th layer full attention
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "rope_theta": 10000000,
    "partial_rotary_factor": 0.25,
}
# Granite 4.0-H's files list each layer as "mamba" or "attention" (a few attention layers
# among Mamba-2 ones) and use no positions ("position_embedding_type": "nope"); this list has
# that shape (attention at 5, 15, 25, 35), it is not quoted.
GRANITE_4H = {
    "model_type": "granitemoehybrid",
    "num_hidden_layers": 40,
    "layer_types": ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)],
    "position_embedding_type": "nope",
    "hidden_size": 1536,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "mamba_n_heads": 48,
}


# ---------------------------------------------------------------------------------------------
# RoPE applied (POST /v1/rope/apply)
# ---------------------------------------------------------------------------------------------


def _modeling_module(model_type: str) -> Any:
    name = model_type.removesuffix("_text")
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def transformers_rotation(
    config: dict[str, Any], positions: Any, q: torch.Tensor, k: torch.Tensor, layer_type: str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q``/``k`` ``(T, H, D)`` rotated by the model's own rotary module (built from the config
    with no weights) and its modeling file's apply function: ``apply_rotary_pos_emb``, GPT-J's
    on ``create_sinusoidal_positions``, DeepSeek-V3's ``apply_rotary_pos_emb_interleave``
    (``rope_interleave``), Qwen2-VL's module on ``(3, B, T)`` position ids."""
    from transformers import AutoConfig

    tc = AutoConfig.for_model(**copy.deepcopy(config)).get_text_config()  # it edits the dict
    mod = _modeling_module(tc.model_type)
    qb, kb = q.transpose(0, 1)[None], k.transpose(0, 1)[None]  # (1, H, T, D)
    pos = torch.tensor(positions)
    if tc.model_type == "gptj":  # (B, T, H, D) and its own sinusoid table
        rot = mod.GPTJRotaryEmbedding(tc)
        sin, cos = rot(q, pos[None])
        r = tc.rotary_dim
        out = []
        for x in (q[None], k[None]):
            turned = mod.apply_rotary_pos_emb(x[..., :r], sin, cos)
            out.append(torch.cat([turned, x[..., r:]], -1)[0])
        return out[0], out[1]
    names = [n for n in dir(mod) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    rot = getattr(mod, names[0])(config=tc)
    if tc.model_type.startswith("qwen2_vl"):  # (3, B, T) position ids
        cos, sin = rot(qb, pos[:, None, :])
    elif layer_type is not None:
        cos, sin = rot(qb, pos[None], layer_type)
    else:
        cos, sin = rot(qb, pos[None])
    if getattr(tc, "rope_interleave", False):
        qo, ko = mod.apply_rotary_pos_emb_interleave(qb, kb, cos, sin)
    else:
        qo, ko = mod.apply_rotary_pos_emb(qb, kb, cos, sin)
    return qo[0].transpose(0, 1), ko[0].transpose(0, 1)

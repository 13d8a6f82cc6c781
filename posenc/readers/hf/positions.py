"""What a Hugging Face ``config.json`` means for positions, read as transformers 5 reads it.

:func:`read_positions` takes a model's published ``config.json`` (a mapping, as ``json.load``
gives it; for a multimodal file the whole file, whose ``text_config`` holds the language model;
ColPali's ``vlm_config``, Qwen2.5-Omni's ``thinker_config`` and an encoder-decoder's
``decoder_config`` / ``decoder`` are followed to it) and returns :class:`ModelPositions`: the positional encoding the model applies (RoPE, ALiBi, T5
relative buckets, a learned table, sinusoidal or none), with the numbers posenc's tables need.

The reading follows transformers 5 (``modeling_rope_utils.RotaryEmbeddingConfigMixin`` and the
models' ``configuration_*.py`` / ``modeling_*.py``), without importing it:

- RoPE parameters: ``rope_parameters``, or the legacy ``rope_scaling`` (which wins when both are
  given, as ``convert_rope_params_to_dict``), with ``type`` read as ``rope_type`` and a top-level
  ``rope_theta`` (else the model's ``default_theta``; GPT-NeoX's ``rotary_emb_base``). Parameters
  nested by layer type (Gemma 3's ``sliding_attention`` / ``full_attention``) give one entry per
  type; Gemma 3's legacy ``rope_local_base_freq`` is the sliding layers' theta and its
  ``rope_scaling`` applies to the full layers only. ``original_max_position_embeddings`` is set
  for ``llama3``, ``yarn`` and ``longrope`` from a top-level key (Phi-3) or else
  ``max_position_embeddings``; ``yarn`` and ``longrope`` without ``factor`` use
  ``max_position_embeddings / original_max_position_embeddings``; ``dynamic`` rescales above
  ``max_position_embeddings``. Qwen2-VL's ``"mrope"`` type is ``default`` with an
  ``mrope_section``.
- vLLM-only RoPE (``RopeLayerType.vllm`` keeps what vLLM's ``get_rope`` reads, for
  ``engine: "vllm"``): Hunyuan's ``dynamic`` (HunyuanOCR: ``xdrope``) with ``alpha`` is, as
  transformers' Hunyuan rotary modules read it (``ntk_alpha``), ``default`` with the fixed base
  ``rope_theta·alpha^(Dh/(Dh−2))`` (on other model types transformers ignores ``alpha``); the
  types ``ntk`` (``factor``, ``mixed_b``) and a non-Hunyuan ``xdrope`` have no transformers rule
  (tables need ``engine: "vllm"``); a top-level ``dual_chunk_attention_config`` (Qwen2.5-1M) is
  read by vLLM alone: transformers applies plain RoPE.
- Dimensions: ``head_dim``, else ``hidden_size // num_attention_heads`` (with the models'
  aliases ``n_embd``, ``d_model``, ``n_head``, ``n_heads``, ``num_heads``); DeepSeek rotates
  ``qk_rope_head_dim`` channels; the rotary dimension is ``int(head_dim ·
  partial_rotary_factor)`` (``rotary_pct`` for GPT-NeoX, default 0.25; Phi, GLM and THUDM's
  remote-code ChatGLM default 0.5), or GPT-J's ``rotary_dim``; Gemma 4's full-attention layers
  use ``global_head_dim``, EmbeddingGemma 2's those of ``per_layer_config``; JetMoE's heads are
  ``kv_channels`` wide; Moonshine's heads are ``decoder_num_attention_heads``. ChatGLM's theta
  is ``10000 · rope_ratio``. A ``text_config`` with its own geometry or RoPE keys does not take
  the top level's (MusicFlamingo's top-level ones are its audio rotary's).
- Layout: ``interleaved`` for the models that rotate adjacent pairs (:data:`INTERLEAVED_MODEL_TYPES`:
  GPT-J, GLM, ChatGLM, Llama 4, DeepSeek, Cohere, ERNIE 4.5, Helium and the others whose apply
  function interleaves, a table that ``tests/lib/test_hf_rope.py`` derives again from each
  model's own rotation), else ``half``; ``rope_interleave`` where the model reads it.
- What the attention does with the table: ``rotation`` ``negative`` where it rotates by ``−θ``
  (nanochat, :data:`NEGATIVE_ROTATION_MODEL_TYPES`: the tables carry ``−sin``);
  ``rotated_channels`` ``trailing`` where it rotates the last ``R`` channels of each head
  (DeepSeek-V4, :data:`TRAILING_ROTARY_MODEL_TYPES`). An odd ``int(head_dim ·
  partial_rotary_factor)`` (GLM-4-MoE's 21) is read as transformers builds it: ``rotary_dim``
  one more (22, the width rotated) with ``exponent_dim`` the odd width (``base^(−2i/21)``).
- Kind: Granite MoE Hybrid and Zamba 2 apply RoPE only with ``position_embedding_type: "rope"``
  / ``use_mem_rope: true``; else ``none``.
- Layer types: ``layer_types`` when given, else the model's own rule (Gemma 2 alternating,
  Gemma 3 every 6th full, Cohere 2 every 4th, Qwen2 sliding above ``max_window_layers``, Llama 4
  ``no_rope_layers``); a layer that applies no RoPE (Llama 4's every 4th, Cohere 2's full
  attention) is ``"no_rope"``.
- Softmax scale: ``head_dim^-0.5``; Gemma 2/3 ``query_pre_attn_scalar^-0.5``; Gemma 4 1.0;
  DeepSeek ``(qk_nope_head_dim + qk_rope_head_dim)^-0.5 · mscale²`` with YaRN's
  ``0.1·mscale_all_dim·ln(factor) + 1``; Granite ``attention_multiplier``; T5 1.0; MPT
  ``attn_config.softmax_scale``.
- ALiBi (BLOOM, MPT's ``attn_config.alibi`` / ``alibi_bias_max``, Falcon's ``alibi``), T5's
  ``relative_attention_num_buckets`` / ``relative_attention_max_distance``, and the learned
  table size (``max_position_embeddings``, GPT-2's ``n_positions``; ELECTRA's and ALBERT's
  width ``embedding_size``; RoBERTa's family reaches the rows from ``pad_token_id + 1``).

Every value the file does not support is an :class:`~posenc.core.errors.InvalidArgument` whose
``field`` is ``config.<key>`` and whose message says what is accepted. Keys read in a legacy
spelling, and keys ignored, are listed in ``warnings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.core.errors import InvalidArgument
from posenc.facts.config_parts import ConfigReader, language_part, text_config
from posenc.facts.families import (
    base_type,
    family,
    is_known_model_type,
    unknown_model_type_warning,
)
from posenc.readers.hf.heads import (
    hidden_size,
    layer_count,
    num_heads,
    read_head_dim,
    read_softmax_scale,
)
from posenc.readers.hf.results import ModelPositions, PositionKind
from posenc.readers.hf.rope import read_rope
from posenc.readers.hf.schemes import (
    alibi_positions,
    deberta_positions,
    learned_table,
    parakeet_positions,
    relative_positions,
    swin_positions,
)


def _kind(model_type: str, c: Mapping[str, Any]) -> PositionKind:
    base = base_type(model_type)
    fam = family(base)
    if fam.rope_switch is not None:  # RoPE only when the key asks for it, else none
        key, on = fam.rope_switch
        return "rope" if c.get(key) == on else "none"
    if fam.alibi_flag == "alibi":
        return "alibi" if c.get("alibi") else "rope"
    if fam.alibi_flag == "attn_config":
        attn = c.get("attn_config") or {}
        return "alibi" if isinstance(attn, Mapping) and attn.get("alibi", True) else "learned"
    if fam.scheme == "alibi":
        return "alibi"
    if fam.scheme in ("relative", "windows"):
        return "relative"
    if fam.scheme == "deberta":  # DebertaV2Config: relative_attention False by default
        if c.get("relative_attention") is True:
            return "relative"
        return "learned" if c.get("position_biased_input", True) else "none"
    if "relative_attention_num_buckets" in c:
        return "relative"
    if fam.scheme == "sinusoidal":
        return "sinusoidal"
    if fam.scheme == "learned":
        return "learned"
    rope_keys = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base", "rotary_pct")
    if family(model_type).scheme == "rope" or fam.scheme == "rope":
        return "rope"
    if any(c.get(k) is not None for k in rope_keys) or "rotary_dim" in c:
        return "rope"
    if "n_positions" in c or (
        "max_position_embeddings" in c and c.get("position_embedding_type") == "absolute"
    ):
        return "learned"
    raise InvalidArgument(
        f"config.model_type {model_type!r}: posenc cannot tell its positional encoding (no "
        "rope_parameters, rope_scaling, rope_theta, alibi, relative_attention_num_buckets or "
        "n_positions); known model types include llama, mistral, qwen2, gemma3, phi3, gpt_neox, "
        "gptj, deepseek_v3, bloom, mpt, falcon, t5, gpt2, bert",
        field="config.model_type",
    )


def read_positions(config: Mapping[str, Any]) -> ModelPositions:
    """Read what ``config`` (a model's ``config.json``) means for positions.

    Args:
        config: the parsed ``config.json``: a mapping with at least ``model_type`` (or keys
            from which the encoding is clear, e.g. ``rope_theta``).

    Returns:
        :class:`ModelPositions`.

    Raises:
        InvalidArgument: ``field`` names the offending key (``config.<key>``, or
            ``config.text_config.<key>``) and the message says what is accepted.
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a model's config.json), got {type(config).__name__}",
            field="config",
        )
    top_type = config.get("model_type")
    if isinstance(top_type, str) and family(top_type).scheme == "relative_sinusoidal":
        return parakeet_positions(top_type, config)
    part, root = language_part(config)
    c, prefix = text_config(part, root)
    text = part.get("text_config")
    inner_type = text.get("model_type") if isinstance(text, Mapping) else None
    if inner_type is None and part is not config:
        inner_type = part.get("model_type")
    model_type = inner_type or top_type
    if model_type is not None and not isinstance(model_type, str):
        raise InvalidArgument(
            f"config.model_type must be a string, got {model_type!r}", field="config.model_type"
        )
    model_type = model_type or ""
    base = base_type(model_type)
    fam = family(base)
    if fam.text_model_type is not None:
        model_type = fam.text_model_type
    for key, value in (fam.head_defaults or {}).items():
        c.setdefault(key, value)
    r = ConfigReader(c, prefix)
    if model_type and not is_known_model_type(model_type):
        r.warnings.append(unknown_model_type_warning(model_type))
    kind = _kind(model_type, c)
    shown_type = top_type if isinstance(top_type, str) else model_type
    if fam.scheme == "windows":  # num_heads is a list per stage
        return swin_positions(shown_type, base, r)
    heads = num_heads(r)
    max_pos = r.int("max_position_embeddings") or r.int("n_positions")
    n_layers = layer_count(r)
    if kind == "alibi":
        return alibi_positions(shown_type, base, r, heads, max_pos, n_layers)
    if kind == "relative" and fam.scheme == "deberta":
        return deberta_positions(shown_type, r, heads, max_pos, n_layers)
    if kind == "relative":
        return relative_positions(shown_type, r, heads, n_layers)
    if kind == "none":
        return ModelPositions(
            model_type=shown_type,
            kind="none",
            head_dim=read_head_dim(r),
            max_position_embeddings=max_pos,
            layer_types=tuple(["full_attention"] * (n_layers or 0)),
            softmax_scale=read_softmax_scale(base, r, read_head_dim(r), None),
            warnings=tuple(r.warnings),
        )
    if kind in ("learned", "sinusoidal"):
        d_model = hidden_size(r)
        learned = None
        if kind == "learned":
            learned = learned_table(base, r, max_pos, d_model)
        return ModelPositions(
            model_type=shown_type,
            kind=kind,
            head_dim=read_head_dim(r),
            max_position_embeddings=max_pos,
            layer_types=tuple(["full_attention"] * (n_layers or 0)),
            softmax_scale=read_softmax_scale(base, r, read_head_dim(r), None),
            learned=learned,
            warnings=tuple(r.warnings),
        )
    return read_rope(shown_type, model_type, base, r, max_pos, n_layers)


__all__ = ["read_positions"]

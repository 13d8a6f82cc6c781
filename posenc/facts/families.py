"""One record per ``model_type``: everything posenc knows about a model type, in one place.

Each :class:`Family` says what a model type's ``config.json`` means where the keys alone do
not: its positional scheme, transformers 5's ``default_theta``, the layout its apply function
rotates in, its default partial rotary and M-RoPE sections, its head defaults, its layer-type
rule, its softmax-scale rule, its learned table's offsets, Llama 4's query scale, whether its
attention is multi-head latent (MLA), the vision tower transformers gives it, and what other
engines and readers (vLLM, :mod:`posenc.readers.checkpoints`) assume of it. Every module asks
:func:`family` (``family(model_type).layout``); a model type that has no record gets
``Family(model_type)``, whose fields are all the defaults (the keys of its file decide).

Adding a model type is adding its record to :data:`FAMILIES`; a new rule is a field with a
default. ``tests/lib/test_one_home.py`` checks that no other module lists model types.

The values are read from transformers 5.24's ``configuration_*.py`` / ``modeling_*.py`` (and
vLLM 0.32's model code where a field says so); ``tests/lib/test_hf_rope.py`` checks them
against each model's own code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

#: What a model type means by itself (``None``: its file's keys decide). ``deberta``,
#: ``windows`` (Swin) and ``relative_sinusoidal`` are relative positions read their own way.
Scheme = Literal[
    "rope",
    "alibi",
    "relative",
    "learned",
    "sinusoidal",
    "deberta",
    "windows",
    "relative_sinusoidal",
]


@dataclass(frozen=True)
class Family:
    """What posenc knows of one ``model_type``; every field's default means "nothing special".

    Attributes:
        model_type: transformers' name.
        scheme: the positional encoding the type means without a deciding key.
        rope_switch: ``(key, value)``: RoPE only where the config's ``key`` is ``value``
            (Granite MoE Hybrid, Zamba 2), else no positional encoding.
        alibi_flag: where a flag turns ALiBi on: ``alibi`` (Falcon, top level; else RoPE) or
            ``attn_config`` (MPT: ``attn_config.alibi``, default on, else learned; its
            ``alibi_bias_max`` and ``softmax_scale`` are read from there too).
        default_theta: transformers 5's ``default_theta`` (10000 for a type without one).
        theta_ratio_key: a key that multiplies the default theta (ChatGLM's ``rope_ratio``).
        layout: ``interleaved`` where the apply function rotates adjacent pairs
            (``rotate_every_two``, ``repeat_interleave(2)``, ``view_as_complex``), else ``half``.
        always_interleaved: interleaved whatever ``rope_interleave`` says.
        partial_rotary: ``partial_rotary_factor`` when the config gives none.
        given_rotary_dim: the rotated width is the config's ``rotary_dim`` (GPT-J, CodeGen).
        original_max_default: ``original_max_position_embeddings`` of the config class (Phi-3).
        mrope_section: the M-RoPE sections the text rotary module uses when the config gives
            none (``rope_parameters.get("mrope_section", [...])``).
        mrope_interleaved: the rotary module interleaves the sections (``length =
            self.mrope_section[dim] * 3``), with no flag in the config.
        rope_nesting: how RoPE parameters are nested by layer type: ``local_global`` (Gemma 3's
            ``convert_rope_params_to_dict``, ``rope_local_base_freq``) or
            ``proportional_global`` (Gemma 4: sliding default, full proportional when the config
            gives none).
        global_head_dim: the full-attention layers' ``global_head_dim`` default (Gemma 4).
        ntk_alpha: the transformers rotary module reads ``dynamic`` with ``alpha`` as a fixed
            NTK-alpha base (Hunyuan).
        rotation: ``negative`` where the attention rotates by ``−θ`` (nanochat).
        rotated_channels: ``trailing`` where the attention rotates the last ``R`` channels of
            each head (DeepSeek-V4).
        head_defaults: the config class's head geometry, for files that leave it out (Gemma 3).
        head_dim_key: the key that gives the heads' width (JetMoE's ``kv_channels``).
        mla: multi-head latent attention whatever the keys (DeepSeek V2/V3).
        layer_rule: the layer types when the config lists none: ``alternating`` (Gemma 2),
            ``every_nth`` (full every ``sliding_window_pattern``-th), ``qwen_sliding`` (sliding
            above ``max_window_layers``), ``no_rope_layers`` (Llama 4's flags).
        sliding_pattern: ``every_nth``'s default period.
        nope_interval: every ``no_rope_layer_interval``-th layer applies no RoPE (SmolLM3).
        last_layer_full: the last layer is full attention whatever the list says (Gemma 4).
        full_is_no_rope: the full-attention layers apply no RoPE (Cohere 2).
        text_model_type: the type its positions are reported under (Llama 4's text model).
        temperature_tuning: the no-RoPE layers' attention temperature (Llama 4).
        softmax_rule: ``unit`` (q/k norms stand in: Gemma 3n, Gemma 4 and every type that
            starts with their names), ``query_pre_attn_scalar`` (Gemma 2/3), or
            ``scale_attn_weights`` (GPT-2's flag).
        cosine_attention: cosine attention with a learned logit scale: no fixed softmax scale
            (Swin v2).
        learned_width_key: the key of the learned table's width (``embedding_size``).
        learned_rows_key: the key of its rows, over ``max_position_embeddings`` (Whisper's
            decoder: ``max_target_positions``).
        learned_offset: rows before position 0 (``LearnedPositionalEmbedding.offset``: 2).
        padding_offset: positions start at ``pad_token_id + 1`` (RoBERTa's family).
        query_scale: ``llama4_beta``: queries times ``1 + β·ln(1 + ⌊p/L0⌋)`` from
            ``rope_parameters.llama_4_scaling_beta`` (Ministral 3; vLLM: only from a
            Mistral-format ``llama_4_scaling`` block).
        vllm_deepseek_yarn: vLLM's model code builds DeepSeek's YaRN for any non-default type.
        vllm_mrope_positions_factor: ``MRotaryEmbedding``'s ``positions_factor``: its cache
            holds ``max_position · factor`` rows (``get_rope``'s default 4; Qwen3-VL's and
            Qwen3.5's vLLM code passes 1 unless video pruning is on).
        vision_tower: the ``model_type`` transformers gives its vision config (where the file
            names none, or names the top-level type).
        checkpoint_scheme: what :mod:`posenc.readers.checkpoints` assumes of a checkpoint of this type
            before reading its config.
        embed_scale: ``sqrt_hidden``: token embeddings times ``sqrt(hidden_size)`` in the
            model's dtype (Gemma).
        mrope_ids_rule: the ``get_rope_index`` rule its transformers class uses for M-RoPE
            position ids (:mod:`posenc.rope.mrope_ids`).
        encoder_config: a whole model whose encoder's keys are in ``encoder_config`` (Parakeet's
            CTC, RNN-T and TDT models; ``parakeet_encoder`` is the encoder itself).
        mixer: what its ``linear_attention`` layers are: ``state_space`` (Mamba) or
            ``linear_attention`` proper (:mod:`posenc.attention.layers`).
        mixer_name: the phrase that names that mixer in labels and 422s (``Mamba-2``).
        attention_free: no layer attends (Mamba, RWKV): every layer is its mixer.
        layer_pattern: the layer types its config class builds when the file lists none:
            ``sliding_then_full`` (gpt-oss), ``full_every_interval`` (Qwen3-Next's
            ``full_attention_interval``), ``full_then_linear`` (MiniMax), ``attention_period`` (Jamba:
            ``attn_layer_period`` / ``attn_layer_offset``).
        learned_vision_tower: the ``model_type`` transformers gives its vision config by
            default when that tower adds a learned 2-D table
            (:mod:`posenc.vision.learned`; CLIP's ``clip_vision_model``).
        dual_encoder: an image-text dual encoder (CLIP, SigLIP): its folder is a vision model
            here (:mod:`posenc.readers.vision_checkpoint`).
        llamacpp_rope: the ggml rope mode llama.cpp runs the model with (``normal``, ``neox``,
            ``mrope``, ``imrope``; ``none`` where it applies no RoPE though transformers does:
            GPT-J), as ``llama_model_rope_type`` gives it for the converter's architecture
            (:mod:`posenc.rope.llamacpp`); None: from the layout.
        llamacpp_yarn_log_multiplier: llama.cpp's converter writes
            ``rope.scaling.yarn_log_multiplier`` from ``mscale_all_dim`` (DeepSeek V2/V3).
        polar_rotary: its transformers rotary module returns ``torch.polar(1, θ)`` (Llama 4).
        apply_evens_first: its modeling file's ``apply_rotary_pos_emb_interleave`` (taken when
            ``rope_interleave`` holds) returns the rotated even channels, then the odd ones
            (DeepSeek-V3; ``/v1/rope/apply``'s transformers order).
        apply_in_float32: its ``apply_rotary_pos_emb`` computes in float32 (``q.float()``) and
            casts back to the input's dtype (Cohere).
        vllm_window_rule: how vLLM's model code gives its layers the config's ``sliding_window``
            (:mod:`posenc.attention.mask_engines`): ``model_level`` (no per-layer window, so every layer
            takes the model's: Qwen2), ``even_layers`` (gpt-oss) or ``plus_one`` (the sliding
            layers of ``layer_types`` get ``sliding_window + 1``: Cohere 2's
            ``CohereAttention.__init__`` in vLLM's ``commandr.py``, Cohere 2 MoE's in
            ``cohere2_moe.py``).
        bidirectional_halves_window: with ``use_bidirectional_attention`` its sliding layers
            see ``|q − k| <= W // 2`` both ways (EmbeddingGemma on Gemma 3).
        position_bias_form: how its attention adds its position bias beside the mask
            (``POST /v1/masks`` with ``as: combined``, :mod:`posenc.attention.position_bias`):
            ``key_index`` (BLOOM's ALiBi over the real keys' indices), ``from_last`` (MPT's,
            from the last key), ``scaled_alibi`` (Falcon with ``alibi``: scores plus ALiBi are
            scaled by ``1/sqrt(head_dim)`` before the mask, so no one bias stands for it),
            ``t5_table`` (T5's table; the config's layers are its encoder's, bidirectional, unless
            ``is_decoder``), ``t5_decoder_only`` (T5's table in the decoder, but an encoder that
            adds more: LongT5's local blocks, UDOP's 2-D layout bias).
    """

    model_type: str
    scheme: Scheme | None = None
    rope_switch: tuple[str, Any] | None = None
    alibi_flag: Literal["alibi", "attn_config"] | None = None
    default_theta: float | None = None
    theta_ratio_key: str | None = None
    layout: Literal["half", "interleaved"] = "half"
    always_interleaved: bool = False
    partial_rotary: float | None = None
    given_rotary_dim: bool = False
    original_max_default: int | None = None
    mrope_section: tuple[int, int, int] | None = None
    mrope_interleaved: bool = False
    rope_nesting: Literal["local_global", "proportional_global"] | None = None
    global_head_dim: int | None = None
    ntk_alpha: bool = False
    rotation: Literal["positive", "negative"] = "positive"
    rotated_channels: Literal["leading", "trailing"] = "leading"
    head_defaults: Mapping[str, int] | None = None
    head_dim_key: str | None = None
    mla: bool = False
    layer_rule: Literal["alternating", "every_nth", "qwen_sliding", "no_rope_layers"] | None = None
    sliding_pattern: int | None = None
    nope_interval: bool = False
    last_layer_full: bool = False
    full_is_no_rope: bool = False
    text_model_type: str | None = None
    temperature_tuning: bool = False
    softmax_rule: Literal["unit", "query_pre_attn_scalar", "scale_attn_weights"] | None = None
    cosine_attention: bool = False
    learned_width_key: str | None = None
    learned_rows_key: str | None = None
    learned_offset: int = 0
    padding_offset: bool = False
    query_scale: Literal["llama4_beta"] | None = None
    vllm_deepseek_yarn: bool = False
    vllm_mrope_positions_factor: int = 4
    vision_tower: str | None = None
    checkpoint_scheme: Literal["rope", "alibi", "relative", "learned"] | None = None
    embed_scale: Literal["sqrt_hidden"] | None = None
    encoder_config: bool = False
    mrope_ids_rule: Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] | None = None
    mixer: Literal["state_space", "linear_attention"] | None = None
    mixer_name: str | None = None
    attention_free: bool = False
    layer_pattern: (
        Literal["sliding_then_full", "full_every_interval", "full_then_linear", "attention_period"]
        | None
    ) = None
    bidirectional_halves_window: bool = False
    learned_vision_tower: str | None = None
    dual_encoder: bool = False
    llamacpp_rope: Literal["normal", "neox", "mrope", "imrope", "none"] | None = None
    llamacpp_yarn_log_multiplier: bool = False
    polar_rotary: bool = False
    apply_evens_first: bool = False
    apply_in_float32: bool = False
    vllm_window_rule: Literal["model_level", "even_layers", "plus_one"] | None = None
    position_bias_form: (
        Literal["key_index", "from_last", "scaled_alibi", "t5_table", "t5_decoder_only"] | None
    ) = None


def _f(model_type: str, **facts: Any) -> Family:
    if isinstance(facts.get("head_defaults"), dict):
        facts["head_defaults"] = MappingProxyType(facts["head_defaults"])
    return Family(model_type, **facts)


_RECORDS = (
    _f("albert", scheme="learned", learned_width_key="embedding_size"),
    _f("apertus", scheme="rope", default_theta=12000000.0),
    _f(
        "axk2", apply_evens_first=True, scheme="rope", layout="interleaved", always_interleaved=True
    ),
    _f(
        "bailing_hybrid",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
    ),
    _f("bart", scheme="learned", learned_offset=2, checkpoint_scheme="learned"),
    _f("bert", scheme="learned", checkpoint_scheme="learned"),
    _f("biogpt", scheme="learned", learned_offset=2, checkpoint_scheme="learned"),
    _f("bitnet", llamacpp_rope="neox", scheme="rope", default_theta=500000.0),
    _f("blenderbot", scheme="learned"),
    _f(
        "bloom",
        scheme="alibi",
        checkpoint_scheme="alibi",
        position_bias_form="key_index",
        head_defaults={"n_head": 8},
    ),
    _f("blt", scheme="rope", layout="interleaved"),
    _f("blt_global_transformer", scheme="rope", layout="interleaved"),
    _f("blt_local_decoder", scheme="rope", layout="interleaved"),
    _f("blt_local_encoder", scheme="rope", layout="interleaved"),
    _f("blt_patcher", scheme="rope", layout="interleaved"),
    _f("camembert", scheme="learned", padding_offset=True),
    _f(
        "chatglm",
        llamacpp_rope="normal",
        scheme="rope",
        theta_ratio_key="rope_ratio",
        layout="interleaved",
        partial_rotary=0.5,
        checkpoint_scheme="rope",
    ),
    _f("clip_text_model", scheme="learned"),
    _f(
        "codegen",
        scheme="rope",
        layout="interleaved",
        given_rotary_dim=True,
        checkpoint_scheme="rope",
    ),
    _f(
        "cohere",
        apply_in_float32=True,
        llamacpp_rope="normal",
        scheme="rope",
        default_theta=500000.0,
        layout="interleaved",
    ),
    _f(
        "cohere2",
        apply_in_float32=True,
        llamacpp_rope="normal",
        scheme="rope",
        layout="interleaved",
        layer_rule="every_nth",
        sliding_pattern=4,
        full_is_no_rope=True,
        vllm_window_rule="plus_one",
    ),
    _f(
        "cohere2_moe",
        apply_in_float32=True,
        scheme="rope",
        layout="interleaved",
        vllm_window_rule="plus_one",
    ),
    _f("cohere_compass", mrope_section=(24, 20, 20), vision_tower="cohere_compass_vision"),
    _f("colqwen2", vision_tower="qwen2_vl_vision"),
    _f("cosmos3_edge", mrope_section=(24, 20, 20), mrope_interleaved=True),
    _f("cosmos3_omni", vision_tower="qwen3_vl_vision"),
    _f("cwm", scheme="rope", default_theta=1000000.0),
    _f("deberta-v2", scheme="deberta"),
    _f(
        "deepseek_v2",
        llamacpp_rope="normal",
        llamacpp_yarn_log_multiplier=True,
        scheme="rope",
        layout="interleaved",
        mla=True,
        vllm_deepseek_yarn=True,
    ),
    _f(
        "deepseek_v3",
        apply_evens_first=True,
        llamacpp_rope="normal",
        llamacpp_yarn_log_multiplier=True,
        scheme="rope",
        layout="interleaved",
        mla=True,
        vllm_deepseek_yarn=True,
    ),
    _f(
        "deepseek_v32",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
        vllm_deepseek_yarn=True,
    ),
    _f("deepseek_v4", scheme="rope", layout="interleaved", rotated_channels="trailing"),
    _f("distilbert", scheme="learned", checkpoint_scheme="learned"),
    _f(
        "dots3_note",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
        vision_tower="dots3_note_vision_encoder",
    ),
    _f(
        "electra", scheme="learned", learned_width_key="embedding_size", checkpoint_scheme="learned"
    ),
    _f(
        "ernie4_5",
        llamacpp_rope="normal",
        scheme="rope",
        default_theta=500000.0,
        layout="interleaved",
    ),
    _f(
        "ernie4_5_moe",
        llamacpp_rope="normal",
        scheme="rope",
        default_theta=500000.0,
        layout="interleaved",
    ),
    _f(
        "ernie4_5_vl_moe",
        scheme="rope",
        layout="interleaved",
        vision_tower="ernie4_5_vl_moe_vision",
    ),
    _f("exaone4_5", vision_tower="exaone4_5_vision"),
    _f(
        "falcon",
        llamacpp_rope="neox",
        scheme="rope",
        alibi_flag="alibi",
        checkpoint_scheme="rope",
        position_bias_form="scaled_alibi",
    ),
    _f("flex_olmo", scheme="rope", default_theta=500000.0),
    _f("fsmt", scheme="sinusoidal"),
    _f("fuyu", scheme="rope", default_theta=25000.0),
    _f("gemma", llamacpp_rope="neox", scheme="rope", embed_scale="sqrt_hidden"),
    _f(
        "gemma2",
        llamacpp_rope="neox",
        scheme="rope",
        layer_rule="alternating",
        softmax_rule="query_pre_attn_scalar",
        embed_scale="sqrt_hidden",
    ),
    _f(
        "gemma3",
        llamacpp_rope="neox",
        learned_vision_tower="siglip_vision_model",
        bidirectional_halves_window=True,
        scheme="rope",
        rope_nesting="local_global",
        head_defaults={"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
        layer_rule="every_nth",
        sliding_pattern=6,
        softmax_rule="query_pre_attn_scalar",
        embed_scale="sqrt_hidden",
    ),
    _f(
        "gemma3_text",
        llamacpp_rope="neox",
        scheme="rope",
        rope_nesting="local_global",
        layer_rule="every_nth",
        sliding_pattern=6,
        softmax_rule="query_pre_attn_scalar",
        embed_scale="sqrt_hidden",
    ),
    _f(
        "gemma3n",
        scheme="rope",
        rope_nesting="local_global",
        layer_rule="every_nth",
        sliding_pattern=6,
        softmax_rule="unit",
        embed_scale="sqrt_hidden",
    ),
    _f(
        "gemma3n_text",
        scheme="rope",
        rope_nesting="local_global",
        layer_rule="every_nth",
        sliding_pattern=6,
        softmax_rule="query_pre_attn_scalar",
        embed_scale="sqrt_hidden",
    ),
    _f(
        "gemma4",
        scheme="rope",
        rope_nesting="proportional_global",
        global_head_dim=512,
        layer_rule="every_nth",
        sliding_pattern=6,
        last_layer_full=True,
        softmax_rule="unit",
        vision_tower="gemma4_vision",
    ),
    _f("gemma4_text", scheme="rope"),
    _f("glm", scheme="rope", layout="interleaved", partial_rotary=0.5, checkpoint_scheme="rope"),
    _f(
        "glm4",
        llamacpp_rope="normal",
        scheme="rope",
        layout="interleaved",
        partial_rotary=0.5,
        checkpoint_scheme="rope",
    ),
    _f("glm46v", vision_tower="glm4v_vision"),
    _f(
        "glm4v",
        scheme="rope",
        layout="interleaved",
        mrope_section=(8, 12, 12),
        vision_tower="glm4v_vision",
    ),
    _f("glm4v_moe", mrope_section=(8, 12, 12), vision_tower="glm4v_moe_vision"),
    _f("glm4v_text", scheme="rope", layout="interleaved"),
    _f("glm5_next", vision_tower="glm5_next_vision"),
    _f("glm_image", mrope_section=(8, 12, 12)),
    _f(
        "glm_moe_dsa",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
    ),
    _f(
        "glm_ocr",
        scheme="rope",
        layout="interleaved",
        mrope_section=(8, 12, 12),
        vision_tower="glm_ocr_vision",
    ),
    _f("glmga", vision_tower="glm4v_vision"),
    _f("gpt2", scheme="learned", softmax_rule="scale_attn_weights", checkpoint_scheme="learned"),
    _f("gpt_bigcode", checkpoint_scheme="learned"),
    _f("gpt_neo", scheme="learned"),
    _f("gpt_neox", llamacpp_rope="neox", scheme="rope", partial_rotary=0.25),
    _f(
        "gpt_oss",
        llamacpp_rope="neox",
        layer_pattern="sliding_then_full",
        scheme="rope",
        default_theta=150000.0,
        vllm_window_rule="even_layers",
    ),
    _f(
        "gptj",
        llamacpp_rope="none",
        scheme="rope",
        layout="interleaved",
        given_rotary_dim=True,
        checkpoint_scheme="rope",
    ),
    _f("granite", llamacpp_rope="normal", scheme="rope"),
    _f(
        "granitemoehybrid",
        mixer="state_space",
        mixer_name="Mamba-2",
        rope_switch=("position_embedding_type", "rope"),
    ),
    _f("helium", scheme="rope", default_theta=100000.0, layout="interleaved"),
    _f("hunyuan_v1_dense", llamacpp_rope="neox", ntk_alpha=True),
    _f("hunyuan_v1_moe", llamacpp_rope="neox", ntk_alpha=True),
    _f("hunyuan_vl", ntk_alpha=True),
    _f(
        "hy_v4_vl",
        scheme="rope",
        layout="interleaved",
        mrope_section=(24, 20, 20),
        mrope_interleaved=True,
    ),
    _f("hyperclovax_vision_v2", vision_tower="qwen2_5_vl_vision"),
    _f("internlm2", llamacpp_rope="normal", scheme="rope"),
    _f("jetmoe", head_dim_key="kv_channels"),
    _f("kimi_k2", vllm_deepseek_yarn=True),
    _f("kimi_k25", vision_tower="kimi_k25_vision"),
    _f("layoutlm", scheme="learned"),
    _f("lfm2", scheme="rope", default_theta=1000000.0),
    _f("lfm2_moe", scheme="rope", default_theta=1000000.0),
    _f("lfm3_vl", vision_tower="lfm3_vl_vision"),
    _f("lighton_ocr", vision_tower="pixtral"),
    _f("llama", llamacpp_rope="normal", scheme="rope"),
    _f(
        "llama4",
        llamacpp_rope="normal",
        polar_rotary=True,
        scheme="rope",
        default_theta=500000.0,
        layout="interleaved",
        layer_rule="no_rope_layers",
        text_model_type="llama4_text",
        temperature_tuning=True,
        vision_tower="llama4_vision_model",
    ),
    _f(
        "llama4_text",
        llamacpp_rope="normal",
        polar_rotary=True,
        scheme="rope",
        default_theta=500000.0,
        layout="interleaved",
    ),
    _f("llava", learned_vision_tower="clip_vision_model", vision_tower="clip_vision_model"),
    _f(
        "longcat_flash",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
    ),
    _f(
        "longt5",
        scheme="relative",
        checkpoint_scheme="relative",
        position_bias_form="t5_decoder_only",
        head_defaults={"num_heads": 8},
    ),
    _f("m2m_100", scheme="sinusoidal"),
    _f("marian", scheme="sinusoidal"),
    _f("mbart", scheme="learned", learned_offset=2, checkpoint_scheme="learned"),
    _f(
        "minimax",
        mixer="linear_attention",
        mixer_name="lightning linear attention",
        layer_pattern="full_then_linear",
        scheme="rope",
        default_theta=1000000.0,
    ),
    _f("minimax_m2", scheme="rope", default_theta=5000000.0),
    _f("ministral3", llamacpp_rope="normal", query_scale="llama4_beta"),
    _f("mistral", llamacpp_rope="normal", scheme="rope"),
    _f("mistral3", llamacpp_rope="normal", vision_tower="pixtral"),
    _f("mistral4", apply_evens_first=True, query_scale="llama4_beta"),
    _f(
        "mistral_large4",
        apply_evens_first=True,
        scheme="rope",
        layout="interleaved",
        always_interleaved=True,
        vision_tower="pixtral",
    ),
    _f("mistral_large_3", vllm_deepseek_yarn=True),
    _f("mixtral", llamacpp_rope="normal", scheme="rope", default_theta=1000000.0),
    _f("moonshine", scheme="rope", layout="interleaved"),
    _f("moonshine_streaming", scheme="rope", layout="interleaved"),
    _f(
        "mpt",
        alibi_flag="attn_config",
        checkpoint_scheme="alibi",
        position_bias_form="from_last",
        head_defaults={"n_heads": 16},
    ),
    _f(
        "mt5",
        scheme="relative",
        checkpoint_scheme="relative",
        position_bias_form="t5_table",
        head_defaults={"num_heads": 6},
    ),
    _f("nanochat", rotation="negative"),
    _f("olmo", llamacpp_rope="normal", scheme="rope"),
    _f("olmo2", llamacpp_rope="neox", scheme="rope"),
    _f("olmo3", scheme="rope", default_theta=500000.0),
    _f("openai_privacy_filter", scheme="rope", layout="interleaved"),
    _f("opt", scheme="learned", learned_offset=2, checkpoint_scheme="learned"),
    _f("paddleocr_vl", mrope_section=(16, 24, 24), vision_tower="paddleocr_vl_vision"),
    _f("parakeet_ctc", scheme="relative_sinusoidal", encoder_config=True),
    _f("parakeet_encoder", scheme="relative_sinusoidal"),
    _f("parakeet_rnnt", scheme="relative_sinusoidal", encoder_config=True),
    _f("parakeet_tdt", scheme="relative_sinusoidal", encoder_config=True),
    _f("pegasus", scheme="sinusoidal"),
    _f(
        "pop2piano",
        scheme="relative",
        position_bias_form="t5_table",
        head_defaults={"num_heads": 8},
    ),
    _f("persimmon", scheme="rope", partial_rotary=0.5),
    _f("phi", llamacpp_rope="neox", scheme="rope", partial_rotary=0.5),
    _f("phi3", llamacpp_rope="neox", scheme="rope", original_max_default=4096),
    _f("phimoe", llamacpp_rope="neox", scheme="rope", default_theta=1000000.0),
    _f(
        "qwen2",
        llamacpp_rope="neox",
        scheme="rope",
        layer_rule="qwen_sliding",
        vllm_window_rule="model_level",
    ),
    _f(
        "qwen2_5_omni",
        scheme="rope",
        default_theta=1000000.0,
        mrope_section=(16, 24, 24),
        vision_tower="qwen2_5_omni_vision_encoder",
    ),
    _f("qwen2_5_omni_thinker", vision_tower="qwen2_5_omni_vision_encoder"),
    _f(
        "qwen2_5_vl",
        llamacpp_rope="mrope",
        mrope_ids_rule="qwen2_5_vl",
        scheme="rope",
        default_theta=1000000.0,
        mrope_section=(16, 24, 24),
        vision_tower="qwen2_5_vl_vision",
    ),
    _f("qwen2_5_vl_text", llamacpp_rope="mrope", scheme="rope", default_theta=1000000.0),
    _f("qwen2_moe", llamacpp_rope="neox", scheme="rope", layer_rule="qwen_sliding"),
    _f(
        "qwen2_vl",
        llamacpp_rope="mrope",
        mrope_ids_rule="qwen2_vl",
        scheme="rope",
        default_theta=1000000.0,
        mrope_section=(16, 24, 24),
        vision_tower="qwen2_vl_vision",
    ),
    _f("qwen2_vl_text", llamacpp_rope="mrope", scheme="rope", default_theta=1000000.0),
    _f("qwen3", llamacpp_rope="neox", scheme="rope", layer_rule="qwen_sliding"),
    _f(
        "qwen3_5",
        vllm_mrope_positions_factor=1,
        mixer="linear_attention",
        mixer_name="gated DeltaNet linear attention",
        mrope_section=(11, 11, 10),
        mrope_interleaved=True,
        vision_tower="qwen3_5_vision",
    ),
    _f(
        "qwen3_5_moe",
        vllm_mrope_positions_factor=1,
        mixer="linear_attention",
        mixer_name="gated DeltaNet linear attention",
        mrope_section=(11, 11, 10),
        mrope_interleaved=True,
        vision_tower="qwen3_5_moe_vision",
    ),
    _f("qwen3_moe", llamacpp_rope="neox", scheme="rope", layer_rule="qwen_sliding"),
    _f(
        "qwen3_omni_moe",
        mrope_section=(24, 20, 20),
        mrope_interleaved=True,
        vision_tower="qwen3_omni_moe_vision_encoder",
    ),
    _f("qwen3_omni_moe_thinker", vision_tower="qwen3_omni_moe_vision_encoder"),
    _f(
        "qwen3_vl",
        vllm_mrope_positions_factor=1,
        llamacpp_rope="imrope",
        mrope_ids_rule="qwen3_vl",
        scheme="rope",
        default_theta=500000.0,
        mrope_section=(24, 20, 20),
        mrope_interleaved=True,
        vision_tower="qwen3_vl_vision",
    ),
    _f(
        "qwen3_vl_moe",
        vllm_mrope_positions_factor=1,
        llamacpp_rope="imrope",
        mrope_ids_rule="qwen3_vl",
        scheme="rope",
        default_theta=500000.0,
        mrope_section=(24, 20, 20),
        mrope_interleaved=True,
        vision_tower="qwen3_vl_moe_vision",
    ),
    _f("qwen3_vl_moe_text", llamacpp_rope="imrope", scheme="rope", default_theta=500000.0),
    _f("qwen3_vl_text", llamacpp_rope="imrope", scheme="rope", default_theta=500000.0),
    _f(
        "qwen4_exp",
        mrope_section=(11, 11, 10),
        mrope_interleaved=True,
        vision_tower="qwen4_exp_vision",
    ),
    _f("roberta", scheme="learned", padding_offset=True, checkpoint_scheme="learned"),
    _f(
        "smollm3",
        llamacpp_rope="normal",
        scheme="rope",
        default_theta=2000000.0,
        nope_interval=True,
    ),
    _f("speech_to_text", scheme="sinusoidal"),
    _f("stablelm", llamacpp_rope="neox", scheme="rope", partial_rotary=0.25),
    _f("starcoder2", llamacpp_rope="neox", scheme="rope"),
    _f("step3p7", vision_tower="step3p5_vision"),
    _f("swin", scheme="windows"),
    _f("swinv2", scheme="windows", cosine_attention=True),
    _f(
        "switch_transformers",
        scheme="relative",
        checkpoint_scheme="relative",
        position_bias_form="t5_table",
        head_defaults={"num_heads": 12},
    ),
    _f(
        "t5",
        scheme="relative",
        checkpoint_scheme="relative",
        position_bias_form="t5_table",
        head_defaults={"num_heads": 8},
    ),
    _f(
        "udop",
        scheme="relative",
        position_bias_form="t5_decoder_only",
        head_defaults={"num_heads": 16},
    ),
    _f(
        "umt5",
        scheme="relative",
        checkpoint_scheme="relative",
        position_bias_form="t5_table",
        head_defaults={"num_heads": 6},
    ),
    _f("vit", scheme="learned"),
    _f(
        "whisper",
        scheme="learned",
        learned_rows_key="max_target_positions",
        checkpoint_scheme="learned",
    ),
    _f("xglm", checkpoint_scheme="learned"),
    _f("xlm-roberta", scheme="learned", padding_offset=True, checkpoint_scheme="learned"),
    _f("xlnet_none", scheme="learned"),
    _f("bamba", mixer="state_space", mixer_name="Mamba-2"),
    _f("falcon_h1", mixer="state_space", mixer_name="Mamba-2"),
    _f("falcon_mamba", mixer="state_space", mixer_name="Mamba", attention_free=True),
    _f("jamba", mixer="state_space", mixer_name="Mamba", layer_pattern="attention_period"),
    _f("kimi_linear", mixer="linear_attention", mixer_name="Kimi delta attention (linear)"),
    _f("mamba", mixer="state_space", mixer_name="Mamba", attention_free=True),
    _f("mamba2", mixer="state_space", mixer_name="Mamba-2", attention_free=True),
    _f("nemotron_h", mixer="state_space", mixer_name="Mamba-2"),
    _f("plamo2", mixer="state_space", mixer_name="Mamba"),
    _f(
        "qwen3_next",
        llamacpp_rope="neox",
        mixer="linear_attention",
        mixer_name="gated DeltaNet linear attention",
        layer_pattern="full_every_interval",
    ),
    _f("rwkv", attention_free=True),
    _f("zamba", mixer="state_space", mixer_name="Mamba"),
    _f("altclip", dual_encoder=True, learned_vision_tower="altclip_vision_model"),
    _f("blip", learned_vision_tower="blip_vision_model"),
    _f("blip-2", learned_vision_tower="blip_2_vision_model"),
    _f("bridgetower", learned_vision_tower="bridgetower_vision_model"),
    _f("chinese_clip", dual_encoder=True, learned_vision_tower="chinese_clip_vision_model"),
    _f("clip", dual_encoder=True, learned_vision_tower="clip_vision_model"),
    _f("clipseg", dual_encoder=True, learned_vision_tower="clipseg_vision_model"),
    _f("flava", learned_vision_tower="flava_image_model"),
    _f("git", learned_vision_tower="git_vision_model"),
    _f("granite_docling", learned_vision_tower="granite_docling_vision"),
    _f("groupvit", learned_vision_tower="groupvit_vision_model"),
    _f("idefics2", learned_vision_tower="idefics2_vision"),
    _f("idefics3", learned_vision_tower="idefics3_vision"),
    _f("instructblip", learned_vision_tower="instructblip_vision_model"),
    _f("instructblipvideo", learned_vision_tower="instructblipvideo_vision_model"),
    _f("internvl", learned_vision_tower="internvl_vision"),
    _f("janus", learned_vision_tower="janus_vision_model"),
    _f("kosmos-2", learned_vision_tower="kosmos_2_vision_model"),
    _f("llava_next", learned_vision_tower="clip_vision_model"),
    _f("llava_next_video", learned_vision_tower="clip_vision_model"),
    _f("llava_onevision", learned_vision_tower="siglip_vision_model"),
    _f("metaclip_2", dual_encoder=True, learned_vision_tower="metaclip_2_vision_model"),
    _f("minicpm_ocr", learned_vision_tower="minicpm_ocr_vision"),
    _f("minicpmv4_6", learned_vision_tower="minicpmv4_6_vision"),
    _f("minicpmv4_7", learned_vision_tower="minicpmv4_7_vision"),
    _f("ovis2", learned_vision_tower="ovis2_vision"),
    _f("owlv2", dual_encoder=True, learned_vision_tower="owlv2_vision_model"),
    _f("owlvit", dual_encoder=True, learned_vision_tower="owlvit_vision_model"),
    _f("paligemma", learned_vision_tower="siglip_vision_model"),
    _f("phi4_multimodal", learned_vision_tower="phi4_multimodal_vision"),
    _f("qianfan_ocr", learned_vision_tower="qianfan_ocr_vision"),
    _f("siglip", dual_encoder=True, learned_vision_tower="siglip_vision_model"),
    _f("siglip2", dual_encoder=True, learned_vision_tower="siglip2_vision_model"),
    _f("smolvlm", learned_vision_tower="smolvlm_vision"),
    _f("tipsv2", learned_vision_tower="tipsv2_vision_model"),
    _f("vipllava", learned_vision_tower="clip_vision_model"),
    _f("xclip", dual_encoder=True, learned_vision_tower="xclip_vision_model"),
    _f("arcee", llamacpp_rope="normal"),
    _f("baichuan", llamacpp_rope="normal"),
    _f("codeshell", llamacpp_rope="neox"),
    _f("dbrx", llamacpp_rope="neox"),
    _f("deepseek", llamacpp_rope="normal"),
    _f("exaone", llamacpp_rope="neox"),
    _f("exaone4", llamacpp_rope="normal"),
    _f("glm4_moe", llamacpp_rope="neox"),
    _f("granitemoe", llamacpp_rope="normal"),
    _f("minicpm", llamacpp_rope="normal"),
    _f("nemotron", llamacpp_rope="neox"),
    _f("olmoe", llamacpp_rope="neox"),
    _f("openelm", llamacpp_rope="neox"),
    _f("orion", llamacpp_rope="neox"),
    _f("plamo", llamacpp_rope="neox"),
    _f("qwen", llamacpp_rope="neox"),
    _f("seed_oss", llamacpp_rope="neox"),
    _f("starcoder", llamacpp_rope="normal"),
    _f("xverse", llamacpp_rope="normal"),
    _f("zamba2", mixer="state_space", mixer_name="Mamba-2", rope_switch=("use_mem_rope", True)),
    # Models whose vision tower has a rotary embedding of posenc.vision.rope (issue 33).
    _f("diffusion_gemma", vision_tower="gemma4_vision"),
    _f("inkling2", vision_tower="inkling2_vision"),
    _f("inkling2_loop", vision_tower="inkling2_vision"),
    _f("minimax_m3_vl", vision_tower="minimax_m3_vl_vision"),
    _f("muse_glimmer", vision_tower="muse_glimmer_vision"),
    _f("muse_spark", vision_tower="muse_spark_vision"),
    _f("sam3", vision_tower="sam3_vit_model"),
    _f("sam3_lite_text", vision_tower="sam3_vit_model"),
    _f("sam3_tracker", vision_tower="sam3_vit_model"),
    _f("sam3_tracker_video", vision_tower="sam3_vit_model"),
    _f("video_llama_3", vision_tower="video_llama_3_vision"),
)

#: Every record, by ``model_type``.
FAMILIES: Mapping[str, Family] = MappingProxyType({f.model_type: f for f in _RECORDS})

#: ``model_type`` spellings of older files, as transformers maps them.
ALIASES: Mapping[str, str] = MappingProxyType({"RefinedWebModel": "falcon", "RefinedWeb": "falcon"})


def base_type(model_type: str) -> str:
    """The type whose record a text model reads: an old spelling mapped, ``_text`` removed."""
    return ALIASES.get(model_type, model_type).removesuffix("_text")


def has_relative_attention_flag(model_type: str) -> bool:
    """Whether ``model_type`` is a DeBERTa's (v1 or v2, any spelling that holds the name), whose
    relative positions are on only where its config's ``relative_attention`` says so
    (``DebertaV2Config``'s default is False)."""
    return "deberta" in model_type


def family(model_type: str | None) -> Family:
    """The record of ``model_type`` (exactly as given); ``Family(model_type)``, every field its
    default, for a type posenc has no record of."""
    name = model_type or ""
    found = FAMILIES.get(name)
    return found if found is not None else Family(name)


def is_known(model_type: str | None) -> bool:
    """Whether posenc has a record of ``model_type``, or of its :func:`base_type`."""
    name = model_type or ""
    return name in FAMILIES or base_type(name) in FAMILIES


def _transformers_model_types() -> frozenset[str]:
    """The ``model_type`` of every config class of the transformers release posenc is checked
    against (``transformers_model_types.txt`` beside this module, written from its
    ``CONFIG_MAPPING_NAMES``; ``tests/lib/test_families.py`` keeps it equal to the installed one)."""
    text = resources.files(__package__).joinpath("transformers_model_types.txt").read_text()
    lines = (line.strip() for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


#: Every model type transformers defines a config for: read by the rules their keys name, as
#: transformers reads them (the project's sweeps compare each rotary one with its own module).
TRANSFORMERS_MODEL_TYPES: frozenset[str] = _transformers_model_types()


def is_known_model_type(model_type: str) -> bool:
    """Whether posenc has a record of ``model_type`` (or its :func:`base_type`), or transformers
    defines it; any other type is read by the generic rules, with
    :func:`unknown_model_type_warning`."""
    names = {model_type, ALIASES.get(model_type, model_type), base_type(model_type)}
    return is_known(model_type) or not names.isdisjoint(TRANSFORMERS_MODEL_TYPES)


def unknown_model_type_warning(model_type: str) -> str:
    """The one warning for a ``model_type`` that :func:`is_known_model_type` does not know."""
    return (
        f"model_type {model_type!r} is not one posenc knows: read by the generic rules (the "
        "RoPE, ALiBi, relative and position keys the config holds), which may not be what that "
        "model does"
    )


def types_where(test: Callable[[Family], object]) -> frozenset[str]:
    """The model types whose record passes ``test`` (``types_where(lambda f: f.mla)``)."""
    return frozenset(t for t, f in FAMILIES.items() if test(f))


def field_names() -> tuple[str, ...]:
    """The facts a record holds, in order."""
    return tuple(f.name for f in fields(Family))


#: Views of the records, under the names other code imports.
#: transformers 5's ``default_theta`` of each model type (10000.0 for any other).
DEFAULT_THETA: Mapping[str, float] = MappingProxyType(
    {t: f.default_theta for t, f in FAMILIES.items() if f.default_theta is not None}
)
#: Model types whose attention rotates adjacent channel pairs.
INTERLEAVED_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.layout == "interleaved")
#: The M-RoPE sections a model's text rotary module uses when ``rope_parameters`` gives none.
DEFAULT_MROPE_SECTION: Mapping[str, tuple[int, int, int]] = MappingProxyType(
    {t: f.mrope_section for t, f in FAMILIES.items() if f.mrope_section is not None}
)
#: ``partial_rotary_factor`` of each model type when the config gives none.
DEFAULT_PARTIAL_ROTARY: Mapping[str, float] = MappingProxyType(
    {t: f.partial_rotary for t, f in FAMILIES.items() if f.partial_rotary is not None}
)


__all__ = [
    "ALIASES",
    "DEFAULT_MROPE_SECTION",
    "DEFAULT_PARTIAL_ROTARY",
    "DEFAULT_THETA",
    "FAMILIES",
    "INTERLEAVED_MODEL_TYPES",
    "TRANSFORMERS_MODEL_TYPES",
    "Family",
    "Scheme",
    "base_type",
    "family",
    "field_names",
    "has_relative_attention_flag",
    "is_known",
    "is_known_model_type",
    "types_where",
    "unknown_model_type_warning",
]

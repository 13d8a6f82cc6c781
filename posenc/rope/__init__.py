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

The package is shaped like vLLM's ``rotary_embedding/``: the base tables
(:mod:`posenc.rope.tables`: whole, in row blocks, ``apply_rope``, ``RotaryEmbedding``), one module
per scaling type (:mod:`~posenc.rope.linear`, :mod:`~posenc.rope.dynamic`,
:mod:`~posenc.rope.yarn`, :mod:`~posenc.rope.longrope`, :mod:`~posenc.rope.llama3`,
:mod:`~posenc.rope.proportional`: parameters, validation and inverse frequencies together, listed
in :data:`posenc.rope.scaling.ROPE_TYPES`), M-RoPE's tables and ids beside them
(:mod:`~posenc.rope.sections`, :mod:`~posenc.rope.mrope_ids`), vLLM's rules
(:mod:`~posenc.rope.vllm`) and the endpoint kind (:mod:`~posenc.rope_kinds.kind`). A new type is one
module (its ``NAME``, ``Params`` with each parameter declared by
:func:`~posenc.rope.parameters.parameter`, ``validate``, ``inv_freq``, and where vLLM builds it
``VLLM_CLASS`` and ``vllm``, read by :mod:`~posenc.rope.vllm`) and its place in
:mod:`posenc.rope.scaling`'s list of built-in modules; ``tests/service/
test_rope_scaling.py`` adds one from a test file and sees it served.

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

from posenc.rope.scaling import (
    ROPE_CHANNELS,
    ROPE_INIT_FUNCTIONS,
    ROPE_LAYOUTS,
    ROPE_PARAMETER_CLASSES,
    ROPE_PARAMETER_KEYS,
    ROPE_ROTATIONS,
    ROPE_TYPES,
    SCALING_TYPES,
    RopeChannels,
    RopeLayout,
    RopeRotation,
    RopeScaling,
    RopeTables,
    ScalingType,
    rope_inv_freq,
)
from posenc.rope.sections import check_mrope_section, mrope_channel_axes, mrope_cos_sin
from posenc.rope.tables import (
    RotaryEmbedding,
    apply_rope,
    rope_blocks,
    rope_cos_sin,
    rotate_every_two,
    rotate_half,
)

__all__ = [
    "ROPE_CHANNELS",
    "ROPE_INIT_FUNCTIONS",
    "ROPE_LAYOUTS",
    "ROPE_PARAMETER_CLASSES",
    "ROPE_PARAMETER_KEYS",
    "ROPE_ROTATIONS",
    "ROPE_TYPES",
    "SCALING_TYPES",
    "RopeChannels",
    "RopeLayout",
    "RopeRotation",
    "RopeScaling",
    "RopeTables",
    "RotaryEmbedding",
    "ScalingType",
    "apply_rope",
    "check_mrope_section",
    "mrope_channel_axes",
    "mrope_cos_sin",
    "rope_blocks",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotate_every_two",
    "rotate_half",
]

"""RoPE tables, scaling and rotation against closed forms and Hugging Face transformers.

The reference implementations are transformers' ``modeling_rope_utils.ROPE_INIT_FUNCTIONS``
(with its ``dynamic_rope_update``), ``LlamaRotaryEmbedding`` and the ``apply_rotary_pos_emb`` of
Llama, GPT-NeoX (partial rotary) and GPT-J (interleaved).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import (
    InvalidArgument,
    RopeScaling,
    RotaryEmbedding,
    apply_rope,
    rope_cos_sin,
    rope_inv_freq,
)
from tests import references

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import (  # noqa: E402
    apply_rotary_pos_emb as neox_apply_rotary_pos_emb,
)
from transformers.models.gptj.modeling_gptj import (  # noqa: E402
    apply_rotary_pos_emb as gptj_apply_rotary_pos_emb,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    apply_rotary_pos_emb as llama_apply_rotary_pos_emb,
)

F64 = torch.float64


hf_config = references.transformers_rope_config
hf_inv_freq = references.transformers_inv_freq


def ours(params: dict) -> RopeScaling:
    return RopeScaling.from_dict(params)


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [2, 8, 64])
def test_position_zero_is_the_identity(layout, rotary_dim):
    t = rope_cos_sin([0], rotary_dim=rotary_dim, layout=layout, dtype=F64)
    torch.testing.assert_close(t.cos, torch.ones(1, rotary_dim, dtype=F64), rtol=0, atol=0)
    torch.testing.assert_close(t.sin, torch.zeros(1, rotary_dim, dtype=F64), rtol=0, atol=0)
    x = torch.randn(2, 3, 1, 96, dtype=F64)
    torch.testing.assert_close(apply_rope(x, t.cos, t.sin, layout=layout), x, rtol=0, atol=0)


def test_position_zero_carries_only_the_attention_scaling():
    scaling = RopeScaling(type="yarn", factor=4.0, original_max_position_embeddings=1024)
    t = rope_cos_sin([0], rotary_dim=8, scaling=scaling, dtype=F64)
    expected = 0.1 * math.log(4.0) + 1.0  # YaRN's mscale
    assert t.attention_scaling == pytest.approx(expected, rel=1e-15)
    torch.testing.assert_close(t.cos, torch.full((1, 8), expected, dtype=F64))
    torch.testing.assert_close(t.sin, torch.zeros(1, 8, dtype=F64), rtol=0, atol=0)


# head_dim 4, base 10000: inv_freq = [10000**0, 10000**(-2/4)] = [1, 0.01]; θ = p · inv_freq.
COS_1, COS_001, COS_2, COS_002 = (
    0.5403023058681398,
    0.9999500004166653,
    -0.4161468365471424,
    0.9998000066665778,
)
SIN_1, SIN_001, SIN_2, SIN_002 = (
    0.8414709848078965,
    0.009999833334166664,
    0.9092974268256817,
    0.01999866669333308,
)


def test_hand_worked_head_dim_4_half_layout():
    t = rope_cos_sin([0, 1, 2], rotary_dim=4, layout="half", dtype=F64)
    torch.testing.assert_close(t.inv_freq, torch.tensor([1.0, 0.01], dtype=F64))
    cos = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0], [COS_1, COS_001, COS_1, COS_001], [COS_2, COS_002, COS_2, COS_002]],
        dtype=F64,
    )
    sin = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [SIN_1, SIN_001, SIN_1, SIN_001], [SIN_2, SIN_002, SIN_2, SIN_002]],
        dtype=F64,
    )
    torch.testing.assert_close(t.cos, cos, rtol=0, atol=1e-15)
    torch.testing.assert_close(t.sin, sin, rtol=0, atol=1e-15)
    # rotate_half pairs channel 0 with 2 and 1 with 3: x = e_0 at position 1 -> (cos 1, 0, sin 1, 0)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64).expand(1, 1, 3, 4)
    out = apply_rope(x, t.cos, t.sin, layout="half")
    torch.testing.assert_close(out[0, 0, 1], torch.tensor([COS_1, 0.0, SIN_1, 0.0], dtype=F64))


def test_hand_worked_head_dim_4_interleaved_layout():
    t = rope_cos_sin([0, 1, 2], rotary_dim=4, layout="interleaved", dtype=F64)
    cos = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0], [COS_1, COS_1, COS_001, COS_001], [COS_2, COS_2, COS_002, COS_002]],
        dtype=F64,
    )
    sin = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [SIN_1, SIN_1, SIN_001, SIN_001], [SIN_2, SIN_2, SIN_002, SIN_002]],
        dtype=F64,
    )
    torch.testing.assert_close(t.cos, cos, rtol=0, atol=1e-15)
    torch.testing.assert_close(t.sin, sin, rtol=0, atol=1e-15)
    # rotate_every_two pairs channel 0 with 1: x = e_0 at position 2 -> (cos 2, sin 2, 0, 0)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64).expand(1, 1, 3, 4)
    out = apply_rope(x, t.cos, t.sin, layout="interleaved")
    torch.testing.assert_close(out[0, 0, 2], torch.tensor([COS_2, SIN_2, 0.0, 0.0], dtype=F64))


def test_hand_worked_linear_scaling_halves_the_angles():
    t = rope_cos_sin([2], rotary_dim=4, scaling=RopeScaling(type="linear", factor=2.0), dtype=F64)
    torch.testing.assert_close(t.inv_freq, torch.tensor([0.5, 0.005], dtype=F64))
    torch.testing.assert_close(
        t.cos, torch.tensor([[COS_1, COS_001, COS_1, COS_001]], dtype=F64), rtol=0, atol=1e-15
    )


def test_partial_rotary_leaves_the_pass_through_channels():
    t = rope_cos_sin(seq_len=5, rotary_dim=4, dtype=F64)
    x = torch.randn(2, 3, 5, 10, dtype=F64)
    out = apply_rope(x, t.cos, t.sin)
    torch.testing.assert_close(out[..., 4:], x[..., 4:], rtol=0, atol=0)
    assert not torch.allclose(out[..., 1:, :4], x[..., 1:, :4])


# --------------------------------------------------------------------------- parity: inv_freq

# (transformers rope_parameters, head_dim, rotary_dim, base)
STATIC_CASES = {
    "linear": ({"rope_type": "linear", "factor": 4.0}, 64, 64, 10000.0),
    "linear-partial": ({"rope_type": "linear", "factor": 2.5}, 64, 16, 10000.0),
    "yarn-default-betas": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        128,
        128,
        1000000.0,
    ),  # Qwen2.5 long-context recipe
    "yarn-deepseek-mscale": (
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
        },
        64,
        64,
        10000.0,
    ),
    "yarn-attention-factor-no-truncate": (
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 2048,
            "attention_factor": 1.25,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
        },
        96,
        64,
        50000.0,
    ),
    "yarn-ramp-clamped-at-R-minus-1": (
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 131072},
        64,
        64,
        10000.0,
    ),  # original length > 2π·base: the slow correction dim exceeds R/2 and is clamped to R − 1
    "yarn-equal-betas": (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 4.0,
            "beta_slow": 4.0,
            "truncate": False,
        },
        64,
        64,
        10000.0,
    ),  # zero-width ramp: transformers widens it by 0.001
    "llama3.1": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        128,
        128,
        500000.0,
    ),
    "llama3.2-partial": (
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 2.0,
            "high_freq_factor": 6.0,
            "original_max_position_embeddings": 1024,
        },
        64,
        32,
        500000.0,
    ),
}


@pytest.mark.parametrize("case", sorted(STATIC_CASES))
def test_inv_freq_and_attention_scaling_match_transformers(case):
    """transformers ``ROPE_INIT_FUNCTIONS[type](config, device)`` (float32) vs ours (float64)."""
    params, head_dim, rotary_dim, base = STATIC_CASES[case]
    ref, ref_scale = hf_inv_freq(dict(params), head_dim=head_dim, rotary_dim=rotary_dim, base=base)
    got, scale = rope_inv_freq(rotary_dim, base, ours(params), seq_len=100)
    assert got.dtype == F64 and got.shape == (rotary_dim // 2,)
    torch.testing.assert_close(got, ref.to(F64), rtol=2e-6, atol=0)
    assert scale == pytest.approx(ref_scale, rel=1e-12)


# --------------------------------------------------------------------------- parity: cos/sin


def hf_module_cos_sin(config: LlamaConfig, positions: torch.Tensor):
    """cos/sin of transformers' LlamaRotaryEmbedding (runs ``dynamic_rope_update``)."""
    module = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = module(x, positions[None])
    return cos[0], sin[0], module.attention_scaling


MODULE_CASES = {
    "default": ({"rope_type": "default"}, None, 64),
    "linear": ({"rope_type": "linear", "factor": 4.0}, None, 64),
    "yarn": (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        None,
        64,
    ),
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        None,
        64,
    ),
    "dynamic-below": ({"rope_type": "dynamic", "factor": 2.0}, 16, 12),
    "dynamic-above": ({"rope_type": "dynamic", "factor": 2.0}, 16, 64),
    "longrope-below": (
        {
            "rope_type": "longrope",
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "short_factor": [1.0 + i / 10 for i in range(16)],
            "long_factor": [2.0 + i for i in range(16)],
        },
        None,
        16,
    ),
    "longrope-above": (
        {
            "rope_type": "longrope",
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "short_factor": [1.0 + i / 10 for i in range(16)],
            "long_factor": [2.0 + i for i in range(16)],
        },
        None,
        17,
    ),
}


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_cos_sin_match_llama_rotary_embedding(case):
    """transformers' module works in float32, so positions stay small (< 64) where its float32
    angles are good to ~1e-6; ours are float64 cast to float32."""
    params, dynamic_omax, seq_len = MODULE_CASES[case]
    config = hf_config(dict(params), head_dim=32, max_position_embeddings=dynamic_omax or 64)
    positions = torch.arange(seq_len)
    ref_cos, ref_sin, ref_scale = hf_module_cos_sin(config, positions)
    scaling = None
    if params["rope_type"] != "default":
        extra = {"original_max_position_embeddings": dynamic_omax} if dynamic_omax else {}
        scaling = ours({**params, **extra})
    t = rope_cos_sin(positions, rotary_dim=32, scaling=scaling)
    assert t.attention_scaling == pytest.approx(ref_scale, rel=1e-12)
    torch.testing.assert_close(t.cos, ref_cos, rtol=0, atol=5e-6)
    torch.testing.assert_close(t.sin, ref_sin, rtol=0, atol=5e-6)


# --------------------------------------------------------------------------- parity: apply_rope


def test_apply_rope_matches_llama_apply_rotary_pos_emb():
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 9, 64, dtype=F64), torch.randn(2, 4, 9, 64, dtype=F64)
    positions = torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 1000])
    t = rope_cos_sin(positions, rotary_dim=64, dtype=F64)
    batch_cos, batch_sin = t.cos.expand(2, 9, 64), t.sin.expand(2, 9, 64)  # (B, T, R)
    ref_q, ref_k = llama_apply_rotary_pos_emb(q, k, batch_cos, batch_sin)
    torch.testing.assert_close(apply_rope(q, t.cos, t.sin), ref_q, rtol=0, atol=1e-14)
    torch.testing.assert_close(apply_rope(k, batch_cos, batch_sin), ref_k, rtol=0, atol=1e-14)


def test_apply_rope_partial_matches_gpt_neox():
    torch.manual_seed(1)
    q, k = torch.randn(2, 4, 7, 64, dtype=F64), torch.randn(2, 4, 7, 64, dtype=F64)
    t = rope_cos_sin(seq_len=7, rotary_dim=16, dtype=F64)  # rotary_pct 0.25
    ref_q, ref_k = neox_apply_rotary_pos_emb(q, k, t.cos.expand(2, 7, 16), t.sin.expand(2, 7, 16))
    torch.testing.assert_close(apply_rope(q, t.cos, t.sin), ref_q, rtol=0, atol=1e-14)
    torch.testing.assert_close(apply_rope(k, t.cos, t.sin), ref_k, rtol=0, atol=1e-14)


@pytest.mark.parametrize("rotary_dim", [64, 24])
def test_apply_rope_interleaved_matches_gpt_j(rotary_dim):
    """GPT-J works on (B, T, H, Dh) with sin/cos of the R/2 angles, rotating the first
    ``rotary_dim`` channels (GPTJAttention.forward)."""
    torch.manual_seed(2)
    x = torch.randn(2, 3, 6, 64, dtype=F64)  # (B, H, T, Dh)
    t = rope_cos_sin(seq_len=6, rotary_dim=rotary_dim, layout="interleaved", dtype=F64)
    sin, cos = t.sin[None, :, 0::2].expand(2, 6, -1), t.cos[None, :, 0::2].expand(2, 6, -1)
    x_bthd = x.transpose(1, 2)
    ref_rot = gptj_apply_rotary_pos_emb(x_bthd[..., :rotary_dim], sin, cos)
    ref = torch.cat((ref_rot, x_bthd[..., rotary_dim:]), dim=-1).transpose(1, 2)
    torch.testing.assert_close(
        apply_rope(x, t.cos, t.sin, layout="interleaved"), ref, rtol=0, atol=1e-14
    )


# --------------------------------------------------------------------------- drift


def test_float32_reference_drifts_at_131072_but_ours_does_not():
    """transformers' LlamaRotaryEmbedding computes ``position × inv_freq`` in float32."""
    positions = torch.tensor([131071, 131072, 131073])
    config = hf_config({"rope_type": "default"}, head_dim=128, max_position_embeddings=131072 * 2)
    ref_cos, ref_sin, _ = hf_module_cos_sin(config, positions)
    exact_cos, exact_sin = references.rope_cos_sin(
        positions.numpy(), references.rope_inv_freq(128, 10000.0), "half"
    )
    ref_err = max(
        np.abs(ref_cos.double().numpy() - exact_cos).max(),
        np.abs(ref_sin.double().numpy() - exact_sin).max(),
    )
    assert 1e-3 < ref_err < 5e-2, ref_err
    t = rope_cos_sin(positions, rotary_dim=128)
    assert t.cos.dtype == torch.float32
    our_err = max(
        np.abs(t.cos.double().numpy() - exact_cos).max(),
        np.abs(t.sin.double().numpy() - exact_sin).max(),
    )
    assert our_err < 1e-6, our_err


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float32_tables_within_1e6_of_float64_closed_form_up_to_2_pow_20(layout):
    rng = np.random.default_rng(0)
    positions = np.concatenate(
        [np.arange(64), rng.integers(0, 2**20, 2000), np.arange(2**20 - 64, 2**20)]
    )
    t = rope_cos_sin(torch.from_numpy(positions), rotary_dim=128, layout=layout, base=500000.0)
    exact_cos, exact_sin = references.rope_cos_sin(
        positions, references.rope_inv_freq(128, 500000.0), layout
    )
    np.testing.assert_allclose(t.cos.double().numpy(), exact_cos, rtol=0, atol=1e-6)
    np.testing.assert_allclose(t.sin.double().numpy(), exact_sin, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- properties

dims = st.sampled_from([(8, 8), (16, 8), (32, 32), (64, 16), (12, 4)])  # (head_dim, rotary_dim)
layouts = st.sampled_from(["half", "interleaved"])
scalings = st.sampled_from(
    [
        None,
        RopeScaling(type="linear", factor=4.0),
        RopeScaling(
            type="llama3",
            factor=8.0,
            original_max_position_embeddings=64,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
        ),
    ]
)


def rotate_at(x: torch.Tensor, position: int, rotary_dim: int, layout, scaling=None):
    t = rope_cos_sin([position], rotary_dim=rotary_dim, layout=layout, scaling=scaling, dtype=F64)
    return apply_rope(x, t.cos, t.sin, layout=layout)


@settings(max_examples=40, deadline=None)
@given(dims=dims, layout=layouts, position=st.integers(0, 2**20), seed=st.integers(0, 2**16))
def test_rope_keeps_norms(dims, layout, position, seed):
    head_dim, rotary_dim = dims
    x = torch.randn(1, 1, 1, head_dim, dtype=F64, generator=torch.Generator().manual_seed(seed))
    out = rotate_at(x, position, rotary_dim, layout)
    torch.testing.assert_close(out.norm(), x.norm(), rtol=1e-12, atol=0)
    torch.testing.assert_close(
        out[..., :rotary_dim].norm(), x[..., :rotary_dim].norm(), rtol=1e-12, atol=0
    )


@settings(max_examples=40, deadline=None)
@given(
    dims=dims,
    layout=layouts,
    scaling=scalings,
    m=st.integers(0, 5000),
    n=st.integers(0, 5000),
    shift=st.integers(0, 5000),
    seed=st.integers(0, 2**16),
)
def test_inner_product_depends_only_on_the_offset(dims, layout, scaling, m, n, shift, seed):
    head_dim, rotary_dim = dims
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, head_dim, dtype=F64, generator=g)
    k = torch.randn(1, 1, 1, head_dim, dtype=F64, generator=g)

    def score(a: int, b: int) -> float:
        qa = rotate_at(q, a, rotary_dim, layout, scaling)
        kb = rotate_at(k, b, rotary_dim, layout, scaling)
        return float((qa * kb).sum())

    assert score(m + shift, n + shift) == pytest.approx(score(m, n), rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------- the module


@pytest.mark.parametrize(
    "scaling",
    [None, RopeScaling(type="dynamic", factor=2.0, original_max_position_embeddings=16)],
    ids=["plain", "dynamic"],
)
def test_rotary_embedding_module_equals_the_functions(scaling):
    module = RotaryEmbedding(
        32, rotary_dim=16, layout="interleaved", scaling=scaling, max_seq_len=32
    )
    x = torch.randn(2, 3, 40, 32)
    positions = torch.arange(40)  # beyond the cache of 32 and above the dynamic original 16
    t = rope_cos_sin(positions, rotary_dim=16, layout="interleaved", scaling=scaling)
    torch.testing.assert_close(
        module(x, positions), apply_rope(x, t.cos, t.sin, layout="interleaved")
    )
    short = torch.arange(10)
    t = rope_cos_sin(short, rotary_dim=16, layout="interleaved", scaling=scaling)
    torch.testing.assert_close(
        module(x[:, :, :10]), apply_rope(x[:, :, :10], t.cos, t.sin, layout="interleaved")
    )


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("call", "field", "message"),
    [
        (lambda: rope_cos_sin(seq_len=4, rotary_dim=7), "rotary_dim", "even integer >= 2, got 7"),
        (lambda: rope_cos_sin(seq_len=4, rotary_dim=0), "rotary_dim", "got 0"),
        (lambda: rope_cos_sin(seq_len=4, rotary_dim=8, base=1.0), "base", "> 1, got 1.0"),
        (lambda: rope_cos_sin(seq_len=0, rotary_dim=8), "seq_len", ">= 1, got 0"),
        (lambda: rope_cos_sin([0, 3, -2], rotary_dim=8), "positions[2]", "positions[2] = -2"),
        (lambda: rope_cos_sin([0], seq_len=3, rotary_dim=8), "positions", "exactly one"),
        (lambda: rope_cos_sin(seq_len=3, rotary_dim=8, layout="neox"), "layout", "'neox'"),  # type: ignore[arg-type]
        (lambda: RotaryEmbedding(9), "head_dim", "got 9"),
        (lambda: RotaryEmbedding(8, rotary_dim=12), "rotary_dim", "rotary_dim=12 and head_dim=8"),
        (
            lambda: apply_rope(torch.zeros(1, 1, 3, 8), torch.zeros(3, 10), torch.zeros(3, 10)),
            "rotary_dim",
            "rotary_dim=10 and head_dim=8",
        ),
        (
            lambda: apply_rope(torch.zeros(1, 1, 3, 8), torch.zeros(4, 8), torch.zeros(4, 8)),
            "cos",
            "4 positions but x has T = 3",
        ),
        (lambda: RopeScaling(type="linear", factor=0.0), "scaling.factor", "> 0, got 0.0"),
        (lambda: RopeScaling(type="linear", factor=-2), "scaling.factor", "> 0, got -2"),
        (
            lambda: RopeScaling.from_dict({"type": "linear"}),
            "scaling.factor",
            "required for linear",
        ),
        (
            lambda: RopeScaling.from_dict({"rope_type": "yarn", "factor": 4.0}),
            "scaling.original_max_position_embeddings",
            "required for yarn",
        ),
        (
            lambda: RopeScaling.from_dict({"type": "linear", "factor": 2.0, "fudge": 1}),
            "scaling.fudge",
            "['fudge']",
        ),
        (
            lambda: RopeScaling.from_dict({"type": "ntk", "factor": 2.0}),
            "scaling.type",
            "got 'ntk'",
        ),
        (
            lambda: RopeScaling(
                type="llama3",
                factor=8.0,
                original_max_position_embeddings=8192,
                low_freq_factor=4.0,
                high_freq_factor=1.0,
            ),
            "scaling.high_freq_factor",
            "high_freq_factor=1.0 and low_freq_factor=4.0",
        ),
        (
            lambda: RopeScaling(
                type="yarn",
                factor=4.0,
                original_max_position_embeddings=64,
                beta_fast=1.0,
                beta_slow=2.0,
            ),
            "scaling.beta_fast",
            "beta_fast=1.0 and beta_slow=2.0",
        ),
        (
            lambda: rope_inv_freq(
                8,
                10000.0,
                RopeScaling(
                    type="longrope",
                    factor=4.0,
                    original_max_position_embeddings=64,
                    short_factor=(1.0, 1.0, 1.0),
                    long_factor=(2.0,) * 4,
                ),
            ),
            "scaling.short_factor",
            "rotary_dim/2 = 4 entries, got 3",
        ),
        (
            lambda: RopeScaling(
                type="longrope",
                factor=4.0,
                original_max_position_embeddings=64,
                short_factor=(1.0,),
                long_factor=(1.0, 0.0),
            ),
            "scaling.long_factor",
            "long_factor[1] must be a finite number > 0, got 0.0",
        ),
        (
            lambda: rope_inv_freq(
                2,
                10000.0,
                RopeScaling(type="dynamic", factor=2.0, original_max_position_embeddings=64),
            ),
            "rotary_dim",
            "rotary_dim >= 4 (the base exponent is R/(R-2)), got 2",
        ),
    ],
)
def test_bad_arguments_state_the_numbers(call, field, message):
    with pytest.raises(InvalidArgument) as info:
        call()
    assert message in str(info.value)
    assert info.value.field == field


def test_from_dict_accepts_rope_type_and_lists():
    scaling = RopeScaling.from_dict(
        {
            "rope_type": "longrope",
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "short_factor": [1, 1.5],
            "long_factor": [2.0, 3],
        }
    )
    assert scaling == RopeScaling(
        type="longrope",
        factor=4.0,
        original_max_position_embeddings=64,
        short_factor=(1.0, 1.5),
        long_factor=(2.0, 3.0),
    )
    assert RopeScaling.from_dict({"type": "linear", "factor": 2}) == RopeScaling(
        type="linear", factor=2
    )


def test_exponent_dim_is_the_odd_denominator_of_an_odd_width() -> None:
    """``exponent_dim`` E = R − 1: ``base^(−2i/E)`` for i < R/2 (transformers' ``arange(0, E,
    2) / E`` for an odd ``dim``), closed form in float64; anything but R or R − 1 is refused,
    and so are yarn and longrope, whose ramps are E // 2 long."""
    from posenc.core.errors import InvalidArgument
    from posenc.rope import rope_inv_freq

    inv, scale = rope_inv_freq(22, 10000.0, exponent_dim=21)
    want = torch.tensor([10000.0 ** (-2 * i / 21) for i in range(11)], dtype=torch.float64)
    torch.testing.assert_close(inv, want, rtol=1e-15, atol=0)
    assert scale == 1.0
    torch.testing.assert_close(rope_inv_freq(22, exponent_dim=22)[0], rope_inv_freq(22)[0])
    with pytest.raises(InvalidArgument) as info:
        rope_inv_freq(22, exponent_dim=20)
    assert info.value.field == "exponent_dim"
    yarn = RopeScaling.from_dict(
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    )
    with pytest.raises(InvalidArgument, match="even rotated width"):
        rope_inv_freq(22, scaling=yarn, exponent_dim=21)
    linear = RopeScaling.from_dict({"type": "linear", "factor": 4.0})
    torch.testing.assert_close(rope_inv_freq(22, scaling=linear, exponent_dim=21)[0], want / 4)


def test_apply_rope_trailing_channels_closed_form() -> None:
    """``rotated_channels="trailing"`` rotates ``x[..., Dh − R:]`` (DeepSeek-V4) and passes the
    leading ``Dh − R`` channels through; a 2-channel rotation by θ written out by hand."""
    from posenc.rope import apply_rope

    theta = 0.7
    cos = torch.full((1, 2), math.cos(theta), dtype=torch.float64)  # (T, R)
    sin = torch.full((1, 2), math.sin(theta), dtype=torch.float64)
    x = torch.tensor([[[[3.0, 5.0, 1.0, 2.0]]]], dtype=torch.float64)  # (1, 1, 1, 4)
    out = apply_rope(x, cos, sin, rotated_channels="trailing")
    c, s = math.cos(theta), math.sin(theta)
    want = torch.tensor([[[[3.0, 5.0, c - 2 * s, 2 * c + s]]]], dtype=torch.float64)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-15)
    lead = apply_rope(x, cos, sin)
    want = torch.tensor([[[[3 * c - 5 * s, 5 * c + 3 * s, 1.0, 2.0]]]], dtype=torch.float64)
    torch.testing.assert_close(lead, want, rtol=0, atol=1e-15)


def test_rotary_embedding_module_takes_the_config_conventions() -> None:
    """The nn.Module serves what the config reader reads for nanochat (rotation negative),
    GLM-4-MoE (an odd exponent width) and DeepSeek-V4 (trailing channels), in and beyond its
    cache: closed forms, and the round trip of +θ then −θ."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 40, 16, dtype=torch.float64)
    pos = torch.arange(40)
    for max_seq_len in (64, 8):  # cached, then computed beyond the cache
        plus = RotaryEmbedding(16, max_seq_len=max_seq_len)
        minus = RotaryEmbedding(16, max_seq_len=max_seq_len, rotation="negative")
        torch.testing.assert_close(minus(plus(x, pos), pos), x, rtol=0, atol=1e-5)  # float32 tables
        assert not torch.allclose(plus(x, pos), x, atol=1e-2)
    # exponent_dim 7 of a table 8 wide: cos(p · base^(−2i/7)), i < 4, in both halves
    odd = RotaryEmbedding(16, rotary_dim=8, exponent_dim=7, base=100.0, max_seq_len=64)
    w = 100.0 ** (-torch.arange(0, 7, 2, dtype=torch.float64) / 7)  # (4,)
    want = torch.cos(pos[:, None].double() * w[None, :])
    torch.testing.assert_close(
        odd.cos[:40].double(), torch.cat((want, want), -1), rtol=0, atol=1e-7
    )
    # trailing channels: the last R rotate as a leading module of width R would rotate them
    trailing = RotaryEmbedding(16, rotary_dim=8, rotated_channels="trailing")
    leading = RotaryEmbedding(8)
    out = trailing(x, pos)
    torch.testing.assert_close(out[..., :8], x[..., :8], rtol=0, atol=0)
    torch.testing.assert_close(out[..., 8:], leading(x[..., 8:].contiguous(), pos), rtol=0, atol=0)
    with pytest.raises(InvalidArgument, match="exponent_dim"):
        RotaryEmbedding(16, rotary_dim=8, exponent_dim=5)

"""A config's attention geometry (:mod:`posenc.readers.hf.heads`), read through
:func:`~posenc.readers.hf.positions.read_positions`: the head width ``Dh`` (``head_dim``, else
``hidden_size // num_attention_heads`` under either family's key names) and the softmax scale
each family's attention applies, worked by hand from the modeling files' rules: ``Dh^-0.5``;
Gemma 2's ``query_pre_attn_scalar^-0.5``; DeepSeek V3's ``(qk_nope + qk_rope)^-0.5 · mscale²``
with ``mscale = 0.1·mscale_all_dim·ln(factor) + 1``; Granite's ``attention_multiplier``; T5's
and GPT-2 without ``scale_attn_weights``: 1. Absurd sizes are refused with the key and the
numbers."""

from __future__ import annotations

import math

import pytest

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.readers.hf.positions import read_positions


@pytest.mark.parametrize(
    ("config", "head_dim", "scale"),
    [
        ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}, 128, 128**-0.5),
        ({"model_type": "gpt2", "n_embd": 768, "n_head": 12}, 64, 0.125),
        ({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "scale_attn_weights": False}, 64, 1.0),
        (
            {"model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "head_dim": 256,
             "query_pre_attn_scalar": 224},
            256,
            224**-0.5,
        ),
        (
            {"model_type": "granite", "hidden_size": 4096, "num_attention_heads": 32,
             "attention_multiplier": 0.015625},
            128,
            0.015625,
        ),
        ({"model_type": "t5", "d_model": 512, "num_heads": 8, "d_kv": 64}, 64, 1.0),
    ],
)  # fmt: skip
def test_head_width_and_softmax_scale(config: dict, head_dim: int, scale: float) -> None:
    positions = read_positions(config)
    assert positions.head_dim == head_dim
    assert positions.softmax_scale == pytest.approx(scale, rel=1e-15)


def test_deepseek_v3_scale_is_the_latent_width_times_yarns_mscale_squared() -> None:
    """The published config: ``qk_nope_head_dim`` 128, ``qk_rope_head_dim`` 64 (the rotated
    width), YaRN ``factor`` 40 with ``mscale_all_dim`` 1."""
    positions = read_positions(model_config("deepseek-v3"))
    assert positions.head_dim == 64
    mscale = 0.1 * 1.0 * math.log(40) + 1.0
    assert positions.softmax_scale == pytest.approx((128 + 64) ** -0.5 * mscale**2, rel=1e-15)


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        (
            {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 128},
            "config.num_attention_heads",
            "hidden_size 64 / num_attention_heads 128 gives a head dimension of 0.5; it must be at "
            "least 1",
        ),
        (
            {"model_type": "llama", "head_dim": 2**17, "hidden_size": 64, "num_attention_heads": 1},
            "config.head_dim",
            "the head dimension 131072 is over posenc's limit of 65536",
        ),
        (
            {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
             "num_hidden_layers": 2**17},
            "config.num_hidden_layers",
            "config.num_hidden_layers 131072 is over posenc's limit of 65536 layers",
        ),
    ],
)  # fmt: skip
def test_absurd_sizes_are_refused_with_the_key(config: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        read_positions(config)
    assert (str(err.value), err.value.field) == (message, field)

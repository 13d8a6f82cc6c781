"""Gemma 4's proportional RoPE (:mod:`posenc.rope.proportional`): the first
``partial_rotary_factor`` of the ``Dh/2`` frequencies are ``base^(−2i/Dh)``, the rest 0, all
divided by ``factor``; against a closed form written here and transformers'
``_compute_proportional_rope_parameters`` on a Gemma 4 config."""

from __future__ import annotations

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import rope_request_fields
from posenc.rope import RopeScaling, rope_cos_sin, rope_inv_freq

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402

POSITIONS = torch.arange(64)


def test_inv_freq_hand_worked() -> None:
    """``Dh = 8``, base 100, ``partial_rotary_factor = 0.5``, ``factor = 2``: two of the four
    frequencies rotate, ``100^0 / 2`` and ``100^(−2/8) / 2``; the other two are 0."""
    scaling = RopeScaling.from_dict(
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0}
    )
    got, scale = rope_inv_freq(8, 100.0, scaling)
    expected = torch.tensor([0.5, 100.0 ** (-0.25) / 2, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=1e-15, atol=0)
    assert scale == 1.0


def test_channels_past_the_rotated_share_are_not_rotated() -> None:
    """A zero frequency is the identity: cos 1 and sin 0 at every position in those channels."""
    scaling = RopeScaling.from_dict({"rope_type": "proportional", "partial_rotary_factor": 0.25})
    t = rope_cos_sin(POSITIONS, rotary_dim=16, base=10000.0, scaling=scaling, dtype=torch.float64)
    # half layout: the R/2 angles twice; 0.25 of 8 frequencies rotate
    for half in (slice(2, 8), slice(10, 16)):
        torch.testing.assert_close(t.cos[:, half], torch.ones(64, 6, dtype=torch.float64))
        torch.testing.assert_close(t.sin[:, half], torch.zeros(64, 6, dtype=torch.float64))
    assert not torch.equal(t.cos[1:, :2], torch.ones(63, 2, dtype=torch.float64))


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_a_share_outside_0_1_is_refused_by_name(share: float) -> None:
    with pytest.raises(InvalidArgument) as err:
        RopeScaling.from_dict({"rope_type": "proportional", "partial_rotary_factor": share})
    assert err.value.field == "scaling.partial_rotary_factor"
    assert str(share) in str(err.value)


def test_proportional_equals_transformers() -> None:
    """Gemma 4's proportional type, from transformers' ROPE_INIT_FUNCTIONS on a Gemma4 config."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = {
        "model_type": "gemma4_text",
        "hidden_size": 1536,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "num_hidden_layers": 12,
        "max_position_embeddings": 131072,
    }
    tc = AutoConfig.for_model(**config)  # type: ignore[arg-type]
    inv_hf, scale_hf = ROPE_INIT_FUNCTIONS["proportional"](tc, None, layer_type="full_attention")
    mp = read_positions(config)
    layer = mp.rope["full_attention"]
    assert layer.rope_type == "proportional" and layer.rotary_dim == 512
    f = rope_request_fields(mp, "full_attention")
    ours = rope_cos_sin(
        POSITIONS,
        rotary_dim=f["rotary_dim"],
        base=f["base"],
        scaling=RopeScaling.from_dict(f["scaling"]),
        dtype=torch.float64,
    )
    assert ours.inv_freq.shape == (256,)
    assert int((ours.inv_freq == 0).sum()) == 256 - 64  # 0.25 of 512/2 frequencies rotate
    torch.testing.assert_close(ours.inv_freq.float(), inv_hf.float(), rtol=2e-6, atol=0)
    assert scale_hf == 1.0 and mp.softmax_scale == 1.0

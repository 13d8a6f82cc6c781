"""DeBERTa-v2/v3 and Swin relative positions against transformers' own code.

References: transformers ``models/deberta_v2/modeling_deberta_v2.py`` (``build_relative_position``,
``make_log_bucket_position``, ``DebertaV2Encoder``), ``models/swin/modeling_swin.py``
(``SwinRelativePositionBias``) and ``models/swinv2/modeling_swinv2.py``
(``Swinv2SelfAttention``), each built from a config with no weights loaded.
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import pytest
import torch
from torch.testing import assert_close

from posenc import resolve
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.readers.hf.positions import read_positions
from posenc.relative_schemes.relative import (
    deberta_log_bucket,
    deberta_relative_positions,
    swin_relative_position_index,
)
from tests.references import deberta_build_relative_position

# microsoft/deberta-v3-base's config.json, as posenc.facts.model_configs quotes it
DEBERTA_V3_BASE = model_config("deberta-v3-base")
# microsoft/swin-tiny-patch4-window7-224 (the keys positions depend on), as quoted there
SWIN_TINY = model_config("swin-tiny")
RELATIVE = kinds.REGISTRY["relative"]


def table(fields: dict) -> dict[str, torch.Tensor]:
    return resolve.compute(RELATIVE, resolve.resolve_fields(RELATIVE, fields))


# ---------------------------------------------------------------------------------------------
# DeBERTa
# ---------------------------------------------------------------------------------------------


def test_deberta_hand_worked_small_case() -> None:
    """position_buckets 4 (mid 2), max_position 5: |r| <= 2 kept; r = 3 gives
    ceil(log(3/2) / log(4/2) · 1) + 2 = ceil(0.585) + 2 = 3; r = 4: ceil(1) + 2 = 3;
    r = 5: ceil(log 2.5 / log 2 = 1.32) + 2 = 4; negative positions mirror."""
    got = deberta_log_bucket([0, 1, 2, 3, 4, 5, -3, -4, -5], position_buckets=4, max_position=5)
    assert got.tolist() == [0, 1, 2, 3, 3, 4, -3, -3, -4]
    plain = deberta_relative_positions(2, 3)
    assert plain.tolist() == [[0, -1, -2], [1, 0, -1]]  # i - j, query i at position i


@pytest.mark.parametrize(
    ("t", "s", "bucket_size", "max_position"),
    [(512, 512, 256, 512), (700, 2048, 256, 512), (33, 90, 8, 20), (64, 64, -1, 512)],
)
def test_deberta_matches_build_relative_position(t, s, bucket_size, max_position) -> None:
    got = deberta_relative_positions(t, s, position_buckets=bucket_size, max_position=max_position)
    assert_close(
        got, deberta_build_relative_position(t, s, bucket_size, max_position), rtol=0, atol=0
    )


def test_deberta_v3_log_buckets_to_2_15_match_transformers_float32() -> None:
    """The published setting (256 buckets, max_position 512) at every distance up to 2^15:
    transformers' float32 log and posenc's float64 log give the same buckets."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rp = torch.arange(-(2**15), 2**15 + 1)
    for bucket_size, max_position in [(256, 512), (256, 1024), (64, 512), (32, 128)]:
        want = make_log_bucket_position(rp, bucket_size, max_position).long()
        got = deberta_log_bucket(rp, position_buckets=bucket_size, max_position=max_position)
        assert torch.equal(got, want), (bucket_size, max_position)


def exact_bucket(r: int, bucket_size: int, max_position: int) -> int:
    """The bucket with the logarithms taken to 60 digits (Decimal)."""
    getcontext().prec = 60
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    x = (Decimal(abs(r)) / mid).ln() / (Decimal(max_position - 1) / mid).ln() * (mid - 1)
    ceil = int(x.to_integral_value(rounding="ROUND_CEILING"))
    return (ceil + mid) * (1 if r > 0 else -1)


@pytest.mark.parametrize(("bucket_size", "max_position"), [(256, 256), (128, 66), (512, 4096)])
def test_deberta_where_float32_differs_float64_is_exact(bucket_size, max_position) -> None:
    """Settings where transformers' float32 log moves a few boundaries below 2^15: at every
    disagreement posenc's bucket is the one an exact logarithm gives."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rp = torch.arange(-(2**15), 2**15 + 1)
    want = make_log_bucket_position(rp, bucket_size, max_position).long()
    got = deberta_log_bucket(rp, position_buckets=bucket_size, max_position=max_position)
    differ = (got != want).nonzero().flatten()
    assert 0 < len(differ) < 200  # the float32 boundary slips this test is about
    for r in rp[differ].tolist():
        assert got[r + 2**15].item() == exact_bucket(r, bucket_size, max_position), r
    sample = rp[::997].tolist()
    assert [got[r + 2**15].item() for r in sample] == [
        exact_bucket(r, bucket_size, max_position) for r in sample
    ]


def test_deberta_v3_config_reads_the_max_position_embeddings_fallback() -> None:
    mp = read_positions(DEBERTA_V3_BASE)
    assert mp.kind == "relative"
    assert dict(mp.relative or {}) == {
        "bucketing": "deberta",
        "position_buckets": 256,
        "max_position": 512,
    }
    assert mp.softmax_scale == pytest.approx((64 * 3) ** -0.5)
    got = table({"config": DEBERTA_V3_BASE, "seq_len": 600, "key_len": 1100})
    assert set(got) == {"buckets"}
    assert_close(
        got["buckets"], deberta_build_relative_position(600, 1100, 256, 512), rtol=0, atol=0
    )


def test_deberta_config_through_the_encoder() -> None:
    """The encoder's own get_rel_pos, from a DebertaV2Config (no weights)."""
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Encoder

    for extra in ({"position_buckets": 256}, {"max_relative_positions": 40}, {}):
        cfg = {**DEBERTA_V3_BASE, "num_hidden_layers": 1, **extra}
        if "position_buckets" not in extra:
            cfg.pop("position_buckets")
        encoder = DebertaV2Encoder(DebertaV2Config(**cfg))
        hidden = torch.zeros(1, 300, cfg["hidden_size"])
        want = encoder.get_rel_pos(hidden)[0]
        got = table({"config": cfg, "seq_len": 300})["buckets"]
        assert_close(got, want, rtol=0, atol=0)


def test_deberta_without_relative_attention_is_refused() -> None:
    for cfg in ({**DEBERTA_V3_BASE, "relative_attention": False}, {"model_type": "deberta-v2"}):
        with pytest.raises(InvalidArgument, match="no relative positions") as err:
            table({"config": cfg, "seq_len": 4})
        assert err.value.field == "config"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"seq_len": 4, "key_len": 3}, "key_len"),
        ({"seq_len": 4, "num_heads": 2}, "num_heads"),
        ({"seq_len": 4, "bucketing": "deberta", "position_buckets": 8}, "max_position"),
        (
            {"seq_len": 4, "bucketing": "deberta", "position_buckets": 8, "max_position": 5},
            "max_position",
        ),
        (
            {"seq_len": 4, "bucketing": "deberta", "position_buckets": 1, "max_position": 50},
            "position_buckets",
        ),
    ],
)
def test_deberta_invalid_fields(fields: dict, where: str) -> None:
    if "bucketing" not in fields:
        fields = {"config": DEBERTA_V3_BASE, **fields}
    with pytest.raises(InvalidArgument) as err:
        table(fields)
    assert err.value.field == where


# ---------------------------------------------------------------------------------------------
# Swin
# ---------------------------------------------------------------------------------------------


def test_swin_hand_worked_2x2_window() -> None:
    """W = 2, cells (0,0) (0,1) (1,0) (1,1): index (dh + 1)·3 + (dw + 1)."""
    assert swin_relative_position_index(2).tolist() == [
        [4, 3, 1, 0],
        [5, 4, 2, 1],
        [7, 6, 4, 3],
        [8, 7, 5, 4],
    ]


@pytest.mark.parametrize("window", [1, 2, 7, 8, 12, 24])
def test_swin_matches_the_models_buffers(window: int) -> None:
    from transformers import Swinv2Config
    from transformers.models.swin.modeling_swin import SwinRelativePositionBias
    from transformers.models.swinv2.modeling_swinv2 import Swinv2SelfAttention

    got = swin_relative_position_index(window)
    v1 = SwinRelativePositionBias(3, (window, window)).relative_position_index
    assert torch.equal(got, v1.view(window**2, window**2))
    v2 = Swinv2SelfAttention(Swinv2Config(), 96, 3, window).relative_position_index
    assert torch.equal(got, v2)


def test_swin_configs_and_their_seeded_bias() -> None:
    got = table({"config": SWIN_TINY, "num_heads": 3, "seed": 5})
    assert torch.equal(got["buckets"], swin_relative_position_index(7))
    gen = torch.Generator().manual_seed(5)
    bias_table = torch.randn(13 * 13, 3, generator=gen)  # nn.Embedding's init: N(0, 1)
    want = bias_table[got["buckets"]].permute(2, 0, 1)
    assert_close(got["bias"], want, rtol=0, atol=0)
    v2 = table({"config": {"model_type": "swinv2", "window_size": 8}, "seq_len": 64})
    assert torch.equal(v2["buckets"], swin_relative_position_index(8))
    default = table({"config": {"model_type": "swin"}})  # SwinConfig's window_size 7
    assert default["buckets"].shape == (49, 49)


@pytest.mark.parametrize("fields", [{"seq_len": 48}, {"seq_len": 49, "key_len": 50}])
def test_swin_lengths_must_be_the_window(fields: dict) -> None:
    with pytest.raises(InvalidArgument, match="W² = 49") as err:
        table({"config": SWIN_TINY, **fields})
    assert err.value.field in fields

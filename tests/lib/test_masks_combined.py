"""``as: "combined"``: the mask and a position bias as BLOOM, MPT and T5 add them to their scores.

Each model is built by transformers from a small config, no weights, in eager attention; its
query projection is zeroed so its scores are exactly the bias (BLOOM's ``baddbmm`` with
``beta=1``, MPT's and T5's ``q·kᵀ = 0``), and the tensor each model passes to
``torch.nn.functional.softmax`` in its first layer is caught. posenc's combined tensor, with
``masked_value: "min"``, must be it. T5's table is set to posenc's seeded table
(``relative_attention_bias``), everything else is the model's own code: its ALiBi
(``build_alibi_tensor``, ``build_mpt_alibi_tensor``), its buckets (``compute_bias``) and its masks
(``create_causal_mask``, ``create_bidirectional_mask``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch

from posenc import kinds, resolve
from posenc.alibi import alibi_bias
from posenc.errors import InvalidArgument
from posenc.masks import combined_blocks, mask_inputs, mask_rule
from posenc.position_bias import position_bias
from posenc.relative import relative_bias_table

transformers = pytest.importorskip("transformers")

MASKS = kinds.REGISTRY["masks"]
PADDED = [[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]


def _posenc(**fields: Any) -> torch.Tensor:
    params = resolve.resolve_fields(MASKS, {"as": "combined", "masked_value": "min", **fields})
    return resolve.compute(MASKS, params)["combined"]


def _scores(model: Any, call: Callable[[], Any]) -> torch.Tensor:
    """The first tensor the model's attention hands to softmax."""
    caught: list[torch.Tensor] = []
    softmax = torch.nn.functional.softmax

    def spy(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        caught.append(x.detach().clone())
        return softmax(x, *args, **kwargs)

    with torch.no_grad(), mock.patch.object(torch.nn.functional, "softmax", spy):
        call()
    return caught[0]


@pytest.mark.parametrize("heads", [4, 6])
@pytest.mark.parametrize("padded", [False, True])
def test_bloom_adds_its_alibi_and_causal_mask(heads: int, padded: bool) -> None:
    """BLOOM: slopes · (the key's index among the real tokens), ``finfo.min`` where masked."""
    config = transformers.BloomConfig(
        n_layer=1, n_head=heads, hidden_size=heads * 4, vocab_size=32, attn_implementation="eager"
    )
    model = transformers.BloomModel(config).eval()
    with torch.no_grad():
        model.h[0].self_attention.query_key_value.weight.zero_()
        model.h[0].self_attention.query_key_value.bias.zero_()
    mask = torch.tensor(PADDED) if padded else None
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model, lambda: model(input_ids=ids, attention_mask=mask))
    got = _posenc(
        seq_len=7,
        attention_mask=PADDED if padded else None,
        position_bias="alibi",
        num_heads=heads,
        alibi_form="key_index",
    )
    if not padded:
        got = got.expand(3, -1, -1, -1)
    if heads == 4:  # slopes 2^-2 … 2^-8 exactly: the same bits
        assert torch.equal(got, want)
    else:  # BLOOM's float32 powers of 2^-0.5 are within an ulp of the float64 slopes
        torch.testing.assert_close(got, want, rtol=2e-7, atol=0)


@pytest.mark.parametrize("heads", [4, 6])
def test_mpt_adds_its_alibi_and_causal_mask(heads: int) -> None:
    """MPT: slopes · (k − S + 1) from its ``max_seq_len`` row, masked_fill ``finfo.min``."""
    config = transformers.MptConfig(
        n_layers=1,
        n_heads=heads,
        d_model=heads * 4,
        vocab_size=32,
        max_seq_len=16,
        attn_implementation="eager",
    )
    model = transformers.MptModel(config).eval()
    with torch.no_grad():
        model.blocks[0].attn.Wqkv.weight.zero_()
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model, lambda: model(input_ids=ids, attention_mask=torch.tensor(PADDED)))
    got = _posenc(
        seq_len=7,
        attention_mask=PADDED,
        position_bias="alibi",
        num_heads=heads,
        alibi_form="from_last",
    )
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0)


def _t5(heads: int, buckets: int, distance: int, seed: int) -> Any:
    config = transformers.T5Config(
        d_model=16,
        d_kv=4,
        d_ff=16,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=heads,
        relative_attention_num_buckets=buckets,
        relative_attention_max_distance=distance,
        vocab_size=32,
        attn_implementation="eager",
    )
    model = transformers.T5Model(config).eval()
    table = relative_bias_table(buckets, heads, seed=seed)
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            attention = stack.block[0].layer[0].SelfAttention
            attention.q.weight.zero_()
            attention.relative_attention_bias.weight.copy_(table)
    return model


@pytest.mark.parametrize(("buckets", "distance"), [(32, 128), (8, 6)])
def test_t5_encoder_adds_bidirectional_buckets_and_padding(buckets: int, distance: int) -> None:
    """T5's encoder: ``compute_bias`` with bidirectional buckets, plus its padding mask."""
    model = _t5(3, buckets, distance, seed=5)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model.encoder, lambda: model.encoder(ids, attention_mask=torch.tensor(PADDED)))
    got = _posenc(
        seq_len=7,
        kind="bidirectional",
        attention_mask=PADDED,
        position_bias="relative",
        num_heads=3,
        num_buckets=buckets,
        max_distance=distance,
        seed=5,
    )
    assert torch.equal(got, want)


@pytest.mark.parametrize(("buckets", "distance"), [(32, 128), (8, 6)])
def test_t5_decoder_adds_one_way_buckets_and_causal_mask(buckets: int, distance: int) -> None:
    """T5's decoder self-attention: one-way buckets, the causal mask and padding."""
    model = _t5(2, buckets, distance, seed=1)
    hidden = torch.zeros(3, 7, 16)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(
        model.decoder,
        lambda: model.decoder(
            input_ids=ids, attention_mask=torch.tensor(PADDED), encoder_hidden_states=hidden
        ),
    )
    got = _posenc(
        seq_len=7,
        attention_mask=PADDED,
        position_bias="relative",
        num_heads=2,
        num_buckets=buckets,
        max_distance=distance,
        seed=1,
    )
    assert torch.equal(got, want)


def test_paper_form_is_posenc_alibi_under_the_mask() -> None:
    """Paper form on a causal layer after a cache is /v1/biases/alibi's causal bias (−inf above
    the diagonal), and on a sliding layer the same values cut to the window."""
    got = _posenc(seq_len=3, key_len=8, position_bias="alibi", num_heads=5, masked_value="-inf")
    assert torch.equal(got[0], alibi_bias(5, 3, 8))
    sliding = _posenc(
        seq_len=8, kind="sliding", window=3, position_bias="alibi", num_heads=2,
        masked_value="-inf",
    )  # fmt: skip
    whole = alibi_bias(2, 8)
    q, k = torch.arange(8)[:, None], torch.arange(8)[None, :]
    assert torch.equal(sliding[0], whole.masked_fill(k <= q - 3, float("-inf")))


def test_hand_worked_combined() -> None:
    """Two heads (slopes 2^-4, 2^-8), a window of 2 and a padded first key, BLOOM's form."""
    got = _posenc(
        seq_len=4, kind="sliding", window=2, attention_mask=[[0, 1, 1, 1]],
        position_bias="alibi", num_heads=2, alibi_form="key_index", masked_value="-inf",
    )  # fmt: skip
    inf = float("-inf")
    # real keys count 0, 0, 1, 2 (the pad counts 0); key 0 is padding
    head0 = [[inf, inf, inf, inf], [inf, 0.0, inf, inf], [inf, 0.0, 1 / 16, inf],
             [inf, inf, 1 / 16, 2 / 16]]  # fmt: skip
    assert torch.equal(got[0, 0], torch.tensor(head0))
    assert torch.equal(got[0, 1], torch.tensor(head0) / 16)


@pytest.mark.parametrize("rows", [1, 5, 13, 64])
def test_blocks_equal_the_whole(rows: int) -> None:
    rule = mask_rule("sliding", window=3)
    inputs = mask_inputs(rule, 5, 7, attention_mask=[[0, 1, 1, 1, 1, 1, 1], [1] * 7])
    for bias in (position_bias("alibi", num_heads=3, alibi_form="key_index"),
                 position_bias("relative", num_heads=3, num_buckets=8, max_distance=6)):  # fmt: skip
        blocks = combined_blocks(rule, inputs, bias)
        whole = blocks.whole()
        assert torch.equal(blocks.whole(rows * 7 * 4), whole)
        parts = [blocks.fill(a, b) for a, b in blocks.ranges(rows * 7 * 4)]
        assert torch.equal(torch.cat(parts).reshape(whole.shape), whole)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"as": "combined"}, "position_bias"),
        ({"as": "combined", "position_bias": "alibi"}, "num_heads"),
        ({"as": "mask", "position_bias": "relative", "num_heads": 2}, "position_bias"),
        (
            {
                "as": "combined",
                "position_bias": "relative",
                "num_heads": 2,
                "num_buckets": 8,
                "max_distance": 4,
            },
            "max_distance",
        ),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        resolve.compute(MASKS, resolve.resolve_fields(MASKS, {"seq_len": 4, **fields}))
    assert e.value.field == field


def test_a_huge_table_is_refused_before_it_is_made() -> None:
    from posenc.errors import TooLarge

    fields = {"seq_len": 2, "as": "combined", "position_bias": "relative", "num_heads": 4,
              "num_buckets": 2**30}  # fmt: skip
    with pytest.raises(TooLarge) as e:
        resolve.resolve_fields(MASKS, fields)
        resolve.compute(MASKS, resolve.resolve_fields(MASKS, fields))
    assert e.value.field == "num_buckets"

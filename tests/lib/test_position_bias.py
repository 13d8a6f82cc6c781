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

from posenc import resolve
from posenc.attention.masks import combined_blocks, mask_inputs, mask_rule
from posenc.attention.position_bias import position_bias
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.relative_schemes.alibi import alibi_bias, alibi_slopes
from posenc.relative_schemes.relative import relative_bias_table

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
    from posenc.core.errors import TooLarge

    fields = {"seq_len": 2, "as": "combined", "position_bias": "relative", "num_heads": 4,
              "num_buckets": 2**30}  # fmt: skip
    with pytest.raises(TooLarge) as e:
        resolve.resolve_fields(MASKS, fields)
        resolve.compute(MASKS, resolve.resolve_fields(MASKS, fields))
    assert e.value.field == "num_buckets"


# ---------------------------------------------------------------------------------------------
# From a model's config alone: the bias settings read as the model's own code reads them
# ---------------------------------------------------------------------------------------------

# What the transformers model is shrunk to (layers, vocabulary, width): none of it changes the
# tensor a first layer hands to softmax once its queries are zero, and posenc never sees it.
_SMALL = {"vocab_size": 32}


def _default(cls: str) -> dict[str, Any]:
    """transformers' own default config of a model, as a config.json holds it."""
    return getattr(transformers, cls)().to_dict()


def _bloom_model(config: dict[str, Any]) -> Any:
    heads = config.get("n_head") or config.get("num_attention_heads")
    small = {**config, **_SMALL, "n_layer": 1, "hidden_size": heads * 4}
    small.pop("num_attention_heads", None)
    model = transformers.BloomModel(
        transformers.BloomConfig(**{**small, "n_head": heads}, attn_implementation="eager")
    ).eval()
    with torch.no_grad():
        model.h[0].self_attention.query_key_value.weight.zero_()
        model.h[0].self_attention.query_key_value.bias.zero_()
    return model


@pytest.mark.parametrize(
    "config",
    [_default("BloomConfig"), model_config("bloom-560m")],
    ids=["default", "bloom-560m"],
)
def test_bloom_from_its_config(config: dict[str, Any]) -> None:
    """BLOOM's config alone gives alibi, its heads (default 8; 560m: n_head 16) and the
    key_index form: the same tensor as BLOOM's softmax input, padded."""
    model = _bloom_model(config)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model, lambda: model(input_ids=ids, attention_mask=torch.tensor(PADDED)))
    got = _posenc(seq_len=7, attention_mask=PADDED, config=config)
    assert got.shape[1] == model.config.n_head
    # BLOOM multiplies its float32 slopes by the key counts in float32: within 3 ulps
    torch.testing.assert_close(got, want, rtol=4e-7, atol=0)


def _mpt_model(config: dict[str, Any]) -> Any:
    heads = config["n_heads"]
    small = {**config, **_SMALL, "n_layers": 1, "d_model": heads * 4}
    model = transformers.MptModel(
        transformers.MptConfig(**small, attn_implementation="eager")
    ).eval()
    with torch.no_grad():
        model.blocks[0].attn.Wqkv.weight.zero_()
    return model


_MPT_4 = {**model_config("mpt-7b"), "n_heads": 6, "attn_config": {"alibi_bias_max": 4}}


@pytest.mark.parametrize(
    "config",
    [_default("MptConfig"), model_config("mpt-7b")],
    ids=["default", "mpt-7b"],
)
def test_mpt_from_its_config(config: dict[str, Any]) -> None:
    """MPT's config alone gives alibi, n_heads (default 16; 7b: 32), attn_config's
    alibi_bias_max (8) and the from_last form."""
    model = _mpt_model(config)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model, lambda: model(input_ids=ids, attention_mask=torch.tensor(PADDED)))
    got = _posenc(seq_len=7, attention_mask=PADDED, config=config)
    assert got.shape[1] == config["n_heads"]
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0)


def test_mpt_alibi_bias_max_is_read_as_mpts_own_code_reads_it() -> None:
    """``attn_config.alibi_bias_max`` 4 gives the slopes of MPT's own ``gen_slopes`` (posenc's
    ``alibi_slopes(H, 4)``); transformers' ``MptModel`` never passes it to
    ``build_mpt_alibi_tensor`` (always 8), so its tensor is posenc's with ``max_bias: 8``."""
    model = _mpt_model(_MPT_4)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model, lambda: model(input_ids=ids, attention_mask=torch.tensor(PADDED)))
    assert _meta(config=_MPT_4)["position_bias"]["max_bias"] == 4.0
    got = _posenc(seq_len=7, attention_mask=PADDED, config=_MPT_4, max_bias=8)
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0)
    four = _posenc(seq_len=7, config=_MPT_4)
    slopes = alibi_slopes(6, 4.0, dtype=torch.float64)
    last = torch.arange(-6, 1, dtype=torch.float64)  # k − S + 1 on the last row
    torch.testing.assert_close(four[0, :, -1].double(), slopes[:, None] * last, rtol=1e-7, atol=0)


def _t5_family(cls: str, config: dict[str, Any], seed: int) -> Any:
    """A one-layer model of T5's family from ``config``, queries zeroed, every self-attention
    table posenc's seeded one."""
    heads = config["num_heads"]
    small = {**config, **_SMALL, "d_model": 16, "d_kv": 4, "d_ff": 16, "num_layers": 1,
             "num_decoder_layers": 1}  # fmt: skip
    config_class = getattr(transformers, cls.split("Model")[0].split("For")[0] + "Config")
    model = getattr(transformers, cls)(config_class(**small, attn_implementation="eager")).eval()
    table = relative_bias_table(config["relative_attention_num_buckets"], heads, seed=seed)
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            attention = stack.block[0].layer[0].SelfAttention
            attention.q.weight.zero_()
            attention.relative_attention_bias.weight.copy_(table)
    return model


_T5_CASES = [
    ("T5Model", _default("T5Config")),
    ("T5Model", model_config("t5-small")),
    (
        "T5Model",
        {
            **model_config("t5-small"),
            "relative_attention_num_buckets": 8,
            "relative_attention_max_distance": 6,
        },
    ),
    ("MT5Model", _default("MT5Config")),
    ("UMT5Model", _default("UMT5Config")),
    ("SwitchTransformersModel", _default("SwitchTransformersConfig")),
    ("Pop2PianoForConditionalGeneration", _default("Pop2PianoConfig")),
]
_T5_IDS = ["t5-default", "t5-small", "t5-8-buckets", "mt5-default", "umt5-default",
           "switch-default", "pop2piano-default"]  # fmt: skip


@pytest.mark.parametrize(("cls", "config"), _T5_CASES, ids=_T5_IDS)
def test_t5_encoder_from_its_config(cls: str, config: dict[str, Any]) -> None:
    """The config alone: relative, its heads (T5 8, mT5 6), buckets and distance, and its
    layers bidirectional (the encoder), as the encoder's softmax input with padding."""
    model = _t5_family(cls, config, seed=3)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(model.encoder, lambda: model.encoder(ids, attention_mask=torch.tensor(PADDED)))
    got = _posenc(seq_len=7, attention_mask=PADDED, config=config, seed=3)
    assert got.shape[1] == config["num_heads"]
    assert torch.equal(got, want)


@pytest.mark.parametrize(("cls", "config"), _T5_CASES[1:3], ids=_T5_IDS[1:3])
@pytest.mark.parametrize("how", ["kind", "is_decoder"])
def test_t5_decoder_from_its_config(cls: str, config: dict[str, Any], how: str) -> None:
    """The decoder's self-attention: kind: causal over the whole file, or the decoder's own
    config (is_decoder: true, as T5Stack copies it): one-way buckets and the causal mask."""
    model = _t5_family(cls, config, seed=4)
    ids = torch.ones(3, 7, dtype=torch.int64)
    want = _scores(
        model.decoder,
        lambda: model.decoder(
            input_ids=ids, attention_mask=torch.tensor(PADDED),
            encoder_hidden_states=torch.zeros(3, 7, 16),
        ),
    )  # fmt: skip
    fields: dict[str, Any] = (
        {"config": config, "kind": "causal"}
        if how == "kind"
        else {"config": {**config, "is_decoder": True}}
    )
    got = _posenc(seq_len=7, attention_mask=PADDED, seed=4, **fields)
    assert torch.equal(got, want)


def _meta(**fields: Any) -> dict[str, Any]:
    params = resolve.resolve_fields(MASKS, {"seq_len": 4, "as": "combined", **fields})
    meta: dict[str, Any] = MASKS.meta(params)  # type: ignore[misc]
    return meta


def test_request_fields_win_over_the_config() -> None:
    """num_heads, max_bias, alibi_form, num_buckets and max_distance given replace the
    config's; the rest still comes from it."""
    bloom = model_config("bloom-560m")
    assert _meta(config=bloom)["position_bias"] == {
        "kind": "alibi", "num_heads": 16, "max_bias": 8.0, "alibi_form": "key_index",
    }  # fmt: skip
    assert _meta(config=bloom, num_heads=4, alibi_form="paper", max_bias=4)["position_bias"] == {
        "kind": "alibi", "num_heads": 4, "max_bias": 4.0, "alibi_form": "paper",
    }  # fmt: skip
    t5 = _meta(config=model_config("t5-small"), num_buckets=16)["position_bias"]
    assert (t5["num_heads"], t5["num_buckets"], t5["max_distance"]) == (8, 16, 128)
    assert t5["bidirectional"] is True
    assert (
        _meta(config=model_config("t5-small"), kind="causal")["position_bias"]["bidirectional"]
        is False
    )
    explicit = _posenc(seq_len=5, config=bloom, num_heads=4, alibi_form="paper")
    plain = _posenc(seq_len=5, position_bias="alibi", num_heads=4)
    assert torch.equal(explicit, plain)


_LLAMA = {"model_type": "llama", "num_attention_heads": 4, "hidden_size": 256,
          "num_hidden_layers": 2}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (
            {"config": {**model_config("falcon-7b"), "alibi": True}},
            "config.alibi",
            "1/sqrt(head_dim)",
        ),
        (
            {"config": model_config("t5-small"), "position_bias": "alibi"},
            "position_bias",
            "relative",
        ),
        (
            {"config": model_config("bloom-560m"), "position_bias": "relative"},
            "position_bias",
            "alibi",
        ),
        ({"config": model_config("bloom-560m"), "num_buckets": 8}, "num_buckets", "ALiBi"),
        ({"config": model_config("mpt-7b"), "max_distance": 8}, "max_distance", "ALiBi"),
        ({"config": model_config("t5-small"), "alibi_form": "paper"}, "alibi_form", "T5"),
        ({"config": model_config("t5-small"), "max_bias": 4}, "max_bias", "T5"),
        ({"config": _LLAMA}, "config", "rope"),
        ({"config": _LLAMA, "position_bias": "alibi", "num_heads": 4}, "position_bias", "rope"),
        ({"config": _default("LongT5Config")}, "config", "local blocks"),
        ({"config": _default("UdopConfig")}, "config", "layout"),
    ],
)
def test_conflicts_with_the_model_name_the_field(
    fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        resolve.resolve_fields(MASKS, {"seq_len": 4, "as": "combined", **fields})
    assert e.value.field == field
    assert words in str(e.value)


def test_longt5_decoder_is_t5s_table() -> None:
    """LongT5's encoder is refused, its decoder's self-attention (kind: causal) is served."""
    config = _default("LongT5Config")
    got = _posenc(seq_len=5, config=config, kind="causal")
    want = _posenc(seq_len=5, position_bias="relative", num_heads=8)
    assert torch.equal(got, want)
